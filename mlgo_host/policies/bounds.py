"""Bounds on the inlinings a learned policy adds to ``-Oz``'s, where ``-Oz``'s "no" stands (docs/training.md):
none of a callee with more than ``max_users`` uses, none in a module of fewer than ``min_functions`` functions
(the compiler's ``node_count``).  Saved in the metadata as ``extra_inlining_max_users`` and
``extra_inlining_min_functions``."""

from __future__ import annotations

import dataclasses
import os

from mlgo_host.errors import ConfigError
from mlgo_host.fsutil import atomic_write_json
from mlgo_host.policies.base import Policy
from mlgo_host.policies.saved import METADATA, read_metadata

#: the metadata keys of a saved policy's bounds (absent or null: no bound)
MAX_USERS_KEY = "extra_inlining_max_users"
MIN_FUNCTIONS_KEY = "extra_inlining_min_functions"
USERS, FUNCTIONS = "callee_users", "node_count"


@dataclasses.dataclass(frozen=True)
class InliningBound:
    """What a policy may add to ``-Oz``'s inlinings (None: no such bound)."""

    max_users: int | None = None
    min_functions: int | None = None

    def __bool__(self) -> bool:
        return self.max_users is not None or self.min_functions is not None


def _positive(metadata: dict, key: str, where: str) -> int | None:
    k = metadata.get(key)
    if k is None:
        return None
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"{where}: bad {key} {k!r} (expected an integer ≥ 1)")
    return k


def bound_of(metadata: dict, where: str = "") -> InliningBound:
    """The bounds a saved policy's metadata carries (falsy: none)."""
    return InliningBound(_positive(metadata, MAX_USERS_KEY, where), _positive(metadata, MIN_FUNCTIONS_KEY, where))


def set_inlining_bound(path: str, bound: InliningBound) -> None:
    """Write saved policy ``path``'s bounds (a None field: no such bound)."""
    md = read_metadata(path)
    md[MAX_USERS_KEY], md[MIN_FUNCTIONS_KEY] = bound.max_users, bound.min_functions
    bound_of(md, os.path.join(path, METADATA))  # a bad bound fails here, not at its first compile
    atomic_write_json(os.path.join(path, METADATA), md)


class BoundedInlining(Policy):
    """``base``'s answers, but ``-Oz``'s where ``base`` adds an inlining that ``bound`` forbids."""

    def __init__(self, base: Policy, bound: InliningBound):
        self.base, self.bound = base, bound
        self.max_users = bound.max_users if bound.max_users is not None else float("inf")
        self.min_functions = bound.min_functions or 0
        self.name = base.name
        self.stochastic = base.stochastic

    def bind(self, header, advisor) -> None:
        for name in (USERS, FUNCTIONS):
            if header.feature(name) is None:
                raise ConfigError(f"policy {self.name!r}: its inlining bound needs {name!r}, which the "
                                  "compiler does not send (an inliner policy on another advisor?)")
        self.base.bind(header, advisor)
        super().bind(header, advisor)
        self._default = advisor.default_advice
        self._users_functions = header.first_values((USERS, FUNCTIONS))

    def _bounded(self, obs, action):
        if action != 1 or self._default(obs) != 0:
            return action
        users, functions = self._users_functions(obs.raw)
        return 0 if users > self.max_users or functions < self.min_functions else action

    def act(self, obs):
        return self._bounded(obs, self.base.act(obs))

    def act_logp(self, obs):
        action, logp = self.base.act_logp(obs)
        bounded = self._bounded(obs, action)
        # a bounded answer is not the network's sample: its log-probability is not the network's
        return bounded, (logp if bounded == action else 0.0)
