"""Policies: observation -> advice. Nothing here imports TensorFlow: the TF
side of a policy (networks, weights, export) is :mod:`mlgo_host.learning`."""

from __future__ import annotations

import os

from mlgo_host.errors import ConfigError
from mlgo_host.policies.base import Policy
from mlgo_host.policies.heuristic import HEURISTICS, make_heuristic

__all__ = ["Policy", "HEURISTICS", "make_heuristic", "load_policy"]


def load_policy(name_or_path: str, seed: int = 0, greedy: bool = True) -> Policy:
    """A heuristic by name (default, never, always, random), a saved policy
    directory (loaded with numpy only) or a replay file (JSON: forced actions
    over a base policy, see :mod:`mlgo_host.policies.replay`)."""
    if name_or_path in HEURISTICS:
        return make_heuristic(name_or_path, seed=seed)
    if os.path.isdir(name_or_path):
        from mlgo_host.policies.saved import load_saved_policy

        return load_saved_policy(name_or_path, greedy=greedy, seed=seed)
    if os.path.isfile(name_or_path):
        from mlgo_host.policies.replay import load_replay

        return load_replay(name_or_path, seed=seed, greedy=greedy)
    raise ConfigError(
        f"policy {name_or_path!r} is neither a heuristic ({', '.join(HEURISTICS)}), a saved policy directory "
        "nor a replay file"
    )
