"""A bound on the inlinings a learned policy adds to ``-Oz``'s: none of a callee with more than
``max_users`` uses, where ``-Oz``'s "no" stands.  Each such inlining keeps the callee's body and adds
a copy (site after site, tens of percent of a file; docs/training.md), while the inlinings that pay
are mostly of callees of two or three uses.  Saved in the metadata as ``extra_inlining_max_users``.
"""

from __future__ import annotations

import os

from mlgo_host.errors import ConfigError
from mlgo_host.fsutil import atomic_write_json
from mlgo_host.policies.base import Policy
from mlgo_host.policies.saved import METADATA, read_metadata

#: the metadata key of a saved policy's bound (absent or null: no bound)
MAX_USERS_KEY = "extra_inlining_max_users"
USERS = "callee_users"


def max_users_of(metadata: dict, where: str = "") -> int | None:
    """The bound a saved policy's metadata carries, or None."""
    k = metadata.get(MAX_USERS_KEY)
    if k is None:
        return None
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"{where}: bad {MAX_USERS_KEY} {k!r} (expected an integer ≥ 1)")
    return k


def set_inlining_bound(path: str, max_users: int | None) -> None:
    """Write saved policy ``path``'s bound (None: no bound)."""
    md = read_metadata(path)
    md[MAX_USERS_KEY] = max_users
    max_users_of(md, os.path.join(path, METADATA))  # a bad bound fails here, not at its first compile
    atomic_write_json(os.path.join(path, METADATA), md)


class BoundedInlining(Policy):
    """``base``'s answers, but ``-Oz``'s where ``base`` adds an inlining of a callee of many uses."""

    def __init__(self, base: Policy, max_users: int):
        self.base, self.max_users = base, max_users
        self.name = base.name
        self.stochastic = base.stochastic

    def bind(self, header, advisor) -> None:
        if header.feature(USERS) is None:
            raise ConfigError(f"policy {self.name!r}: its inlining bound needs {USERS!r}, which the "
                              "compiler does not send (an inliner policy on another advisor?)")
        self.base.bind(header, advisor)
        super().bind(header, advisor)
        self._default = advisor.default_advice
        self._users = header.first_values((USERS,))

    def _bounded(self, obs, action):
        if action != 1 or self._default(obs) != 0:
            return action
        (users,) = self._users(obs.raw)
        return 0 if users > self.max_users else action

    def act(self, obs):
        return self._bounded(obs, self.base.act(obs))

    def act_logp(self, obs):
        action, logp = self.base.act_logp(obs)
        bounded = self._bounded(obs, action)
        # a bounded answer is not the network's sample: its log-probability is not the network's
        return bounded, (logp if bounded == action else 0.0)
