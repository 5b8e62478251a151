"""ml-compiler-opt's size reward and the training baseline it is taken against."""

from __future__ import annotations

import dataclasses
from typing import Any

from mlgo_host.errors import ConfigError

DELTA = 0.01


def reward(policy_size: float, baseline_size: float, delta: float = DELTA) -> float:
    """``1 - (policy + δ) / (baseline + δ)``: positive when the policy's object is smaller, 0 when equal."""
    return 1.0 - (float(policy_size) + delta) / (float(baseline_size) + delta)


@dataclasses.dataclass
class MovingAverageBaseline:
    """Per-module exponential moving average of policy sizes, from the default size: a training
    baseline (reports stay against the default size)."""

    decay: float = 0.8
    averages: dict[str, float] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.decay < 1.0:
            raise ConfigError(f"moving-average decay must be in [0, 1), got {self.decay}")

    def baseline(self, name: str, default_size: float) -> float:
        return self.averages.get(name, float(default_size))

    def reward(self, name: str, size: float, default_size: float) -> float:
        """The reward against the current average, then the average updated."""
        prev = self.baseline(name, default_size)
        self.averages[name] = self.decay * prev + (1.0 - self.decay) * float(size)
        return reward(size, prev)

    def state(self) -> dict[str, Any]:
        return {"decay": self.decay, "averages": dict(self.averages)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "MovingAverageBaseline":
        return cls(decay=float(state["decay"]), averages={k: float(v) for k, v in state["averages"].items()})
