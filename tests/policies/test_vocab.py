"""Quantile vocab: files, quantiles, sampling, the float32 bucket semantics."""

from __future__ import annotations

import numpy as np
import pytest

from mlgo_host.errors import ConfigError
from mlgo_host.policies.vocab import FeatureVocab, NormConfig, Vocab, VocabBuilder, int_thresholds


def _records(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = np.dtype([("a", "<i8", (1,)), ("b", "<f4", (1, 4)), ("advice", "<i8", (1,))])
    r = np.zeros(n, dt)
    r["a"][:, 0] = rng.integers(-50, 5000, n)
    r["b"] = rng.exponential(3.0, (n, 1, 4)).astype(np.float32)
    r["b"][0, 0, 0] = np.inf  # non-finite values stay out of the quantiles
    r["advice"][:, 0] = rng.integers(0, 2, n)
    return r


def _build_vocab(records: np.ndarray, output_dir: str, num_buckets: int, exclude=()) -> Vocab:
    builder = VocabBuilder(exclude=exclude)
    builder.add(records)
    vocab = builder.build(num_buckets)
    vocab.save(output_dir)
    return vocab


def test_quantiles_files_round_trip(tmp_path):
    recs = _records(3000)
    vocab = _build_vocab(recs, str(tmp_path / "vocab"), num_buckets=100, exclude=("advice",))
    files = sorted(p.name for p in (tmp_path / "vocab").iterdir())
    assert files == ["a.buckets", "b.buckets"]
    lines = (tmp_path / "vocab" / "a.buckets").read_text().splitlines()
    assert len(lines) == 100
    a = recs["a"].ravel().astype(float)
    assert float(lines[0]) == a.min() and float(lines[-1]) == a.max()
    assert float(lines[50]) == pytest.approx(np.quantile(a, 50 / 99))
    b = recs["b"].ravel()
    assert float((tmp_path / "vocab" / "b.buckets").read_text().splitlines()[-1]) == float(b[np.isfinite(b)].max())
    back = Vocab.load(str(tmp_path / "vocab"))
    assert back.names() == vocab.names()
    for n in vocab.names():
        np.testing.assert_array_equal(back[n].raw, vocab[n].raw)
        assert back[n].mean32 == vocab[n].mean32 and back[n].scale32 == vocab[n].scale32


def test_save_replaces_the_directory_atomically(tmp_path):
    d = tmp_path / "v"
    _build_vocab(_records(200), str(d), num_buckets=10)
    (d / "stale.buckets").write_text("1\n")
    _build_vocab(_records(200, seed=1), str(d), num_buckets=10, exclude=("b",))
    assert sorted(p.name for p in d.iterdir()) == ["a.buckets", "advice.buckets"]
    assert not [p for p in tmp_path.iterdir() if p.name != "v"]  # no temp dirs left


def test_sampling_is_seeded_and_partial():
    recs = _records(4000)
    b1 = VocabBuilder(sampling_fraction=0.25, seed=3)
    b1.add(recs)
    b2 = VocabBuilder(sampling_fraction=0.25, seed=3)
    b2.add(recs)
    b3 = VocabBuilder(sampling_fraction=0.25, seed=4)
    b3.add(recs)
    assert 800 < b1.observations < 1200
    np.testing.assert_array_equal(b1.build(50)["a"].raw, b2.build(50)["a"].raw)
    assert not np.array_equal(b1.build(50)["a"].raw, b3.build(50)["a"].raw)
    with pytest.raises(ConfigError):
        VocabBuilder(sampling_fraction=0.0)


def test_bucket_counts_boundaries_at_or_below_the_float32_value():
    fv = FeatureVocab("f", [1.0, 2.0, 2.0, 2.0, 5.5, 16777217.0])
    # float32(16777217) == 16777216: the boundary and the value are compared in float32
    v = np.array([0, 1, 2, 3, 5, 6, 16777216, 16777217, 10**12], dtype=np.int64)
    np.testing.assert_array_equal(fv.bucket(v), [0, 1, 4, 4, 4, 5, 6, 6, 6])
    x = fv.normalize(v, NormConfig(with_square=True, with_sqrt=True, with_z_score=False))
    assert x.dtype == np.float32 and x.shape == (9, 3)
    np.testing.assert_array_equal(x[:, 0], fv.bucket(v).astype(np.float32) / np.float32(6))
    np.testing.assert_array_equal(x[:, 1], x[:, 0] * x[:, 0])
    np.testing.assert_array_equal(x[:, 2], np.sqrt(x[:, 0]))


def test_z_score_of_non_finite_values_is_zero():
    fv = FeatureVocab("f", [0.0, 1.0, 2.0])
    x = fv.normalize(np.array([np.inf, -np.inf, np.nan, 1.0], np.float32), NormConfig(with_z_score=True))
    assert np.all(np.isfinite(x))
    np.testing.assert_array_equal(x[:3, 2], 0.0)
    assert x[3, 2] == pytest.approx((1.0 - 1.0) / (np.std([0, 1, 2]) + 1e-8))
    np.testing.assert_array_equal(x[:, 0], np.float32([1, 0, 1, 2 / 3]))  # +inf, NaN: last bucket


@pytest.mark.parametrize("seed", range(3))
def test_integer_thresholds_match_float32_comparisons(seed):
    rng = np.random.default_rng(seed)
    b = np.sort(np.concatenate([rng.uniform(-1e3, 1e3, 30), rng.uniform(-3e9, 3e9, 30),
                                [2.0**24 + 1, 2.0**25 + 3, -(2.0**30) - 5, 0.5, -0.5]])).astype(np.float32)
    t = int_thresholds(b)
    vals = np.concatenate([rng.integers(-3 * 10**9, 3 * 10**9, 3000), np.round(b.astype(np.float64)).astype(np.int64),
                           np.round(b.astype(np.float64)).astype(np.int64) + 1,
                           np.round(b.astype(np.float64)).astype(np.int64) - 1, [2**24, 2**24 + 1, 2**25 + 2]])
    want = np.searchsorted(b, vals.astype(np.float32), side="right")
    got = np.searchsorted(t, vals, side="right")
    np.testing.assert_array_equal(got, want)


def test_bad_vocab_files_are_config_errors(tmp_path):
    (tmp_path / "x.buckets").write_text("1.0\nfoo\n")
    with pytest.raises(ConfigError, match=r"x.buckets:2: not a number"):
        Vocab.load(str(tmp_path))
    (tmp_path / "x.buckets").write_text("3\n1\n")
    with pytest.raises(ConfigError, match="not sorted"):
        Vocab.load(str(tmp_path))
    (tmp_path / "x.buckets").unlink()
    with pytest.raises(ConfigError, match="no \\*.buckets"):
        Vocab.load(str(tmp_path))
    with pytest.raises(ConfigError, match="does not exist"):
        Vocab.load(str(tmp_path / "missing"))
    builder = VocabBuilder()
    builder.add(_records(10))
    with pytest.raises(ConfigError):
        builder.build(1001)
