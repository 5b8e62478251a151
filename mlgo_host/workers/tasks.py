"""What the local and Ray worker pools share: how a worker is made, a task's outcome, its
cancellation and the collection's early exit."""

from __future__ import annotations

import dataclasses
import importlib
import warnings
from typing import Any

from mlgo_host.errors import CompatibilityWarning


class Cancelled(BaseException):
    """Raised inside a worker when the learner cancels its task."""


@dataclasses.dataclass
class EarlyExit:
    """When to stop waiting for stragglers (as ml-compiler-opt's early exit)."""

    fraction: float = 0.9  # once this fraction of tasks is in ...
    grace_s: float = 30.0  # ... wait at most this long more,
    grace_factor: float = 0.5  # or this factor of the time taken so far, whichever is shorter
    timeout_s: float = 1800.0  # hard limit for the whole collection

    def stop_at(self, t_start: float, t_fraction: float) -> float:
        return min(t_fraction + min(self.grace_s, self.grace_factor * (t_fraction - t_start)),
                   t_start + self.timeout_s)


@dataclasses.dataclass
class TaskOutcome:
    index: int
    ok: bool  # False: the worker raised, or the task was cancelled
    value: Any = None
    error: str = ""
    cancelled: bool = False


def new_worker(factory: str, kwargs: dict):
    """``factory`` ("module:attribute") called with ``kwargs``. Workers keep quiet about compatibility:
    the command that started the pool says it once (policies.check_meanings)."""
    warnings.filterwarnings("ignore", category=CompatibilityWarning)
    mod, _, name = factory.partition(":")
    return getattr(importlib.import_module(mod), name)(**kwargs)
