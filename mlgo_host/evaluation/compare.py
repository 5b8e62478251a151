"""Is one policy's total really smaller than another's on the same modules?

Choosing the best of many candidates (PPO iterations) by one validation
split picks, among equals, the one whose noise happened to help: the best
of twenty evaluations is biased even when none is better.  A candidate
therefore replaces a measured baseline (the warm start) only when its
saving is significant under a paired bootstrap over modules: the modules
are resampled with replacement, and the saving must stay positive in
``1 - alpha`` of the resamples.  A saving that one module carries does not
pass; one spread over many modules does.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

#: one-sided level of the test
ALPHA = 0.05
SAMPLES = 2000


def paired_saving(new: Mapping[str, int], old: Mapping[str, int]) -> np.ndarray:
    """Bytes ``new`` saves against ``old`` per module both measured (sorted by name)."""
    names = sorted(set(new) & set(old))
    return np.array([old[n] - new[n] for n in names], dtype=np.float64)


def significantly_smaller(new: Mapping[str, int], old: Mapping[str, int], *, alpha: float = ALPHA,
                          samples: int = SAMPLES, seed: int = 0) -> bool:
    """True when ``new``'s total over the modules both measured is smaller
    than ``old``'s in at least ``1 - alpha`` of ``samples`` paired bootstrap
    resamples of the modules (deterministic: ``seed``)."""
    d = paired_saving(new, old)
    if len(d) == 0 or d.sum() <= 0:
        return False
    rng = np.random.default_rng(seed)
    totals = d[rng.integers(0, len(d), size=(samples, len(d)))].sum(axis=1)
    return float(np.mean(totals > 0)) >= 1.0 - alpha
