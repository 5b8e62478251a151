"""The tf-agents specs of a policy's observations, action and time steps; records as observations."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from mlgo_host.errors import ConfigError
from mlgo_host.learning.preprocessing import TF_DTYPES
from mlgo_host.policies.specs import DISCARD, SAME_NAMES, InputBinding, PolicySpec


def observation_spec(spec: PolicySpec) -> dict[str, tf.TensorSpec]:
    """Every observation feature (as ml-compiler-opt's), shapes without the leading 1s."""
    return {f.name: tf.TensorSpec(shape=f.tf_shape, dtype=TF_DTYPES[f.ctype], name=f.name) for f in spec.features}


def action_spec(spec: PolicySpec) -> tensor_spec.BoundedTensorSpec:
    return tensor_spec.BoundedTensorSpec(shape=(), dtype=tf.int64, minimum=0, maximum=spec.num_actions - 1,
                                         name=spec.action.name)


def time_step_spec(spec: PolicySpec) -> ts.TimeStep:
    return ts.time_step_spec(observation_spec(spec), tf.TensorSpec(shape=(), dtype=tf.float32, name="reward"))


def numpy_observations(spec: PolicySpec, features: Any, n: int | None = None,
                       binding: InputBinding = SAME_NAMES) -> dict[str, np.ndarray]:
    """Every spec feature of N records as numpy arrays of TF shapes, each input read from the feature
    ``binding`` names; missing discarded features are zeros."""
    names = set(features.dtype.names) if hasattr(features, "dtype") and features.dtype.names else set(features)
    if n is None:
        first = next(binding.source(f.name) for f in spec.features if binding.source(f.name) in names)
        n = int(np.asarray(features[first]).shape[0])
    out = {}
    for f in spec.features:
        shape = (n,) + f.tf_shape
        src = binding.source(f.name) if f.role != DISCARD else f.name
        if src in names:
            out[f.name] = np.ascontiguousarray(np.asarray(features[src]).reshape(shape), dtype=f.dtype)
        elif f.role == DISCARD:
            out[f.name] = np.zeros(shape, dtype=f.dtype)
        else:
            raise ConfigError(f"the episodes have no feature {src!r}, which the policy uses")
    return out
