"""Replay: force given actions at given decision indices, defer to a base
policy elsewhere (placeholder for the search; the full replay file format
lands with `run --replay`)."""

from __future__ import annotations

from mlgo_host.policies.base import Policy


class ReplayPolicy(Policy):
    def __init__(self, base: Policy, forced: dict[int, int]):
        self.base = base
        self.forced = dict(forced)
        self.name = f"replay({getattr(base, 'name', 'policy')})"
        self.stochastic = False
        self._i = 0

    def bind(self, header, advisor) -> None:
        super().bind(header, advisor)
        self.base.bind(header, advisor)
        self._i = 0

    def act(self, obs):
        i = self._i
        self._i = i + 1
        a = self.forced.get(i)
        if a is not None:
            return a
        return self.base.act(obs)

    def act_logp(self, obs):
        return self.act(obs), 0.0
