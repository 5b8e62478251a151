"""The decision problems the compiler lets the host make, one :class:`Problem` per advisor (as
ml-compiler-opt's ``ProblemConfiguration``): other modules ask a problem instead of comparing
advisor names.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from mlgo_host.channel.advisors import ADVISORS, Advisor, get_advisor
from mlgo_host.channel.default_slot import default_slot as compiler_default_slot
from mlgo_host.channel.session import SessionResult, run_session
from mlgo_host.errors import ConfigError
from mlgo_host.languages import command_language

#: how a learned policy acts: one of two actions (inline or not) ...
BINARY = "binary"
#: ... or one column of a mask (the live range to evict)
MASKED_CHOICE = "masked_choice"


@dataclasses.dataclass(frozen=True)
class Problem:
    """One decision point: its advisor, how a learned policy acts, what it never takes as input."""

    name: str  #: the advisor's name, as ``--advisor`` takes it
    action_kind: str | None  #: BINARY, MASKED_CHOICE, or None (no learned policy)
    discard: tuple[str, ...] = ()  #: features a learned policy never takes (ml-compiler-opt drops them too)
    detects_default_slot: bool = False  #: the compiler's own decision comes in a per-compiler slot

    @property
    def advice_name(self) -> str:
        return ADVISORS[self.name].advice_name

    @property
    def learnable(self) -> bool:
        return self.action_kind is not None

    def default_slot(self, compiler: str, timeout: float = 60.0) -> str | None:
        """Where ``compiler`` sends its own decision; None for a problem without one."""
        return compiler_default_slot(compiler, timeout) if self.detects_default_slot else None


PROBLEMS: dict[str, Problem] = {p.name: p for p in (
    Problem("inline", BINARY, discard=("inlining_default",), detects_default_slot=True),
    Problem("regalloc-evict", MASKED_CHOICE),
    Problem("regalloc-priority", None),  # a continuous advice: served by heuristics only
)}
#: the problems a learned policy can make
LEARNABLE = tuple(name for name, p in PROBLEMS.items() if p.learnable)


def get_problem(name: Any) -> Problem:
    """The problem of an advisor name or object."""
    key = name if isinstance(name, str) else getattr(name, "name", name)
    try:
        return PROBLEMS[key]
    except KeyError:
        raise ConfigError(f"unknown advisor {key!r}; choose from {', '.join(PROBLEMS)}") from None


def ready_advisor(advisor: Advisor | str, compiler: str, timeout: float = 60.0) -> Advisor:
    """``advisor`` with its default-decision slot for ``compiler`` set (detected within
    ``timeout``: what is left of the user's deadline)."""
    adv = get_advisor(advisor)
    problem = get_problem(adv)
    if problem.detects_default_slot and getattr(adv, "default_slot", None) is None:
        adv.default_slot = problem.default_slot(compiler, timeout)  # type: ignore[attr-defined]
    return adv


def ready_and_run(cmd: list[str], advisor: Advisor | str, policy, *, timeout: float = 300.0,
                  **session_options) -> SessionResult:
    """:func:`~mlgo_host.channel.session.run_session` with the advisor readied for ``cmd[0]``:
    slot detection and compile share ``timeout``; a policy with a part per language answers
    with the part of ``cmd``'s language."""
    t0 = time.monotonic()
    adv = ready_advisor(advisor, cmd[0], timeout) if cmd else advisor  # no command: run_session says so
    for_language = getattr(policy, "for_language", None)
    if for_language is not None:
        policy = for_language(command_language(cmd))
    return run_session(cmd, adv, policy, timeout=timeout, start=t0, **session_options)
