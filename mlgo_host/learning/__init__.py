"""Learning: everything that imports TensorFlow and tf-agents, and nothing
below this floor does (``tests/test_layers.py`` checks it; the workers answer
decisions with the numpy actor).

* the policy in TF: ``preprocessing`` (the vocab normalization as Keras
  layers), ``tensor_specs``, ``networks``, ``weights`` (TF <-> the numpy
  actor), ``export`` (saved policy directories, SavedModel);
* PPO: ``ppo`` (the tf-agents agent), ``trajectories`` (episodes -> training
  batches), ``learner`` (one run's agent, its training step and
  checkpoints), ``summaries`` (TensorBoard);
* supervised: ``bc`` (behavioural cloning of the default heuristic),
  ``imitate`` (weighted cloning of searched decisions, then the gate).

The loops that drive them are one floor up, in :mod:`mlgo_host.training`.
"""

import sys
import types

# tf-agents imports Gym, and Gym 0.23 prints a deprecation banner (from the
# gym_notices package, with print(), so no warnings filter or environment
# variable reaches it) on every `mlgo-host train`.  Gym is never used here:
# tf-agents imports it for its Gym environment wrappers.  An empty notice
# table, in place before Gym looks it up, keeps the banner out of every run.
sys.modules.setdefault("gym_notices.notices", types.ModuleType("gym_notices.notices"))
sys.modules["gym_notices.notices"].__dict__.setdefault("notices", {})
