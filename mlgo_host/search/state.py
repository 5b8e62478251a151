"""What every part of one module's batched search shares: the flip (:class:`Candidate`), its measurement
(:class:`Outcome`) and the :class:`SearchState` (the decision set, its reference, what the search reports)."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from typing import Iterable, Sequence

from mlgo_host.corpus.corpus import Module
from mlgo_host.search.copytext import Roots
from mlgo_host.search.probe import Probe
from mlgo_host.search.replay import Measured, ReplayEvaluator
from mlgo_host.search.sites import Site, final_functions_of, unique_decisions


@dataclasses.dataclass(eq=False)
class Candidate:
    """One flip: ``sites`` (one, or a callee's group) all set to ``inline``."""

    sites: tuple[Site, ...]
    inline: bool
    footprint: frozenset[str]  # the functions it may change (its gain is read from them)
    score: float = 0.0
    index: int | None = None  # the probe decision it flips (its features), None for exposed sites
    kind: str = "single"  # single, exposed, group, outline, retry, undo, answered, again
    #: functions whose code it copies (an inlined callee): no flip of the batch may change them
    reads: frozenset[str] = frozenset()
    #: set while packed into a batch: the function(s) it is measured in a copy of (:mod:`.copies`)
    in_copy: Roots | None = None
    #: functions left to the compiler's own heuristic in its compile (an *answered* flip)
    release: frozenset[str] = frozenset()
    #: the :attr:`SearchState.version` its footprint was formed at
    formed: int = -1

    @property
    def key(self) -> str:
        k = " + ".join(s.key for s in self.sites)
        return k + " (answered)" if self.release else k


@dataclasses.dataclass
class Outcome:
    candidate: Candidate
    delta: int
    applied: bool
    #: the compile it was measured in (the winners' sizes in the next reference come from it)
    measured: Measured | None = dataclasses.field(default=None, repr=False)
    #: the search applied it (a winner of its batch; an equal flip that lost to a disjoint one was not)
    accepted: bool = False
    #: measured alone, in place: its compile is the reference with this flip, the next reference when it wins
    alone: bool = False
    #: functions outside its footprint its change made or dropped (read from who refers to them)
    extra: frozenset[str] = frozenset()
    #: section -> bytes no function owns that its change made (+) or dropped (-) (strings, constants)
    other: dict[str, int] = dataclasses.field(default_factory=dict)


def released(batch: Iterable[Candidate]) -> frozenset[str]:
    return frozenset().union(*(c.release for c in batch))


class SearchState:
    def __init__(self, module: Module, probe: Probe, evaluator: ReplayEvaluator, *, budget: int,
                 deadline: float | None = None):
        self.module = module
        self.probe = probe
        self.ev = evaluator
        self.budget = budget
        self.deadline = deadline
        self.first = list(unique_decisions(probe.decisions))  # the probe's decisions, one per key
        self.sites = {d.site.key: d.site for d in self.first}
        self.inline: dict[str, Site] = {d.site.key: d.site for d in self.first if d.inlined}
        #: the start's inlined keys per function holding them (a function whose keys are these is untouched)
        self.start_keys: dict[str, set[str]] = {}
        for k, x in self.inline.items():
            self.start_keys.setdefault(x.caller, set()).add(k)
        #: bumped whenever the reference or the set changes: what footprints are formed against
        self.version = 0
        self._base: Measured | None = None
        self._set_views: dict[str, tuple[tuple[int, int], object]] = {}  # :meth:`per_set`'s cache
        self.start: Measured | None = None
        self.start_text: int | None = None
        self.provisional = False  # the reference is the probe's plain compile, not checked yet
        self.compiled = True  # the reference is a compile's (its total exact), not derived
        #: functions whose size in the reference is derived from a batch, not compiled
        self.unverified: set[str] = set()
        self.outcomes: list[Outcome] = []
        self.tried: set[str] = set()
        self.broken: set[str] = set()  # keys the compiler did not match
        self.earlier: list[dict] = []  # the flips of the searches this one resumes
        self.flips_measured = 0
        self.flips_in_copies = 0
        self.batches = 0
        self.splits: Counter[str] = Counter()  # why batches were split: reason -> count
        self.wins = 0  # winners applied, in this search and the ones it resumes
        self.sweep_mark = 0  # their number when the last sweep began
        self.grouped = False  # the groups and answered flips were formed
        #: flips to undo, measured first: applied together, they came out larger than measured apart
        self.suspects: list[Candidate] = []
        #: (key, inline) of flips whose undoing paid: they read wrong beside others, so are measured alone
        self.interacting: set[tuple[str, bool]] = set()
        #: flips per batch at most, once the compiles ran out while splitting a batch (docs/search.md)
        self.batch_cap: int | None = None
        self.default_slot: str | None = None  # what the probe's policy read the default from (imitation)

    @property
    def base(self) -> Measured | None:
        """The reference: the current best set's sizes and inlined keys."""
        return self._base

    @base.setter
    def base(self, m: Measured | None) -> None:
        self._base = m
        self.version += 1  # (every change of the set comes with a new reference)

    def left(self) -> bool:
        """Compiles and time left (one compile kept for :meth:`~.reference.Reference.finish`)."""
        return self.ev.compiles < self.budget - 1 and (self.deadline is None or time.time() < self.deadline)

    def final(self) -> dict[str, frozenset[str]]:
        """Where each function's code ends up under the current set (not the probe's)."""
        def build() -> dict[str, frozenset[str]]:
            names = {x.caller for x in self.sites.values()} | {x.callee for x in self.sites.values()}
            return final_functions_of(self.inline.values(), names, self.base.sizes.functions)

        return self.per_set("final", build)

    def per_set(self, name: str, build):
        """``build()``, computed once per :attr:`version` and number of known sites (they only grow)."""
        now = (self.version, len(self.sites))
        view = self._set_views.get(name)
        if view is None or view[0] != now:
            view = self._set_views[name] = (now, build())
        return view[1]

    def left_out_sites(self) -> dict[str, list[Site]]:
        """Per callee, its known calls the set leaves out in functions still defined (in the order found)."""
        def build() -> dict[str, list[Site]]:
            defined = self.base.sizes.functions
            left: dict[str, list[Site]] = {}
            for k, x in self.sites.items():
                if x.caller in defined and k not in self.inline:
                    left.setdefault(x.callee, []).append(x)
            return left

        return self.per_set("left out", build)

    def left_out(self, callee: str, besides: set[str] = frozenset()) -> int:
        """Known calls of ``callee`` the set leaves out (but ``besides``), in functions still defined."""
        return sum(s.key not in besides for s in self.left_out_sites().get(callee, ()))

    def set_with(self, batch: Sequence[Candidate]) -> list[Site]:
        """The current set with ``batch``'s flips applied, less the sites of released functions."""
        inline = dict(self.inline)
        for c in batch:
            for s in c.sites:
                if c.inline:
                    inline[s.key] = s
                else:
                    inline.pop(s.key, None)
        out = released(batch)
        return [x for x in inline.values() if x.caller not in out]

    def in_set(self, c: Candidate) -> bool:
        """Is ``c`` already what the current set does (a group applied it)?"""
        return all((s.key in self.inline) == c.inline for s in c.sites)

    def untouched(self, fn: str) -> bool:
        """Does the current set inline in ``fn`` exactly what the start did?"""
        return {k for k, x in self.inline.items() if x.caller == fn} == self.start_keys.get(fn, set())
