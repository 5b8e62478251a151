"""Learning: everything that imports TensorFlow and tf-agents (nothing below this floor does;
``tests/test_layers.py`` checks it).  The policy in TF, PPO, behavioural cloning and imitation; the loops
driving them are in :mod:`mlgo_host.training`.
"""

import sys
import types

# tf-agents imports Gym, whose gym_notices prints a deprecation banner with print()
# (no warnings filter reaches it); an empty notice table in place first keeps it out.
sys.modules.setdefault("gym_notices.notices", types.ModuleType("gym_notices.notices"))
sys.modules["gym_notices.notices"].__dict__.setdefault("notices", {})
