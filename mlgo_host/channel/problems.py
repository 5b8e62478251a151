"""The decision problems the compiler lets the host make: one :class:`Problem`
per advisor, owning what the rest of the package needs to know about it (as
ml-compiler-opt's ``ProblemConfiguration``, without TensorFlow).

A problem has:

* its channel half, an :class:`~mlgo_host.channel.advisors.Advisor` class:
  the compiler flags, the advice tensor, the compiler's default answer and
  the legality check of each advice;
* how a learned policy acts (``action_kind``; None: no learned policy) and
  which features it never takes as inputs (``discard``), read by
  :mod:`mlgo_host.policies.specs`;
* whether the compiler sends its own decision in a slot that depends on the
  compiler (``detects_default_slot``: the inliner's include-default, detected by
  :mod:`~mlgo_host.channel.default_slot`), and so what a session of a
  compiler needs before it starts (:func:`ready_advisor`).

Other modules ask a problem (``get_problem(name).learnable``, ...) instead of
comparing advisor names.
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
    """One decision point of the compiler (see the module's docstring)."""

    name: str  #: the advisor's name, as ``--advisor`` takes it
    action_kind: str | None  #: BINARY, MASKED_CHOICE, or None (no learned policy)
    discard: tuple[str, ...] = ()  #: features a learned policy never takes (ml-compiler-opt drops them too)
    detects_default_slot: bool = False  #: the compiler's own decision comes in a per-compiler slot

    @property
    def advisor_class(self) -> type[Advisor]:
        return ADVISORS[self.name]

    @property
    def advice_name(self) -> str:
        return self.advisor_class.advice_name

    @property
    def learnable(self) -> bool:
        """A learned policy can make this decision (traces, training, specs)."""
        return self.action_kind is not None

    def default_slot(self, compiler: str, timeout: float = 60.0) -> str | None:
        """Where ``compiler`` sends its own decision (detected once per binary,
        within ``timeout``); None for a problem without one."""
        return compiler_default_slot(compiler, timeout) if self.detects_default_slot else None


INLINE = Problem("inline", BINARY, discard=("inlining_default",), detects_default_slot=True)
REGALLOC_EVICT = Problem("regalloc-evict", MASKED_CHOICE)
#: a continuous advice: served by heuristics only
REGALLOC_PRIORITY = Problem("regalloc-priority", None)

PROBLEMS: dict[str, Problem] = {p.name: p for p in (INLINE, REGALLOC_EVICT, REGALLOC_PRIORITY)}
#: the problems a learned policy can make
LEARNABLE = tuple(name for name, p in PROBLEMS.items() if p.learnable)


def get_problem(name: Any) -> Problem:
    """The problem of an advisor name (or advisor object); ConfigError for an unknown one."""
    key = name if isinstance(name, str) else getattr(name, "name", name)
    try:
        return PROBLEMS[key]
    except KeyError:
        raise ConfigError(f"unknown advisor {key!r}; choose from {', '.join(PROBLEMS)}") from None


def ready_advisor(advisor: Advisor | str, compiler: str, timeout: float = 60.0) -> Advisor:
    """``advisor`` ready for a session of ``compiler``: a problem whose
    compiler decision comes in a per-compiler slot gets it
    (:meth:`Problem.default_slot`, within ``timeout``: what is left of the
    user's deadline)."""
    adv = get_advisor(advisor)
    problem = get_problem(adv)
    if problem.detects_default_slot and getattr(adv, "default_slot", None) is None:
        adv.set_default_slot(problem.default_slot(compiler, timeout))  # type: ignore[attr-defined]
    return adv


def ready_and_run(cmd: list[str], advisor: Advisor | str, policy, *, timeout: float = 300.0,
                   **session_options) -> SessionResult:
    """:func:`~mlgo_host.channel.session.run_session` of ``cmd`` with the
    advisor readied for its compiler: a first compile's slot detection and the compile
    itself share ``timeout`` (every deadline a user gives bounds all that is
    done on their behalf).  A policy with a part per source language answers
    with the part of ``cmd``'s language."""
    t0 = time.monotonic()
    adv = ready_advisor(advisor, cmd[0], timeout) if cmd else advisor  # no command: run_session says so
    for_language = getattr(policy, "for_language", None)
    if for_language is not None:
        policy = for_language(command_language(cmd))
    return run_session(cmd, adv, policy, timeout=timeout, start=t0, **session_options)
