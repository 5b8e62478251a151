"""Loading what a replay's base can be; :func:`~mlgo_host.policies.load_policy` adds replay files."""

from __future__ import annotations

import os

from mlgo_host.errors import ConfigError
from mlgo_host.policies.base import Policy
from mlgo_host.policies.heuristic import HEURISTICS, make_heuristic
from mlgo_host.shipped import SHIPPED, resolve_policy


def load_base_policy(name_or_path: str, seed: int = 0, greedy: bool = True) -> Policy:
    """A heuristic or shipped policy by name, or a saved policy directory (with its parts per language)."""
    if name_or_path in HEURISTICS:
        return make_heuristic(name_or_path, seed=seed)
    name_or_path = resolve_policy(name_or_path)
    if os.path.isdir(name_or_path):
        from mlgo_host.policies.bounds import BoundedInlining, bound_of
        from mlgo_host.policies.outline import ByLanguage
        from mlgo_host.policies.saved import METADATA, language_parts, load_saved_policy, read_metadata

        policy = load_saved_policy(name_or_path, greedy=greedy, seed=seed)
        bound = bound_of(read_metadata(name_or_path), os.path.join(name_or_path, METADATA))
        if bound and greedy:  # training samples the network itself
            policy = BoundedInlining(policy, bound)
        parts = language_parts(name_or_path)
        return ByLanguage(policy, parts) if parts else policy
    raise ConfigError(f"policy {name_or_path!r} is neither a heuristic ({', '.join(HEURISTICS)}), a shipped policy "
                      f"({', '.join(SHIPPED)}) nor a saved policy directory (nor an existing replay file)")
