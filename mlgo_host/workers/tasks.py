"""What the local and Ray worker pools share: how a worker is made, a task's outcome, its cancellation and
the collection's early exit."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import time
import warnings
from typing import Any, Callable

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
    """``factory`` ("module:attribute") called with ``kwargs``, quiet about compatibility (the command that
    started the pool says it once)."""
    warnings.filterwarnings("ignore", category=CompatibilityWarning)
    mod, _, name = factory.partition(":")
    return getattr(importlib.import_module(mod), name)(**kwargs)


STRAGGLER = "cancelled: straggler past the collection deadline"


class Pool(contextlib.AbstractContextManager):
    """``with pool:`` closes it."""

    def __exit__(self, *exc) -> None:
        self.close()


class Collection:
    """The outcomes and deadline of one ``map_unordered`` call."""

    def __init__(self, num_tasks: int, early: EarlyExit | None, on_result: Callable[[TaskOutcome], None] | None):
        self.early = early or EarlyExit(fraction=1.0, timeout_s=float("inf"))
        self.on_result = on_result
        self.out: list[TaskOutcome] = []
        self.t0 = time.monotonic()
        self.stop_at = self.t0 + self.early.timeout_s
        self.need = max(1, int(self.early.fraction * num_tasks + 0.999999)) if num_tasks else 0
        self.fraction_reached = False

    def time_left(self) -> float:
        return self.stop_at - time.monotonic()

    def check_early_exit(self) -> None:
        if not self.fraction_reached and len(self.out) >= self.need:
            self.fraction_reached = True
            self.stop_at = self.early.stop_at(self.t0, time.monotonic())

    def emit(self, res: TaskOutcome) -> None:
        self.out.append(res)
        if self.on_result:
            self.on_result(res)

    def answered(self, index: int, status: str, value: Any, straggler: bool = False) -> None:
        """A worker's answer ``(status, value)`` to task ``index`` (a ``straggler``'s: cancelled unless ok)."""
        ok = status == "ok"
        error = "" if ok else STRAGGLER if straggler else str(value)
        self.emit(TaskOutcome(index, ok, value if ok else None, error,
                              cancelled=not ok if straggler else status == "cancelled"))

    def cancelled(self, index: int, why: str) -> None:
        self.emit(TaskOutcome(index, False, None, why, cancelled=True))

    def finish(self, pending) -> list[TaskOutcome]:
        """Report the ``pending`` tasks as not started; all the outcomes."""
        for t in pending:
            self.cancelled(t, "cancelled: not started before the collection deadline")
        return self.out
