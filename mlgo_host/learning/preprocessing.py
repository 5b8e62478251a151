"""The vocab normalization (:meth:`FeatureVocab.normalize`, which tests check it equals) as TF preprocessing
layers: ``Bucketize`` over the number of boundaries, then ``x*x``, ``sqrt(x)`` and the z-score as configured.
"""

from __future__ import annotations

from typing import Callable

import gin
import numpy as np
import tensorflow as tf

from mlgo_host.policies.specs import BINARY, INPUT, PolicySpec
from mlgo_host.policies.vocab import FeatureVocab, NormConfig, Vocab

#: gin-configurable normalization options (``NormConfig.with_sqrt = True`` ...)
GinNormConfig = gin.external_configurable(NormConfig, "NormConfig")

TF_DTYPES = {
    "float": tf.float32, "double": tf.float64, "int8_t": tf.int8, "uint8_t": tf.uint8, "int16_t": tf.int16,
    "uint16_t": tf.uint16, "int32_t": tf.int32, "uint32_t": tf.uint32, "int64_t": tf.int64, "uint64_t": tf.uint64,
}


def normalize_fn(fv: FeatureVocab, cfg: NormConfig) -> Callable[[tf.Tensor], tf.Tensor]:
    """``obs [...] -> float32 [..., cfg.width]``."""
    boundaries = [float(x) for x in fv.boundaries]  # float32 values, exactly representable
    n = tf.constant(np.float32(fv.n))
    mean = tf.constant(fv.mean32)
    scale = tf.constant(fv.scale32)

    def normalize(obs):
        v = tf.expand_dims(tf.cast(obs, tf.float32), -1)
        x = tf.cast(tf.raw_ops.Bucketize(input=v, boundaries=boundaries), tf.float32) / n
        outs = [x]
        if cfg.with_square:
            outs.append(x * x)
        if cfg.with_sqrt:
            outs.append(tf.sqrt(x))
        if cfg.with_z_score:
            z = (v - mean) / scale
            ok = tf.math.is_finite(z) if fv.z_enabled else tf.zeros_like(z, tf.bool)
            outs.append(tf.where(ok, z, tf.zeros_like(z)))
        return tf.concat(outs, axis=-1)

    return normalize


def _tile_columns(fn, width: int):
    """A scalar feature of an eviction policy (``[N, w]``), repeated for every column."""
    return lambda obs: tf.tile(tf.expand_dims(fn(obs), -2), [1, width, 1])


def _discard(*width: int):
    """A zero-width float32 output of an unused feature: ``[N, 0]``, or ``[N, W, 0]`` given ``width`` (eviction)."""
    return lambda obs: tf.zeros(tf.stack([tf.shape(obs)[0], *width, 0]), tf.float32)


def preprocessing_layers(spec: PolicySpec, vocab: Vocab, cfg: NormConfig) -> dict[str, tf.keras.layers.Layer]:
    """A fresh Keras layer per observation feature (zero-width for discarded ones and the mask), giving
    ``[N, width]`` or ``[N, W, width]`` (eviction)."""
    layers = {}
    binary = spec.action.kind == BINARY
    for f in spec.features:
        if f.role != INPUT:
            fn = _discard() if binary else _discard(int(spec.width))  # type: ignore[arg-type]
        else:
            fn = normalize_fn(vocab[f.name], cfg)
            if not binary and f.size == 1:
                fn = _tile_columns(fn, int(spec.width))  # type: ignore[arg-type]
        layers[f.name] = tf.keras.layers.Lambda(fn, name=f"pre_{f.name}")
    return layers
