"""The TF feature normalization equals the numpy one (policies/vocab.py),
bit for bit, on integers and floats around every bucket boundary."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from _policy_helpers import NORM_CONFIGS, NORM_IDS  # noqa: E402

from mlgo_host.learning.preprocessing import normalize_fn  # noqa: E402
from mlgo_host.policies.vocab import FeatureVocab, NormConfig  # noqa: E402


@pytest.mark.parametrize("cfg", NORM_CONFIGS + [NormConfig(with_square=False)], ids=NORM_IDS + ["linear"])
def test_normalization_numpy_equals_tf(cfg):
    rng = np.random.default_rng(0)
    raw = np.sort(np.concatenate([rng.normal(0, 50, 200), rng.integers(0, 40, 300), [2.0**24 + 1, 3e9, -7.5]]))
    fv = FeatureVocab("f", raw)
    b = fv.boundaries.astype(np.float64)
    ints = np.concatenate([rng.integers(-400, 400, 2000), np.round(b).astype(np.int64), np.round(b).astype(np.int64) + 1,
                           [0, -1, 2**24, 2**24 + 1, 2**24 + 3, 3 * 10**9, 2**62, -(2**62), 2**63 - 1]])
    floats = np.concatenate([rng.normal(0, 80, 2000), b, np.nextafter(b, np.inf), np.nextafter(b, -np.inf),
                             [np.inf, -np.inf, np.nan, -0.0, 0.0, 1e38, -1e38]]).astype(np.float32)
    f = normalize_fn(fv, cfg)
    ints = ints[: ints.size // 4 * 4]
    for v in (ints, ints.reshape(-1, 4), floats, floats.astype(np.float64)):
        want = fv.normalize(v, cfg)
        got = f(tf.constant(v)).numpy()
        assert got.shape == want.shape == v.shape + (cfg.width,)
        np.testing.assert_array_equal(got, want)
