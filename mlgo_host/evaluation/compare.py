"""Is one policy's total really smaller than another's on the same modules?  The best of many candidates on one
validation split is biased even when none is better, so a candidate replaces a measured baseline only when its
saving survives a paired bootstrap over modules: one module's saving does not pass, one spread over many does."""

from __future__ import annotations

from typing import Mapping

import numpy as np

ALPHA = 0.05
SAMPLES = 2000


def significantly_smaller(new: Mapping[str, int], old: Mapping[str, int]) -> bool:
    """Whether ``new``'s total over the modules both measured is smaller than ``old``'s in at least
    ``1 - ALPHA`` of ``SAMPLES`` paired bootstrap resamples of the modules (seeded)."""
    d = np.array([old[n] - new[n] for n in sorted(set(new) & set(old))], dtype=np.float64)  # bytes saved
    if len(d) == 0 or d.sum() <= 0:
        return False
    rng = np.random.default_rng(0)
    totals = d[rng.integers(0, len(d), size=(SAMPLES, len(d)))].sum(axis=1)
    return float(np.mean(totals > 0)) >= 1.0 - ALPHA
