"""Training: the TF learner side (tf_agent, tf_features, learner, export,
bc, summaries), the loops, and the TF-free traces and evaluation workers
(which run on :mod:`mlgo_host.workers`' pools)."""

import sys
import types

# tf-agents imports Gym, and Gym 0.23 prints a deprecation banner (from the
# gym_notices package, with print(), so no warnings filter or environment
# variable reaches it) on every `mlgo-host train`.  Gym is never used here:
# tf-agents imports it for its Gym environment wrappers.  An empty notice
# table, in place before Gym looks it up, keeps the banner out of every run.
sys.modules.setdefault("gym_notices.notices", types.ModuleType("gym_notices.notices"))
sys.modules["gym_notices.notices"].__dict__.setdefault("notices", {})
