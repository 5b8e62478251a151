"""Helpers shared by the policy tests."""

from __future__ import annotations

import numpy as np


def observations(header, episode):
    """The episode's observations as Observation objects (what a session hands a policy)."""
    from mlgo_host.channel.codec import Observation

    nb = header.observation_nbytes
    return [Observation(i, "", episode.raw[i * nb:(i + 1) * nb], header) for i in range(episode.n)]


def random_weights(input_dim: int, layers, outputs: int, seed: int = 0, gain: float = 1.0) -> dict:
    """He-scaled random dense weights (logits of order 1, like a trained actor's)."""
    rng = np.random.default_rng(seed)
    w = {}
    d = input_dim
    for i, u in enumerate(layers):
        w[f"hidden_{i}_kernel"] = rng.normal(0, gain * np.sqrt(2.0 / d), (d, u)).astype(np.float32)
        w[f"hidden_{i}_bias"] = rng.normal(0, 0.1, u).astype(np.float32)
        d = u
    w["logits_kernel"] = rng.normal(0, 2.0 / np.sqrt(d), (d, outputs)).astype(np.float32)
    w["logits_bias"] = rng.normal(0, 0.1, outputs).astype(np.float32)
    return w
