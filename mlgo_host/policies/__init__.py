"""Policies: observation -> advice, without TensorFlow (the TF side is :mod:`mlgo_host.learning`)."""

from __future__ import annotations

import os

from mlgo_host.policies.base import Policy
from mlgo_host.policies.heuristic import HEURISTICS, make_heuristic
from mlgo_host.policies.loading import load_base_policy

__all__ = ["Policy", "HEURISTICS", "make_heuristic", "load_policy", "check_meanings", "network_of"]


def load_policy(name_or_path: str, seed: int = 0, greedy: bool = True) -> Policy:
    """A heuristic or shipped policy by name, a saved policy directory or a replay file."""
    if os.path.isfile(name_or_path):
        from mlgo_host.policies.replay import load_replay  # numpy-free, but not needed by the others

        return load_replay(name_or_path, seed=seed, greedy=greedy)
    return load_base_policy(name_or_path, seed=seed, greedy=greedy)


def network_of(policy: Policy):
    """The saved network under ``policy``'s wrappers (a replay's base, the network of a policy with
    parts per language, the network under its inlining bound), or None (a heuristic)."""
    from mlgo_host.policies.actor import NumpyPolicy

    while policy is not None and not isinstance(policy, NumpyPolicy):
        policy = getattr(policy, "base", None)
    return policy


def check_meanings(policy: Policy, compiler_slot: str | None, advisor: str | None = None) -> None:
    """Bind a saved policy's inputs (a replay's base's) by meaning before the first compile, so an
    input the compiler cannot supply, or a policy of another ``advisor``, is one ConfigError (or
    warning) in the command, not one per worker or compile."""
    net = network_of(policy)
    if net is None:
        return
    if advisor is not None:
        net.check_advisor(advisor)
    net.check_meanings(compiler_slot)
