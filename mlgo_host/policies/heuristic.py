"""Heuristic policies: ``default`` (the advisor's default advice), ``never``, ``always``, ``random`` (seeded), and
``spill-weight`` for the priority advisor."""

from __future__ import annotations

import numpy as np

from mlgo_host.channel.advisors import EvictAdvisor, InlineAdvisor, PriorityAdvisor
from mlgo_host.errors import ConfigError
from mlgo_host.policies.base import Policy


class DefaultPolicy(Policy):
    name = "default"

    def bind(self, header, advisor):
        super().bind(header, advisor)
        self.act = advisor.default_advice  # type: ignore[method-assign]


class ConstantPolicy(Policy):
    """``never`` (0 / evict nothing where legal) or ``always`` (1 / the first legal candidate)."""

    def __init__(self, name: str):
        self.name = name
        self._yes = name == "always"

    def act(self, obs):
        adv = self.advisor
        if isinstance(adv, InlineAdvisor):
            return 1 if self._yes else 0
        if isinstance(adv, EvictAdvisor):
            m = adv.mask(obs)
            w = adv.width
            if not self._yes and m[w - 1]:
                return w - 1
            legal = np.flatnonzero(m[: w - 1])
            return int(legal[0]) if legal.size else w - 1
        if isinstance(adv, PriorityAdvisor):
            return PriorityAdvisor.MAX if self._yes else 0.0
        raise NotImplementedError(adv)


class RandomPolicy(Policy):
    name = "random"
    stochastic = True

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def act(self, obs):
        return self.act_logp(obs)[0]

    def act_logp(self, obs):
        adv = self.advisor
        if isinstance(adv, InlineAdvisor):
            return int(self.rng.integers(2)), float(np.log(0.5))
        if isinstance(adv, EvictAdvisor):
            legal = np.flatnonzero(adv.mask(obs))
            return int(self.rng.choice(legal)), float(-np.log(legal.size))
        if isinstance(adv, PriorityAdvisor):
            return float(self.rng.uniform(0, 2**20)), 0.0
        raise NotImplementedError(adv)


class SpillWeightPriority(Policy):
    """``spill-weight``: the register allocator takes live ranges in the order of their spill weight, the
    dearest to spill first, where greedy's own order is mostly by size.  On C at -Oz it makes objects a
    little smaller on average but not each one (docs/results.md): a policy to use with the guard."""

    name = "spill-weight"
    #: keeps weights apart that differ in the 6th decimal when the compiler truncates the priority to unsigned
    SCALE = 1e6

    def bind(self, header, advisor):
        if not isinstance(advisor, PriorityAdvisor) or header.feature("weight") is None:
            raise ConfigError(f"policy spill-weight answers the regalloc-priority advisor (its weight feature), "
                              f"not {advisor.name}")
        super().bind(header, advisor)
        self._weight = header.first_values(["weight"])

    def act(self, obs):
        (weight,) = self._weight(obs.raw)
        # max(0.0, .) maps a NaN to 0; an unspillable range (weight inf) gets the highest priority
        return min(max(0.0, weight) * self.SCALE, 2.0**31)


HEURISTICS = ("default", "never", "always", "random", "spill-weight")


def make_heuristic(name: str, seed: int = 0) -> Policy:
    if name == "default":
        return DefaultPolicy()
    if name in ("never", "always"):
        return ConstantPolicy(name)
    if name == "random":
        return RandomPolicy(seed)
    if name == "spill-weight":
        return SpillWeightPriority()
    raise ValueError(f"unknown heuristic policy {name!r}; choose from {', '.join(HEURISTICS)}")
