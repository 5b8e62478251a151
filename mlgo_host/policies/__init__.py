"""Policies: observation -> advice. Nothing here imports TensorFlow: the TF
side of a policy (networks, weights, export) is :mod:`mlgo_host.learning`."""

from __future__ import annotations

import os

from mlgo_host.policies.base import Policy
from mlgo_host.policies.heuristic import HEURISTICS, make_heuristic
from mlgo_host.policies.loading import load_base_policy

__all__ = ["Policy", "HEURISTICS", "make_heuristic", "load_policy", "check_meanings"]


def load_policy(name_or_path: str, seed: int = 0, greedy: bool = True) -> Policy:
    """A heuristic by name (default, never, always, random), a saved policy
    directory (loaded with numpy only) or a replay file (JSON: forced actions
    over a base policy, see :mod:`mlgo_host.policies.replay`)."""
    if os.path.isfile(name_or_path):
        from mlgo_host.policies.replay import load_replay  # numpy-free, but not needed by the others

        return load_replay(name_or_path, seed=seed, greedy=greedy)
    return load_base_policy(name_or_path, seed=seed, greedy=greedy)


def check_meanings(policy: Policy, compiler_slot: str | None) -> None:
    """Before the first compile: bind a saved policy's inputs (a replay's:
    its base's) by meaning on a compiler whose default decision is in
    ``compiler_slot``, so that an input the compiler cannot supply is one
    :class:`~mlgo_host.errors.ConfigError` in the command, not one per
    worker (or, with ``--allow-changed-inputs``, one warning).  Inputs the
    compiler sends under another name need nothing: they are read there."""
    from mlgo_host.policies.actor import NumpyPolicy

    while policy is not None and not isinstance(policy, NumpyPolicy):
        policy = getattr(policy, "base", None)  # a replay's base policy
    if policy is not None:
        policy.check_meanings(compiler_slot)
