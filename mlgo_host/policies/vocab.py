"""Per-feature quantile vocabularies (directories of ``<feature>.buckets``, docs/formats.md) and the
numpy reference of the feature normalization (:mod:`mlgo_host.learning.preprocessing` is the TF
one).  A value ``v`` normalizes (in float32, as ``tf.raw_ops.Bucketize``) to ``x = #(b <= v) / len(b)``,
then ``x*x``, ``sqrt(x)``, the z-score against the boundaries (0 where not finite or std is 0), as enabled.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Iterable, Mapping

import numpy as np

from mlgo_host.errors import ConfigError
from mlgo_host.fsutil import dir_built_aside

BUCKETS_SUFFIX = ".buckets"
DEFAULT_NUM_BUCKETS = 1000
_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


@dataclasses.dataclass(frozen=True)
class NormConfig:
    """Which normalized outputs each feature value gets (as ml-compiler-opt's options)."""

    with_square: bool = True
    with_sqrt: bool = False
    with_z_score: bool = False
    eps: float = 1e-8

    @property
    def width(self) -> int:
        return 1 + int(self.with_square) + int(self.with_sqrt) + int(self.with_z_score)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: Mapping) -> "NormConfig":
        try:
            return cls(**{k: d[k] for k in ("with_square", "with_sqrt", "with_z_score", "eps") if k in d})
        except TypeError as e:
            raise ConfigError(f"bad normalization config {dict(d)!r}: {e}") from None


class FeatureVocab:
    """The boundaries of one feature and the constants its normalization needs."""

    __slots__ = ("name", "raw", "boundaries", "mean32", "scale32", "z_enabled")

    def __init__(self, name: str, boundaries: Iterable[float], eps: float = 1e-8):
        raw = np.asarray(list(boundaries) if not isinstance(boundaries, np.ndarray) else boundaries, dtype=np.float64)
        if raw.ndim != 1 or raw.size == 0:
            raise ConfigError(f"vocab {name!r}: needs at least one boundary")
        if not np.all(np.isfinite(raw)):
            raise ConfigError(f"vocab {name!r}: boundaries must be finite numbers")
        if np.any(np.diff(raw) < 0):
            raise ConfigError(f"vocab {name!r}: boundaries are not sorted")
        self.name = name
        #: float64 values as written in the file (mean and std use these)
        self.raw = raw
        #: the float32 boundaries Bucketize compares against
        self.boundaries = raw.astype(np.float32)
        self.mean32 = np.float32(np.mean(raw))
        std = float(np.std(raw))
        self.scale32 = np.float32(std + eps)
        #: a constant feature (std 0) gets a z-score of 0, not (v - c) / eps
        self.z_enabled = std > 0.0

    @property
    def n(self) -> int:
        return int(self.raw.size)

    def bucket(self, values) -> np.ndarray:
        """Number of boundaries <= float32(value), elementwise (int64)."""
        v = np.asarray(values).astype(np.float32)
        return np.searchsorted(self.boundaries, v, side="right").astype(np.int64)

    def normalize(self, values, cfg: NormConfig) -> np.ndarray:
        """float32 array of shape ``values.shape + (cfg.width,)``."""
        v = np.asarray(values)
        out = self.values_table(cfg)[self.bucket(v)]
        if cfg.with_z_score:
            with np.errstate(invalid="ignore", over="ignore"):
                z = (v.astype(np.float32) - self.mean32) / self.scale32
            ok = np.isfinite(z) if self.z_enabled else np.zeros(z.shape, bool)
            out = np.concatenate([out, np.where(ok, z, np.float32(0.0))[..., None]], axis=-1)
        return out.astype(np.float32, copy=False)

    def values_table(self, cfg: NormConfig) -> np.ndarray:
        """Normalized outputs of every bucket 0..n, z-score excluded: shape (n + 1, width without z)."""
        x = np.arange(self.n + 1, dtype=np.float32) / np.float32(self.n)
        outs = [x]
        if cfg.with_square:
            outs.append(x * x)
        if cfg.with_sqrt:
            outs.append(np.sqrt(x))
        return np.stack(outs, axis=-1)


def _read_boundaries(path: str) -> list[float]:
    vals = []
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                s = line.strip()
                if not s:
                    continue
                try:
                    vals.append(float(s))
                except ValueError:
                    raise ConfigError(f"{path}:{lineno}: not a number: {s[:40]!r}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not a text file of numbers ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise ConfigError(f"{path}: unreadable: {e.strerror or e}") from None
    return vals


class Vocab(dict[str, FeatureVocab]):
    """Feature name -> :class:`FeatureVocab`, loaded from or saved to a vocab directory."""

    def names(self) -> list[str]:
        return sorted(self)

    @classmethod
    def load(cls, directory: str, names: Iterable[str] | None = None, eps: float = 1e-8) -> "Vocab":
        """Read ``<feature>.buckets`` files (all, or only ``names``)."""
        if not os.path.isdir(directory):
            raise ConfigError(f"vocab directory {directory!r} does not exist")
        wanted = None if names is None else set(names)
        feats: dict[str, FeatureVocab] = {}
        for fn in sorted(os.listdir(directory)):
            if not fn.endswith(BUCKETS_SUFFIX):
                continue
            name = fn[: -len(BUCKETS_SUFFIX)]
            if wanted is not None and name not in wanted:
                continue
            path = os.path.join(directory, fn)
            vals = _read_boundaries(path)
            try:
                feats[name] = FeatureVocab(name, vals, eps=eps)
            except ConfigError as e:
                raise ConfigError(f"{path}: {e}") from None
        if not feats and wanted != set():
            raise ConfigError(f"vocab directory {directory!r} has no *{BUCKETS_SUFFIX} files")
        return cls(feats)

    def save(self, directory: str) -> None:
        """Write the vocab directory atomically (built aside, replacing an existing one)."""
        with dir_built_aside(directory) as tmp:
            self.write_into(tmp)

    def write_into(self, directory: str) -> None:
        """Write the ``.buckets`` files into an existing (private) directory."""
        for name, fv in self.items():
            if not _NAME_RE.match(name):
                raise ConfigError(f"feature name {name!r} cannot be a file name")
            with open(os.path.join(directory, name + BUCKETS_SUFFIX), "w", encoding="utf-8") as f:
                f.write("".join(f"{float(x)!r}\n" for x in fv.raw))


class VocabBuilder:
    """Accumulates the flattened feature values of structured observation arrays (optionally of a
    seeded sample of them) and computes the quantile vocab."""

    def __init__(self, sampling_fraction: float = 1.0, seed: int = 0, exclude: Iterable[str] = ()):
        if not 0.0 < sampling_fraction <= 1.0:
            raise ConfigError(f"sampling_fraction must be in (0, 1], got {sampling_fraction}")
        self.fraction = sampling_fraction
        self.rng = np.random.default_rng(seed)
        self.exclude = set(exclude)
        self._chunks: dict[str, list[np.ndarray]] = {}
        self.observations = 0

    def add(self, records: np.ndarray) -> None:
        if records.size == 0:
            return
        if self.fraction < 1.0:
            records = records[self.rng.random(records.shape[0]) < self.fraction]
            if records.size == 0:
                return
        self.observations += int(records.shape[0])
        for name in records.dtype.names or ():
            if name not in self.exclude:
                self._chunks.setdefault(name, []).append(np.ravel(records[name]).astype(np.float64))

    def build(self, num_buckets: int = DEFAULT_NUM_BUCKETS) -> Vocab:
        """``num_buckets`` quantiles of each feature's finite values (no vocab for a feature without)."""
        if self._chunks and not 1 <= num_buckets <= DEFAULT_NUM_BUCKETS:
            raise ConfigError(f"num_buckets must be in [1, {DEFAULT_NUM_BUCKETS}], got {num_buckets}")
        feats = {}
        for name, chunks in self._chunks.items():
            v = np.concatenate(chunks)
            v = v[np.isfinite(v)]
            if v.size:
                feats[name] = FeatureVocab(name, np.quantile(v, np.linspace(0.0, 1.0, num_buckets)))
        return Vocab(feats)


def int_thresholds(boundaries_f32: np.ndarray) -> np.ndarray:
    """For integer inputs: the smallest int64 ``t`` with ``float32(t) >= b`` per boundary ``b``, so
    ``bucket(v) == #(t <= v)`` without converting ``v``; clamped to +/- 2**62 (as the fast path clips)."""
    b = np.asarray(boundaries_f32, dtype=np.float32).astype(np.float64)
    lim = float(2**62)
    # |b| <= 2**24: every integer up to there is a float32, so t = ceil(b)
    out = np.ceil(np.clip(b, -lim, lim)).astype(np.int64)
    out[b <= -lim] = -(2**62)
    out[b > lim] = 2**62
    # above, the integers from halfway between x and the float32 below it round up to x as well (int64 ->
    # float32 rounds to nearest, as C++; a tie to the even significand, x's when its last bit is 0)
    big = (np.abs(b) > 2**24) & (np.abs(b) <= lim)
    x = b[big].astype(np.float32)
    below = np.nextafter(x, np.float32(-np.inf)).astype(np.int64)
    out[big] = below + (x.astype(np.int64) - below) // 2 + (x.view(np.int32) & 1)
    return out
