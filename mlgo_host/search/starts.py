"""Where a module's search starts: the compiler's own decisions at `-Oz`, at another inline threshold (kept in the
module's command line), or the shipped policy's, whichever compiles smallest (docs/search.md, "Starts")."""

from __future__ import annotations

import dataclasses
import time
from typing import Sequence

from mlgo_host.corpus.corpus import Module
from mlgo_host.errors import CompilerError
from mlgo_host.search.probe import compile_with_remarks
from mlgo_host.search.replay import Measured

#: the inline thresholds a search may start from besides -Oz's own
START_THRESHOLDS: tuple[int, ...] = (50, 150, 450)
#: the compiles of a second probe at the chosen threshold: its channel compile (its plain compile is
#: the threshold's own, :func:`measure_thresholds`)
REPROBE = 1
#: the compiles of the start policy's start: its probe's channel compile and the replay of its decisions
POLICY_START = 2
#: the starts a module's search may take besides -Oz's own, per language: "thresholds" (each of
#: START_THRESHOLDS) and "policy" (the shipped policy's decisions); bench/tune_starts.py measures them
STARTS_BY_LANGUAGE: dict[str, tuple[str, ...]] = {"C": (), "C++": ("thresholds", "policy")}


@dataclasses.dataclass(frozen=True)
class Starts:
    """The starts a run of ``tune`` may measure: its threshold grid, its start policy (a shipped
    policy's name) and, per language, which of them a module of that language tries."""

    thresholds: tuple[int, ...] = ()
    policy: str | None = None
    by_language: tuple[tuple[str, tuple[str, ...]], ...] = tuple(STARTS_BY_LANGUAGE.items())

    def of(self, language: str) -> tuple[tuple[int, ...], str | None]:
        """(thresholds, start policy) a module of ``language`` tries."""
        tries = dict(self.by_language).get(language, ())
        return (self.thresholds if "thresholds" in tries else (), self.policy if "policy" in tries else None)

    def cost(self, language: str) -> int:
        """The compiles the starts of a module of ``language`` take at most."""
        thresholds, policy = self.of(language)
        return starts_cost(thresholds, policy is not None)


def starts_cost(thresholds: Sequence[int], policy: bool) -> int:
    """The compiles a module's starts take at most (:data:`REPROBE`, :data:`POLICY_START`)."""
    return (len(thresholds) + REPROBE if thresholds else 0) + (POLICY_START if policy else 0)


def starts_pending(result: dict) -> bool:
    """Has a stored ``result``'s module its starts still to measure (probed, with decisions, nothing searched yet)?"""
    return result.get("thresholds") is None and not result["tried"] and result.get("reference") is None \
        and result.get("decisions", 0) > 0


def threshold_flags(threshold: int) -> list[str]:
    """The compiler flags (driver or cc1 form) setting the inline threshold."""
    return ["-mllvm", f"-inline-threshold={int(threshold)}"]


def with_flags(module: Module, flags: Sequence[str]) -> Module:
    """``module`` with ``flags`` added to its command.  Its :attr:`~Module.key` changes with them:
    callers that store results keep the original module's key."""
    return dataclasses.replace(module, cmd=module.cmd + tuple(flags)) if flags else module


def within_deadline(timeout: float, deadline: float | None) -> float:
    """``timeout`` cut at the user's ``deadline`` (a ``time.time()``; <= 0 once it has passed)."""
    return timeout if deadline is None else min(timeout, deadline - time.time())


def measure_thresholds(module: Module, thresholds: Sequence[int], *, clang: str, timeout: float,
                       deadline: float | None = None, plains: dict[int, tuple[str, Measured]] | None = None
                       ) -> dict[int, int | None]:
    """The object's .text at each threshold, one plain compile each (None: the compile failed or the ``deadline`` cut
    it).  Each is kept in ``plains`` (threshold -> remarks and sizes): the winner's probe does not compile it again."""
    out: dict[int, int | None] = {}
    for t in map(int, thresholds):
        out[t] = None
        left = within_deadline(timeout, deadline)
        if left <= 0:
            continue
        try:
            remarks, m = compile_with_remarks(with_flags(module, threshold_flags(t)), clang, left)
        except CompilerError:
            continue
        out[t] = int(m.text)
        if plains is not None:
            plains[t] = (remarks, m)
    return out


def best_start(sizes: dict[int, int | None], oz_size: int) -> int | None:
    """The threshold of the smallest object, when smaller than ``oz_size``, else None (ties: the lower threshold)."""
    size, t = min(((s, t) for t, s in sizes.items() if s is not None), default=(None, None))
    return t if size is not None and size < oz_size else None
