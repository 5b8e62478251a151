"""Batched flip search: many flips measured per compile, each flip's gain
read from the functions it touches.

A module's decisions get call-site keys from one channel compile (the
*probe*, :func:`~mlgo_host.search.evaluate.probe_module`); from then on a
*decision set* (the sites to inline) is compiled by the compiler's own
replay (:class:`~mlgo_host.search.evaluate.ReplayEvaluator`), which gives
the object's total and its per-function sizes.

A flip (inline a site the set leaves out, or leave out one it inlines)
changes only the function that holds the call, where that function's code
ends up (the functions it was inlined into, transitively), and the callee
(which it may delete or bring back): its *footprint*
(:func:`~mlgo_host.search.sites.final_functions`), by the current set's
inline tree, formed again when winners changed the set since the flip was
queued (:meth:`BatchedSearch.fresh`).  Flips with disjoint
footprints go into one compile, and each gets the change of its own
functions.  The attribution is checked, never assumed
(:meth:`BatchedSearch._attribute`): every function that changed must lie in
exactly one flip's footprint, the bytes no function owns must not move, and
the sites the compiler reports inlined must be the set's, flip for flip.
Against a compiled reference two exceptions are read, not guessed: a
function that appeared or went outside every footprint (a template instance
a new call brought, ``__clang_call_terminate`` when its last user went) and
a piece of the bytes no function owns that appeared or went (a string, a
constant) belong to the flip whose functions alone refer to them in the
object that has them (:attr:`ObjectSizes.referrers`,
:attr:`ObjectSizes.shared`).
A flip's gain in a batch is the change of its functions; the object's total
may differ from their sum by .eh_frame's last-FDE padding (4 bytes that
follow the total, not any one flip), which the accepting compile measures.
A batch that fails is split in two and each half measured again; a single
flip needs no attribution (its gain is the object's).  A flip whose undo paid
(it won beside others and came out larger applied) is measured alone from then
on (:attr:`BatchedSearch.interacting`).

Order: candidates by the prior (:func:`~mlgo_host.search.flips.flip_scores`:
the measured winner patterns, or a fitted flip-gain model); winners of a
batch are applied together and the new best compiled once (its sizes are
the next batches' reference).  What one flip per compile could not afford:

* the sites a winning ``inline`` flip exposes (its callee's calls, now in
  the caller) become candidates;
* a second pass from the new best retries the flips whose footprint a
  winner touched;
* *groups*: every not-inlined site of one callee flipped together (the
  callee is deleted only once its last call is inlined: pairs that only pay
  together); per function and callee, its calls there inlined together
  (*caller groups*: a function with fewer calls saves fewer registers across
  them); and
  *outline groups*, the mirror: every inlined call of a
  callee the object no longer has left out together (one body and k calls
  against k inlined copies, which no single flip can show, since each pays
  for bringing the body back alone).
* the outline groups of every callee inlined at two or more sites come
  first, before any single flip, within :data:`EARLY_OUTLINE_SHARE` of the
  compiles (:meth:`BatchedSearch.early_outlines`): the move a greedy pass
  over the channel finds when one flip leaves a helper too big for the
  compiler to inline again;
* *answered* flips, once every single flip was measured: a lost flip
  measured again with the functions that call the function it is written
  in left to the compiler's own heuristic (:meth:`BatchedSearch.answered`),
  whose answer, read from the remarks, becomes the set: each greedy
  channel flip in one replay compile.

A search cut by its budget or time keeps the flips it queued and did not
measure (``pending``); a resumed search starts with them.

The start: the probe's decisions compiled by replay, or, when the probe
took the compiler's own decisions (``tune``), the probe's plain compile
standing in for it until the first batch's attribution checks it (a failed
one compiles the replay and measures again): a compile saved per module.

Copies (*worlds*).  Footprints bound the flips per compile by the flips of
the busiest function: on real modules most flips land in one or two hub
functions.  A flip whose footprint is one function ``F`` (it deletes no
callee) is measured instead in a copy of ``F`` and of the functions
inlined only into it (:mod:`.copytext`), with the decision set plus that
flip; the copy's size less a control copy's (the set alone) is its gain.
A flip that leaves out a call of a callee whose body is gone (every call
of it inlined) brings that body back: in a copy as in place, so the body
(the copy's own one when the callee is of the copied tree, else the
module's one, emitted once for all the copies that call it), what only
brought-back bodies call and the strings only they refer to are added to
its gain (:meth:`BatchedSearch.brought_back`); on real modules these are
most of the flips of a hub (``CHECK_EQ`` helpers left out of a test
function, one hash helper of many).  Each control must equal ``F`` exactly (size without alignment
padding, and sites inlined); a function whose control does not (a tail
call that was a short jump to its neighbour, a pass that saw its callers)
gets no copies again, and its flips are measured in place.  The originals
are read as in any batch, so ordinary flips share the compile.  Winners
measured in copies of one function are measured against one reference:
the best is applied, the others are measured again from the new one.  When
the flips measured in place beside the copies fail their attribution, the
copies are measured again without them (the failure is not theirs); when
copies alone move the originals (their calls are more callers of a static
callee), they are still read against a compiled reference, each against its
control, which must equal its function in that compile (the function may
have moved with its copies: the winners' sizes are then the reference's
plus their gains, checked by the next compile); a flip whose copy changed
sites nobody flipped is measured in place from then on.

A flip whose code lands in several functions (a call in a helper the set
inlines into two hubs and drops) is measured in a world that copies all of
them (up to :data:`MAX_ROOTS`), with the functions whose code lands in
those alone: its gain is the sum of each copy's change from its control.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections import Counter
from typing import Iterable, Sequence

import numpy as np

from mlgo_host.corpus.corpus import Module
from mlgo_host.corpus.objsizes import ObjectSizes
from mlgo_host.errors import CompilerError, MlgoHostError
from mlgo_host.corpus.sizes import llvm_tool
from mlgo_host.search.copytext import ModuleText, Roots as World, copy_name as world_name, roots_of
from mlgo_host.search.evaluate import Measured, Probe, ReplayEvaluator, probe_module
from mlgo_host.search.flips import FlipGainModel, flip_scores
from mlgo_host.search.starts import (REPROBE, best_start, measure_thresholds, starts_pending, threshold_flags,
                                     with_flags, within_deadline)
from mlgo_host.search.sites import (Decision, Site, final_functions_of, site_of_key, site_of_line,
                                   unique_decisions)

log = logging.getLogger("mlgo_host.search")

#: flips per compile at most: more risks more failed attributions (each a split)
MAX_BATCH = 48
#: sites of one callee flipped together at most (groups)
MAX_GROUP = 6
#: inlined sites of one callee left out together at most (outline groups)
MAX_OUTLINE = 64
#: flips measured in copies of their function per compile at most (each copy adds its function's
#: compile time: 30 copies of zstd's hub took 5.8 s against 0.4 s for one compile of the module)
MAX_WORLDS = 24
#: the functions one world may copy as its roots at most: a flip whose code lands in several functions (a
#: helper's call, the helper inlined into two to seven hubs on zstd_double_fast) is measured in a copy of
#: all of them, read from the sum of their copies against their controls.  Chosen on the validation split:
#: at 12 compiles per module 18,286 B with 8 (and with 16) against 18,078 with 4; at 60, 24,715 against 24,771
MAX_ROOTS = 8
#: the share of a search's compiles the outline groups measured first may take at most (see
#: :meth:`BatchedSearch.early_outlines`; chosen on the validation split at 12 compiles per module:
#: 0 found 11,622 B, 0.25 12,336, 0.5 12,894, all of them 9,672)
EARLY_OUTLINE_SHARE = 0.5
#: a flip's chance to pay when the prior says nothing of it (the share of paying flips in the
#: flip-effect table: 785 of 9,912 measured)
UNKNOWN_P = 0.08


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
    #: set while packed into a batch: the function it is measured in a copy of (see mlgo_host.search.copytext),
    #: or the functions, sorted, when its code lands in several (:func:`roots_of`)
    world: World | None = None
    #: functions left to the compiler's own heuristic in its compile (an *answered* flip, see
    #: :meth:`BatchedSearch.answered`): their sites are what the compiler then inlines
    release: frozenset[str] = frozenset()
    #: the search's :attr:`BatchedSearch.version` its footprint was formed at (formed again when stale)
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


class BatchedSearch:
    """The search of one module (see the module docstring)."""

    def __init__(self, module: Module, probe: Probe, evaluator: ReplayEvaluator, *, budget: int,
                 model: FlipGainModel | None = None, deadline: float | None = None, max_batch: int = MAX_BATCH,
                 prior=None, worlds: bool = True):
        self.module = module
        self.probe = probe
        self.ev = evaluator
        self.budget = budget
        self.deadline = deadline
        self.max_batch = max_batch
        self.model = model
        #: a trained policy's P(inline) over feature records (the shipped one), or None: the prior's lead
        self.prior = prior
        first = list(unique_decisions(probe.decisions))
        self.sites = {d.site.key: d.site for d in first}
        self.inline: dict[str, Site] = {d.site.key: d.site for d in first if d.inlined}
        #: the start's inlined keys per function holding them (a function whose keys are these is untouched)
        self._start_keys: dict[str, set[str]] = {}
        for k, x in self.inline.items():
            self._start_keys.setdefault(x.caller, set()).add(k)
        #: bumped whenever the reference or the set changes: what footprints are formed against
        self.version = 0
        self._base: Measured | None = None
        #: what is read off the current set, per set (see :meth:`_per_set`): name -> (its key, the value)
        self._set_views: dict[str, tuple[tuple[int, int], object]] = {}
        self.start: Measured | None = None
        self.outcomes: list[Outcome] = []
        self.tried: set[str] = set()
        self.broken: set[str] = set()  # keys the compiler did not match
        self.flips_measured = 0
        self.batches = 0
        #: why batches were split: reason -> count (reported)
        self.splits: dict[str, int] = {}
        self.earlier: list[dict] = []  # the flips of the searches this one resumes
        #: functions whose size in the reference is derived from a batch, not compiled (see accept)
        self.unverified: set[str] = set()
        #: the reference is a compile's (its total exact), not derived
        self.compiled = True
        #: flips applied since the reference was last compiled (they derived it)
        self._derived_by: list[Candidate] = []
        #: flips to undo, measured first: applied together, they came out larger than measured apart
        self.suspects: list[Candidate] = []
        #: (key, inline) of flips whose undoing paid: measured beside others they read wrong, so from then on
        #: they are measured alone (a sweep proposing one again would apply it, undo it, and sweep again:
        #: validation's utf8_string spent 700 compiles on one such flip)
        self.interacting: set[tuple[str, bool]] = set()
        #: bytes the compiled references came out larger than derived ones (winners that interact)
        self.drift = 0
        #: the reference is the probe's plain compile, not yet checked against a replay (see begin)
        self.provisional = False
        self.exhausted = False
        #: winners applied, in this search and the ones it resumes; and their number when the last sweep began
        self.wins = 0
        self.sweep_mark = 0
        #: the search ended with a sweep to measure (left pending for a resumed search)
        self.sweep_left = False
        #: the groups and the answered flips were first formed (after a pass measured every flip)
        self.grouped = False
        #: outline groups measured before the single flips (see :meth:`early_outlines`)
        self.early: list[Candidate] = []
        #: flips queued but not measured when the budget or the time ran out (kept for a resumed search)
        self.pending: list[Candidate] = []
        self.default_slot: str | None = None  # what the probe's policy read the default from (imitation)
        self.start_text: int | None = None
        self._first = first
        #: measure flips of one function in copies of it (:mod:`.copytext`); functions where a copy failed are left out
        self.worlds = worlds
        self.no_worlds: set[World] = set()  # (a root, or a world's roots)
        #: flips whose copy came out with other sites changed too: measured in place from then on
        self.not_in_copies: set[str] = set()
        self.world_flips = 0  # flips measured in copies
        self._text: ModuleText | None = None
        self._trees: dict[World, frozenset[str] | None] = {}
        #: site key -> the prior's probability that its flip pays (with a prior): where, and how much, to search
        self.flip_p: dict[str, float] = self._flip_probabilities(first)

    def resume_from(self, res: dict) -> None:
        """Go on from an earlier result: its best set, its compile of it (or
        one compile) and the flips it tried."""
        self.inline = {k: self.sites.get(k) or site_of_line(ln) for k, ln in res["inline_all"].items()}
        self.tried = set(res["tried"])
        self.broken = set(res.get("broken", ()))
        self.start_text = res.get("replay_start_size")
        self.earlier = list(res["flips"])
        self.flips_measured = res.get("flips_measured", 0)
        self.world_flips = res.get("flips_in_copies", 0)
        self.batches = res.get("batches", 0)
        self.grouped = res.get("grouped", False)
        self.wins = res.get("wins", 0)
        self.sweep_mark = res.get("sweep_mark", 0)
        self.interacting = {(k, bool(inline)) for k, inline in res.get("interacting", ())}
        ref = res.get("reference")
        if ref is None and not res["tried"]:  # a probe only: its decisions' compile is the start
            self.begin()
        else:
            self.base = self.start = ref if ref is not None else self.ev.measure(self.inline.values())
        self.pending = self._pending_of(res.get("pending", ()))

    def _pending_of(self, stored: Iterable[dict]) -> list[Candidate]:
        """The flips an earlier search queued and did not measure (see
        :func:`result_of`), their footprints from the reference."""
        flips = [(tuple(self.sites.get(k) or site_of_line(ln) for k, ln in zip(p["keys"], p["lines"])), p)
                 for p in stored]
        for sites, _ in flips:
            for x in sites:
                self.sites.setdefault(x.key, x)  # (an exposed site: not a probe decision)
        final = self._final()
        out = []
        for sites, p in flips:
            c = self._candidate(sites, p["inline"], final, kind=p["kind"], index=p.get("index"))
            if p.get("release"):  # an answered flip, formed again: dropped when its functions changed since
                c = self.answered(c, final)
                if c is None:
                    continue
            out.append(c)
        return out

    # -- the reference --------------------------------------------------------
    def begin(self) -> Measured:
        """The start and the reference: the probe's own decisions compiled by
        replay; keys the compiler did not apply are set aside.  When the
        probe's plain compile made exactly these decisions (tune's probe
        takes the compiler's own), its object stands in for that compile
        until the first batch checks it (:meth:`_check_start`)."""
        plain = self.probe.plain
        if plain is not None and plain.text == self.probe.text and all(
                (k in self.inline) == (k in plain.inlined) for k in self.sites):
            self.base = self.start = plain
            self.start_text = plain.text
            self.provisional = True
            return self.base
        return self._compile_start()

    def _compile_start(self) -> Measured:
        self.base = self.start = self.ev.measure(self.inline.values())
        self.start_text = self.base.text
        self.provisional = False
        self._trees.clear()
        missing = set(self.inline) - self.base.inlined
        self.broken |= missing
        return self.base

    def _check_start(self, read: bool, why: str) -> bool:
        """After a batch's attribution against a reference that is the plain
        compile's: one that held checked it (every function outside the
        flips' footprints, and every key nobody flipped, as the replay gives
        them); one that failed compiles the replay (True: measure again),
        since the failure may be the replay's, not a flip's (a key it does
        not match, seen in 5 of 126 modules)."""
        if not self.provisional or why == "footprints overlap":  # (no function was compared)
            return False
        if read:
            self.provisional = False
            return False
        self._compile_start()
        return True

    def _flip_probabilities(self, ds: Sequence[Decision]) -> dict[str, float]:
        if self.prior is None or not ds:
            return {}
        feats = self.probe.episode.features()[[d.index for d in ds]]
        p1 = np.asarray(self.prior(feats), dtype=np.float64)
        return {d.site.key: float(1.0 - p if d.inlined else p) for d, p in zip(ds, p1)}

    def promise(self) -> float | None:
        """The flips that may still pay, as the prior expects them: the sum
        of its probabilities over the flips not measured yet (None without
        a prior).  ``tune`` shares its compiles by it."""
        if self.prior is None:
            return None
        return float(sum(p for k, p in self.flip_p.items() if k not in self.tried and k not in self.broken))

    @property
    def base(self) -> Measured | None:
        """The reference: the current best set's sizes and inlined keys."""
        return self._base

    @base.setter
    def base(self, m: Measured | None) -> None:
        self._base = m
        self.version += 1  # (every change of the set comes with a new reference)

    def _defined(self) -> set[str]:
        return set(self.base.sizes.functions)

    def _final(self) -> dict[str, frozenset[str]]:
        """Where each function's code ends up under the current set (see
        :func:`~mlgo_host.search.sites.final_functions`): the set's inline
        tree, not the probe's, which a winner may have changed since (a
        helper left out of one hub; a call inlined that the probe left
        out)."""
        def build() -> dict[str, frozenset[str]]:
            names = {x.caller for x in self.sites.values()} | {x.callee for x in self.sites.values()}
            return final_functions_of(self.inline.values(), names, self._defined())

        return self._per_set("final", build)

    def _per_set(self, name: str, build):
        """``build()``, computed once per set and reference (:attr:`version`)
        and per number of known sites (sites only grow: exposed ones join)."""
        now = (self.version, len(self.sites))
        view = self._set_views.get(name)
        if view is None or view[0] != now:
            view = self._set_views[name] = (now, build())
        return view[1]

    def _footprint(self, sites: Sequence[Site], final: dict[str, frozenset[str]], inline: bool = True
                   ) -> frozenset[str]:
        """The functions flipping ``sites`` (all to ``inline``) may change:
        where their callers' code ends up, and the callee when the flip may
        delete it (an inlined call of a callee with no other call left out)
        or bring it back (an un-inlined call of a callee that is gone)."""
        fp: set[str] = set()
        flipped = {x.key for x in sites}
        for s in sites:
            fp |= final.get(s.caller, frozenset({s.caller}))
            if inline and self._left_out(s.callee, flipped) == 0:
                fp.add(s.callee)
            elif not inline and s.callee not in self.base.sizes.functions:
                fp.add(s.callee)
        return frozenset(fp)

    def _left_out(self, callee: str, besides: set[str] = frozenset()) -> int:
        """Known calls of ``callee`` the current set does not inline (but
        ``besides``), in functions the object still has (a call in a
        function inlined everywhere and gone lives on in its copies)."""
        def build() -> dict[str, set[str]]:
            defined = self.base.sizes.functions
            left: dict[str, set[str]] = {}
            for k, x in self.sites.items():
                if x.caller in defined and k not in self.inline:
                    left.setdefault(x.callee, set()).add(k)
            return left

        return len(self._per_set("left out", build).get(callee, set()) - set(besides))

    def _candidate(self, sites: tuple[Site, ...], inline: bool, final, **kw) -> Candidate:
        reads = frozenset(s.callee for s in sites) if inline else frozenset()
        return Candidate(sites, inline, self._footprint(sites, final, inline), reads=reads, formed=self.version, **kw)

    def fresh(self, c: Candidate) -> Candidate:
        """``c`` with its footprint formed against the current set, when
        winners changed the set since it was formed: a flip retried after a
        winner left a helper out of one of two hubs lands in the other one
        alone now (and may go in a copy of it); one whose caller a winner
        inlined somewhere lands there too (else its attribution fails and
        the batch is split).  An answered flip keeps its own."""
        if c.formed == self.version or c.release:
            return c
        return dataclasses.replace(c, footprint=self._footprint(c.sites, self._final(), c.inline),
                                   formed=self.version)

    # -- candidates -------------------------------------------------------------
    def candidates(self) -> list[Candidate]:
        """Every flip of a probe decision with a working key, best prior first."""
        final = self._final()
        ds = [d for d in self._first if d.site.key not in self.broken]
        if not ds:
            return []
        scores = self._scores(ds)
        out = [self._candidate((d.site,), not d.inlined, final, score=float(sc), index=d.index)
               for d, sc in zip(ds, scores)]
        out.sort(key=lambda c: -c.score)
        return out

    def _scores(self, ds: Sequence[Decision]) -> np.ndarray:
        ep = self.probe.episode
        feats = ep.features()[[d.index for d in ds]]
        acts = np.array([1 if d.inlined else 0 for d in ds], dtype=np.int64)
        p = np.array([self.flip_p[d.site.key] for d in ds]) if self.prior is not None else None
        return flip_scores(feats, acts, model=self.model, prior_flip_p=p)

    def resweep(self) -> list[Candidate]:
        """Once every flip was measured (the groups and answered flips too),
        every probe decision's site flipped again from the current best, when
        winners were applied since the last such sweep began: a flip that
        lost beside the old set may pay beside the new one, which the
        retries (only flips whose functions a winner changed) miss.  A sweep
        the search's compiles left do not afford (at its flips per compile
        so far) is left :attr:`pending`, measured when the search is
        resumed: ``tune`` gives its next pass's compiles to the modules whose
        flips were not all measured first.  Measured on the validation split:
        at 12 compiles per module sweeping at once found 13,514 bytes and
        leaving every sweep to the next pass 13,960; at 60, 22,909 and 22,134
        (each resumed sweep got a few compiles, one of them its final compile).
        Not with a deadline: there each module searches until it, in turn,
        and a sweep takes the time of the modules not searched yet (measured
        in ``make demo``: two of its held-out modules got no search, 515
        bytes lost)."""
        if not self.grouped or self.wins <= self.sweep_mark or self.deadline is not None:
            return []
        self.sweep_mark = self.wins
        final = self._final()
        return [self._candidate(c.sites, c.sites[0].key not in self.inline, final, score=c.score, index=c.index,
                                kind="again") for c in self.candidates()]

    def groups(self) -> list[Candidate]:
        """Flips of several sites that may pay only together, formed once
        every single flip was measured: per callee, its not-inlined sites
        whose single flips all lost, inlined together (its deletion may need
        every one); and per callee inlined at every call, all its inlined
        sites left out together (:meth:`outline_groups`)."""
        lost_inline, lost_outline = self._lost_singles()
        final = self._final()
        out = self.inline_groups(lost_inline, final) + self.caller_groups(lost_inline, final) \
            + self.outline_groups(lost_outline, final)
        return list({c.key: c for c in out}.values())  # (a callee's calls in one function may be all of them)

    def _lost_singles(self) -> tuple[set[str], set[str]]:
        """The keys of single-site flips the compiler applied and that did
        not pay, in this search and the ones it resumes: (to inline, to
        leave out)."""
        lost: tuple[set[str], set[str]] = (set(), set())
        for f in self.earlier:
            if " + " not in f["key"] and f["applied"] and f["delta"] >= 0:
                lost[f["from"]].add(f["key"])
        for o in self.outcomes:
            c = o.candidate
            if len(c.sites) == 1 and o.applied and o.delta >= 0:
                lost[0 if c.inline else 1].add(c.key)
        return lost

    def outline_groups(self, lost: set[str], final: dict[str, frozenset[str]]) -> list[Candidate]:
        """Per callee the object no longer has (every call inlined), all its
        inlined sites left out together when each one's own flip lost
        (keys in ``lost``): one body and k calls can be smaller than k
        inlined copies, though no one call pays for bringing the body back
        (what -Oz's per-site cost model cannot see).  ``final``: where each
        function's code ends up (:func:`final_functions`)."""
        defined = self.base.sizes.functions
        by_callee: dict[str, list[Site]] = {}
        for s in self.inline.values():
            if s.callee not in defined:  # (a site in a function inlined everywhere too: its copies call it then)
                by_callee.setdefault(s.callee, []).append(s)
        return [self._candidate(tuple(sites), False, final, kind="outline")
                for callee, sites in by_callee.items()
                if 2 <= len(sites) <= MAX_OUTLINE and all(s.key in lost for s in sites)]

    def early_outlines(self) -> list[Candidate]:
        """Per callee inlined at two or more sites, all of them left out
        together, measured first (the most sites first): the move a greedy
        pass over the channel makes when one flip leaves a helper too big for
        the compiler to inline again, and which no single flip shows (each
        call alone pays for a body; ``zstd_double_fast``: 61 inlined calls of
        ``ZSTD_hash8Ptr`` left out, -303 B, where 60 of the 61 flips of one
        call each cost 50 to 352 B).  Unlike :meth:`outline_groups` it asks neither that
        every single flip lost nor that the body is gone."""
        final = self._final()
        by_callee: dict[str, list[Site]] = {}
        for s in self.inline.values():
            by_callee.setdefault(s.callee, []).append(s)
        out = [self._candidate(tuple(sorted(sites, key=lambda x: x.key)), False, final, kind="outline")
               for sites in by_callee.values() if 2 <= len(sites) <= MAX_OUTLINE]
        out.sort(key=lambda c: -len(c.sites))
        return [c for c in out if c.key not in self.tried]

    def answered(self, c: Candidate, final: dict[str, frozenset[str]] | None = None) -> Candidate | None:
        """Flip ``c`` (one site) with the functions that hold calls of the
        function its call is written in left to the compiler's own heuristic
        in the same compile: the move a greedy pass over the channel makes,
        where each later decision is the compiler's answer to the flip
        (``zstd_double_fast``: ``MEM_readLE64`` left out of ``ZSTD_hash8Ptr``
        costs +451 B replayed alone, and -258 B answered, the compiler then no
        longer inlining ``ZSTD_hash8Ptr`` at its 61 calls).  Only when those
        functions are as the start has them (else the heuristic would also
        undo what the search applied there); None otherwise.  ``final``:
        where each function's code ends up (:func:`final_functions`), when
        the caller has it."""
        if len(c.sites) != 1 or c.release:
            return None
        (s,) = c.sites
        written_in = s.chain[0][0]
        if s.caller != written_in:  # (a call in an inlined copy: the function holding it would be left too)
            return None
        holders = frozenset(x.caller for x in self.sites.values() if x.callee == written_in) - {written_in}
        if not holders or not all(self._untouched(h) for h in holders):
            return None
        if final is None:
            final = self._final()
        fp = set(c.footprint) | holders
        for x in self.sites.values():  # (the heuristic may inline, delete or bring back any of their callees)
            if x.caller in holders:
                fp |= final.get(x.caller, frozenset({x.caller})) | {x.callee}
        return dataclasses.replace(c, footprint=frozenset(fp), release=holders, kind="answered", index=None,
                                   world=None)

    def _untouched(self, fn: str) -> bool:
        """Does the current set inline in ``fn`` exactly what the start did?"""
        return {k for k, x in self.inline.items() if x.caller == fn} == self._start_keys.get(fn, set())

    def answered_flips(self) -> list[Candidate]:
        """:meth:`answered` of every single flip the compiler applied that
        did not pay, formed once every single flip was measured (the calls of
        the function they are written in most inlined first: the more
        copies the compiler may stop making)."""
        inlined = Counter(x.callee for x in self.inline.values())
        final = self._final()
        lost_inline, lost_outline = self._lost_singles()
        out = []
        for key in sorted(lost_inline | lost_outline):
            x = self.sites.get(key)
            if x is None or self._in_set(Candidate((x,), key in lost_inline, frozenset())):
                continue
            a = self.answered(self._candidate((x,), key in lost_inline, final), final)
            if a is not None and a.key not in self.tried:
                out.append(a)
        out.sort(key=lambda c: -inlined[c.sites[0].chain[0][0]])
        return out

    def inline_groups(self, lost: set[str], final: dict[str, frozenset[str]]) -> list[Candidate]:
        """Per callee, its not-inlined sites (at most :data:`MAX_GROUP`)
        when each one's own flip lost (keys in ``lost``), inlined together."""
        defined = self.base.sizes.functions
        by_callee: dict[str, list[Site]] = {}
        for s in self.sites.values():
            if s.caller in defined and s.key not in self.inline:
                by_callee.setdefault(s.callee, []).append(s)
        return [self._candidate(tuple(rest), True, final, kind="group")
                for callee, rest in by_callee.items()
                if 2 <= len(rest) <= MAX_GROUP and len(rest) == self._left_out(callee)
                and all(s.key in lost for s in rest)]

    def caller_groups(self, lost: set[str], final: dict[str, frozenset[str]]) -> list[Candidate]:
        """Per function where code lands (``final``) and per callee, its
        calls there that the set leaves out, inlined together when each
        one's own flip lost (keys in ``lost``): the pairs that pay only
        together inside one function, where a callee's whole group
        (:meth:`inline_groups`) would also pay for its copies elsewhere
        (double-conversion's ``Bignum::MultiplyByUInt64``: four calls of the
        ``RawBigit`` accessor, each costing bytes alone and -54 B together;
        with them the search from -Oz found
        866 B on that module against 598).  Chosen on the validation split:
        24,841 B at 60 compiles per module against 24,765 (in 8,105
        compiles against 8,295), 18,306 at 12 against 18,286."""
        by: dict[tuple[frozenset[str], str], list[Site]] = {}
        for s in self.sites.values():
            if s.key in lost and s.key not in self.inline:
                by.setdefault((final.get(s.caller, frozenset({s.caller})), s.callee), []).append(s)
        return [self._candidate(tuple(sorted(sites, key=lambda x: x.key)), True, final, kind="group")
                for sites in by.values() if 2 <= len(sites) <= MAX_OUTLINE]  # (the outline groups' bound)

    def reinlined(self, won: Candidate) -> list[Candidate]:
        """After an outline group pays, each of its calls inlined again
        alone: the body is back either way, so a call whose inlined copy
        folds away (a constant argument) may pay now."""
        if won.kind != "outline":
            return []
        final = self._final()
        index = {d.site.key: d.index for d in self._first}
        return [self._candidate((s,), True, final, kind="retry", index=index.get(s.key)) for s in won.sites]

    def trimmed(self, o: Outcome) -> Candidate | None:
        """A losing outline group (a callee left out at several sites)
        without the calls whose functions it made larger: its compile gives
        each caller's change apart (the functions its calls' code ends up
        in) and, as the rest, what the callee's body and what came with it
        cost, so the subset of callers that pay is read off one compile and
        measured once, where flipping each call back alone would take a
        compile per call and see no body to share.  None when no strict
        subset is predicted to pay."""
        c = o.candidate
        if c.kind != "outline" or c.inline or len(c.sites) < 2 or not o.applied or o.delta < 0 or o.measured is None:
            return None
        final = self._final()
        units = _landing_units(c.sites, final)
        if len(units) < 2:
            return None
        now, ref = o.measured.sizes.functions, self.base.sizes.functions
        change = [sum(now.get(f, 0) - ref.get(f, 0) for f in fns) for fns, _ in units]
        body = o.delta - sum(change)  # (the callee's body, what it refers to, and anything else the group moved)
        paying = [i for i, d in enumerate(change) if d < 0]
        if not paying or len(paying) == len(units) or body + sum(change[i] for i in paying) >= 0:
            return None
        sites = tuple(sorted((x for i in paying for x in units[i][1]), key=lambda x: x.key))
        t = self._candidate(sites, False, final, kind="outline")
        return None if t.key in self.tried else t

    def _in_set(self, c: Candidate) -> bool:
        """Is ``c`` already what the current set does (a group applied it)?"""
        return all((s.key in self.inline) == c.inline for s in c.sites)

    def exposed(self, won: Candidate) -> list[Candidate]:
        """The sites a winning ``inline`` flip brought into its caller."""
        if not won.inline or won.index is None:
            return []
        d = self.probe.decisions[won.index]
        final = self._final()
        out = []
        for s in d.exposed:
            if s.key in self.sites or s.key in self.broken:
                continue
            self.sites[s.key] = s
            out.append(self._candidate((s,), True, final, kind="exposed"))
        return out

    # -- worlds: flips of one function measured in copies of it (mlgo_host.search.copytext) --
    def _module_text(self) -> ModuleText:
        if self._text is None:
            self._text = ModuleText.of_bitcode(str(self.module.bc_path), llvm_tool(self.ev.clang, "llvm-dis"),
                                               self.ev.timeout)
        return self._text

    def _debug_names(self, tree: Iterable[str]) -> set[str]:
        text = self._module_text()
        return {text.debug_name(fn) for fn in tree}

    def tree(self, root: World) -> frozenset[str] | None:
        """What a copy of ``root`` copies with it: ``root`` and, down the
        calls the current set inlines that lie in copied bodies, every
        function holding decisions whose code ends up in ``root`` alone
        (None when the module's text cannot copy them).  For several roots,
        all of them and every such function whose code ends up in them
        only."""
        if root in self._trees:
            return self._trees[root]
        defined = self._defined()
        final = self._final()
        callers = {x.caller for x in self.sites.values()}
        roots = frozenset(roots_of(root))
        out = set(roots)
        grew = True
        while grew:
            grew = False
            names = self._debug_names(out)
            for x in self.inline.values():
                c = x.callee
                if (c not in out and x.caller in out and c in callers and c not in defined
                        and final.get(c) and final[c] <= roots and _copied_chain(x, names)[0]):
                    out.add(c)
                    grew = True
        t = frozenset(out) if self._module_text().can_copy(out) else None
        self._trees[root] = t
        return t

    def brought_back(self, c: Candidate) -> str | None:
        """The callee an ``out`` flip brings back: every call of it was
        inlined and its body is gone, so leaving one out makes the compiler
        emit it again (None for any other flip)."""
        callees = {s.callee for s in c.sites}
        if c.inline or c.release or len(callees) != 1:
            return None
        (x,) = callees
        return x if x not in self.base.sizes.functions else None  # (gone since the flip was formed, too)

    def world_root(self, c: Candidate) -> World | None:
        """The function ``c`` can be measured in a copy of: the one function
        of its footprint (besides the callee it brings back), or its
        functions (up to :data:`MAX_ROOTS`, sorted), when every site it
        flips is a call their tree holds and it inlines no function of the
        tree (else None)."""
        if not self.worlds or c.key in self.not_in_copies or c.release:
            return None
        # (an out flip's callee counts only while the flip would bring it back: it may have come back since)
        own = c.footprint - {x.callee for x in c.sites} if not c.inline else c.footprint
        if not 1 <= len(own) <= MAX_ROOTS:
            return None
        root: World = next(iter(own)) if len(own) == 1 else tuple(sorted(own))
        if root in self.no_worlds or any(r in self.no_worlds or r not in self.base.sizes.functions
                                         for r in roots_of(root)):
            return None
        try:
            t = self.tree(root)
        except MlgoHostError as e:  # no text to copy: measure as before
            log.info("%s: no copies (%s)", self.module.name, e)
            self.worlds = False
            return None
        if t is None or c.reads & t or any(s.caller not in t for s in c.sites):
            return None
        back = self.brought_back(c)
        if back in t and not self._module_text().is_local(back):
            return None  # (its copy would come back as a static function, which it is not in place)
        return root

    def _in_world(self, s: Site, tree: frozenset[str], names: set[str], k: int) -> Site:
        """``s`` as world ``k`` names it: the functions whose bodies the copy
        renamed (the caller, and inward while the inlined function is one
        of the tree) carry the world's suffix, and so does the callee when
        the call lies in a renamed body and the callee is of the tree."""
        inner, renamed = _copied_chain(s, names)
        chain = tuple((world_name(f, k) if r else f, line, col) for (f, line, col), r in zip(s.chain, renamed))
        callee = world_name(s.callee, k) if inner and s.callee in tree else s.callee
        return Site(callee, world_name(s.caller, k), chain)

    def _world_plan(self, batch: Sequence[Candidate]) -> list[tuple[int, World, Candidate | None]]:
        """(world, root, flip) for a batch: a control world (no flip) per
        root (or roots), then a world per flip measured in a copy."""
        roots = sorted({c.world for c in batch if c.world is not None}, key=roots_of)
        plan: list[tuple[int, World, Candidate | None]] = [(k, r, None) for k, r in enumerate(roots)]
        plan += [(len(plan) + i, c.world, c) for i, c in enumerate(c for c in batch if c.world is not None)]
        return plan

    def _measure_worlds(self, batch: list[Candidate]) -> list[Outcome]:
        """One compile: the batch's ordinary flips as :meth:`measure` does,
        and each flip packed into a world in its own copy of its function
        (:meth:`_attribute_worlds`).  When the copies cannot be read, the
        ordinary flips are measured alone and the others are returned
        unmeasured (the search measures them without copies)."""
        plan = self._world_plan(batch)
        normal = [c for c in batch if c.world is None]
        backs = [c for c in batch if c.world is not None and self.brought_back(c)]
        sites = self._set_with(normal)
        scope: set[str] = set()
        for k, root, c in plan:
            t = self.tree(root)
            names = self._debug_names(t)
            members = self._set_with([c]) if c is not None else list(self.inline.values())
            sites += [self._in_world(x, t, names, k) for x in members if x.caller in t]
            scope |= {world_name(fn, k) for fn in t if fn in self.ev.scope}
        ir = self._module_text().with_copies({k: (root, self.tree(root)) for k, root, _ in plan})
        try:
            m = self.ev.measure(sites, ir=ir, scope=scope)
        except CompilerError as e:  # the copies' text did not compile: the flips go without copies
            log.warning("%s: a compile with copies failed (%s); measuring %s without copies",
                        self.module.name, str(e).splitlines()[0],
                        ", ".join(sorted({r for _, w, _ in plan for r in roots_of(w)})))
            out, why = None, "the compile failed"
        else:
            self.batches += 1
            out, why = self._attribute_worlds(normal, plan, m)
            if self._check_start(out is not None, why):
                return self._measure_worlds(batch)
            # (a derived reference has no pieces or referrers to read what moved by; measure() compiles it too)
            untraced = why in _TRACED and (not self.compiled or (backs and self.base.sizes.shared is None))
            if out is None and (self.unverified or untraced):
                # perhaps the derived reference, or one with no pieces to read a body brought back by: compile it,
                # then again (else a failure that was the derived reference's costs the function its copies for
                # good: leveldb's env_test measured 3 of its 265 flips in copies, 45 of 274 with this)
                self._compile_reference()
                return self._measure_worlds(batch)
        if out is None and normal and why != "the compile failed" and not why.startswith("copies"):
            # the flips measured in place failed, not the copies: those go on in copies, without them
            self._note_split(why)
            copied = [c for c in batch if c.world is not None]
            return self._measure_worlds(copied) + self.measure(normal)
        if out is None and backs and why != "the compile failed":
            # (perhaps a body they brought back moved what the originals are read by: they go in place from then
            # on, the rest again)
            self._note_split(why if why.startswith("copies") else "copies: " + why)
            self.not_in_copies |= {c.key for c in backs}
            rest = [c for c in batch if c not in backs]
            return self.measure(rest) if rest else []
        if out is None:
            self._note_split(why if why.startswith("copies") else "copies: " + why)
            self.no_worlds |= {root for _, root, _ in plan}
            for c in batch:
                c.world = None
            return self.measure(normal) if normal else []
        self.unverified.clear()
        self.flips_measured += len(out)
        self.world_flips += len(out) - len(normal)
        return out

    def _brought_back_in(self, plan) -> dict[int, tuple[str, str]]:
        """world -> (the function its flip brings back, as this compile names
        it; the callee): a callee of the copied tree comes back as the
        world's own copy of it, any other is the module's one, emitted once
        for every world that calls it."""
        out = {}
        for k, root, c in plan:
            x = self.brought_back(c) if c is not None else None
            if x is not None:
                out[k] = (world_name(x, k) if x in self.tree(root) else x, x)
        return out

    def _attribute_worlds(self, normal: list[Candidate], plan, m: Measured) -> tuple[list[Outcome] | None, str]:
        """The ordinary flips read as :meth:`_attribute` reads them from the
        object without the copies (None when that fails); each control copy
        must come out as large as its original, with the same sites inlined
        (a function whose control does not gets no copies again, and its
        flips of this batch are left out); a flip's gain is its copy's
        change from the control (code, unwind, tables and constant entries;
        alignment padding, which depends on where a copy lies, left out).
        A copy whose inlined sites are not the set's and its flip's is left
        out too: the flips left out are measured again in place."""
        copies = {world_name(r, k) for k, root, _ in plan for r in roots_of(root)}
        back = self._brought_back_in(plan)
        sizes = m.sizes
        # (what appeared where an in-place flip may change code is that flip's: an answered flip leaves
        # functions to the heuristic, which may stop inlining a wrapper there; zstd_double_fast's extDict_4..7)
        theirs = frozenset().union(*(c.footprint for c in normal))
        owners = _bodies_brought({name for name, _ in back.values()}, copies, self.base.sizes, sizes, theirs)
        if owners is None:
            return None, "copies: a body came back that no copy brought"
        functions = {f: n for f, n in sizes.functions.items() if f not in copies and f not in owners}
        pieces, came = _pieces_of(owners, self.base.sizes, sizes)
        other_sections = {k: n - came.get(k, 0) for k, n in sizes.other_sections.items()}
        other = sizes.other - sum(came.values())
        originals = ObjectSizes(sum(functions.values()) + other, functions, other,
                                other_sections=other_sections, padding=sizes.padding, pools=sizes.pools)
        plain, by_world = _split_worlds(m.inlined)
        out, why = self._attribute(normal, Measured(originals, plain, m.wall_s))
        originals_moved = out is None
        if originals_moved and (normal or not self.compiled or self.provisional):
            return None, why
        if originals_moved:
            # copies alone, against a compiled reference: the copies' calls alone changed the originals (more
            # callers of a static callee change what the compiler does with it; zstd_v01's FSE_initDStream).
            # A copy is read against its control in this compile, which must still equal the reference's function
            out = []
        base = self.base
        control: dict[World, dict[str, int]] = {}
        for k, root, c in plan:
            if any(world_name(r, k) not in sizes.functions for r in roots_of(root)):
                return None, "copies: a copy is missing from the object"
            if root in self.no_worlds:  # its control failed: its flips go back, measured in place later
                continue
            t = self.tree(root)
            names = self._debug_names(t)
            # (by debug name, which two functions may share: a key known to be another function's is not)
            ref_keys = {key for key in base.inlined if _outermost(key) in names
                        and (key not in self.sites or self.sites[key].caller in t)}
            got = by_world.get(k, set())
            own = {r: _own_size(sizes, world_name(r, k)) for r in roots_of(root)}
            if c is None:
                if any(n != _own_size(originals, r) for r, n in own.items()) or got != ref_keys:
                    # compiled apart it is other code (a short jump to a neighbour, a pass that saw its
                    # callers): no copies of it from now on
                    self._note_split("copies: a control copy differs from its function")
                    self.no_worlds.add(root)
                elif originals_moved and any(n != _own_size(base.sizes, r) for r, n in own.items()):
                    # the copies' calls changed the function itself, as they changed its copies (capstone's
                    # SystemZ printer: 4 bytes of 4,457): its flips are read against the control, which is
                    # the same code in the same compile; a winner's size, derived from the reference's,
                    # is checked by the next compile like any derived one
                    self._note_split("copies: the function moved with its copies")
                control[root] = own
                continue
            flipped = list(c.sites)
            moved = (got ^ ref_keys) - {s.key for s in flipped}
            if any(not _is_under_any(key, flipped) for key in moved):
                self._note_split("copies: the compiler changed sites nobody flipped")
                self.not_in_copies.add(c.key)  # (a copy of it will not read again: measured in place)
                continue  # this copy cannot be read: the flip goes back
            # (each root's copy against its control; the originals' sizes, unless they moved)
            gains = {r: n - control[root][r] for r, n in own.items()}
            changed = {r: base.sizes.functions[r] + d for r, d in gains.items()}
            delta = sum(gains.values())
            extra: frozenset[str] = frozenset()
            other: dict[str, int] = {}
            if k in back:
                # the bodies it brought back (the callee's, and those only brought-back bodies call) are its cost,
                # as in place: the same code wherever they are called from
                name, callee = back[k]
                for f in (f for f, who in owners.items() if name in who):
                    cost = _own_size(sizes, f)
                    delta += cost
                    changed[callee if f == name else f] = cost
                other = pieces.get(name, {})
                delta += sum(other.values())
                extra = frozenset(changed) - c.footprint  # (what came back, and the callee when gone only since)
            view = Measured(ObjectSizes(0, changed, 0), got, m.wall_s)
            out.append(Outcome(c, delta, _applied(c, view), view, extra=extra, other=dict(other)))
        return out, ""

    def _note_split(self, why: str) -> None:
        self.splits[why] = self.splits.get(why, 0) + 1

    # -- measuring ----------------------------------------------------------------
    def _set_with(self, batch: Sequence[Candidate]) -> list[Site]:
        inline = dict(self.inline)
        for c in batch:
            for s in c.sites:
                if c.inline:
                    inline[s.key] = s
                else:
                    inline.pop(s.key, None)
        released = _released(batch)
        return [x for x in inline.values() if x.caller not in released]

    def _left(self) -> bool:
        """Compiles and time left (one compile kept for :meth:`finish`)."""
        return self.ev.compiles < self.budget - 1 and (self.deadline is None or time.time() < self.deadline)

    def measure(self, batch: list[Candidate]) -> list[Outcome]:
        """Each flip of ``batch``'s change from the reference: one compile
        when the attribution holds; when it does not, the flips that added or
        removed a function (the usual owners of a moved constant) apart from
        the rest, else halves, each measured again.  A single flip's change
        is its functions' when that reads cleanly, else the object's.  A
        failure that may come from a reference not compiled yet compiles it
        first (:meth:`accept`)."""
        if not batch or not self._left():
            return []
        if any(c.world is not None for c in batch):
            return self._measure_worlds(batch)
        m = self.ev.measure(self._set_with(batch), release=_released(batch))
        self.batches += 1
        out, why = self._attribute(batch, m)
        if self._check_start(out is not None, why):
            return self.measure(batch)
        if out is None and why != "footprints overlap" and (self.unverified or (not self.compiled and why in _TRACED)):
            # (perhaps the derived reference; or one with no pieces to trace what moved by: compile it, then again)
            self._compile_reference()
            return self.measure(batch)
        if out is None and len(batch) == 1:
            c = batch[0]
            out = [Outcome(c, m.text - self.base.text, _applied(c, m), m)]
        elif out is None:
            self._note_split(why)
            suspects = [c for c in batch if _adds_or_removes(c, self.base.sizes, m.sizes)]
            if why == "bytes no function owns moved" and 0 < len(suspects) < len(batch):
                rest = [c for c in batch if c not in suspects]
                return self.measure(rest) + self.measure(suspects)
            half = len(batch) // 2
            return self.measure(batch[:half]) + self.measure(batch[half:])
        self.unverified.clear()  # every function outside the batch's footprints matched the reference
        self.flips_measured += len(out)
        if len(batch) == 1:
            out[0].alone = True
        return out

    def _attribute(self, batch: Sequence[Candidate], m: Measured) -> tuple[list[Outcome] | None, str]:
        """Each flip's change from its own functions, or None when the batch
        cannot be read that way (see the module docstring)."""
        base = self.base.sizes
        traced = base.shared is not None and m.sizes.shared is not None  # (both compiled: pieces and referrers)
        if not traced and not _only_padding_moved(base, m.sizes):
            return None, "bytes no function owns moved"
        owner: dict[str, Candidate] = {}
        for c in batch:
            for f in c.footprint:
                if f in owner:
                    return None, "footprints overlap"
                owner[f] = c
        delta = {c: 0 for c in batch}
        outside: dict[str, int] = {}
        for f in set(base.functions) | set(m.sizes.functions):
            d = m.sizes.functions.get(f, 0) - base.functions.get(f, 0)
            if d and f in owner:
                delta[owner[f]] += d
            elif d:
                outside[f] = d
        extra: dict[Candidate, set[str]] = {c: set() for c in batch}
        if outside:
            made = _made_or_dropped(outside, base, m.sizes, owner) if traced else None
            if made is None:
                return None, "a function outside every footprint changed"
            for f, c in made.items():
                delta[c] += outside[f]
                extra[c].add(f)
        other: dict[Candidate, dict[str, int]] = {c: {} for c in batch}
        if not _only_padding_moved(base, m.sizes):
            pieces = _pieces_moved(base, m.sizes, owner)
            if pieces is None:
                return None, "bytes no function owns moved"
            for (section, n), c in pieces:
                delta[c] += n
                other[c][section] = other[c].get(section, 0) + n
        flipped = [s for c in batch for s in c.sites]
        released = _released(batch)  # (there the compiler's heuristic decides: its answer is the flip's)
        moved = (m.inlined ^ self.base.inlined) - {s.key for s in flipped}
        if any(not _is_under_any(k, flipped) and _outermost(k) not in released for k in moved):
            return None, "the compiler changed sites nobody flipped"
        return [Outcome(c, delta[c], _applied(c, m), m, extra=frozenset(extra[c]), other=other[c])
                for c in batch], ""

    def batches_of(self, cands: list[Candidate]) -> list[list[Candidate]]:
        """Greedy packing: candidates in order, each into the first batch it
        does not interfere with: no function another flip may change is one
        it may change or copies, and the flips inlining calls of one callee
        leave at least one of its calls out (else together they may delete
        it, which none of them predicts); a flip whose undo paid alone
        (:attr:`interacting`)."""
        out: list[_Batch] = []
        roots = {id(c): self.world_root(c) for c in cands if (c.key, c.inline) not in self.interacting}
        many = Counter(roots.values())
        for c in cands:
            c.world = None
            alone = id(c) not in roots  # (its change is then the object's: exact)
            # (a root's one flip goes in place: that costs nothing more)
            root = roots[id(c)] if not alone and many[roots[id(c)]] >= 2 else None
            back = self.brought_back(c) if root is not None else None
            for b in ([] if alone else out):
                if not b.closed and len(b.flips) < self.max_batch and b.admits(c, self, root, back):
                    b.add(c, root, back)
                    break
            else:
                b = _Batch()
                if b.admits(c, self, root, back):  # (a flip on functions whose reference is not verified waits)
                    b.add(c, root, back)
                    b.closed = alone
                    out.append(b)
        if not out and cands:  # every flip waits for the reference: compile it
            self._compile_reference()
            return self.batches_of(cands)
        return [b.flips for b in out]

    def accept(self, won: list[Outcome]) -> list[Candidate]:
        """Apply a batch's winners.  The next reference is not compiled: its
        functions are the reference's with each winner's functions as the
        compile that measured it gave them (footprints are disjoint), so
        they stay *unverified* until a later batch, which keeps clear of
        them, finds every function outside its own footprints unchanged; a
        batch that fails then first compiles the reference.  Returns the
        winners kept."""
        if not won:
            return []
        self.wins += len(won)
        functions = dict(self.base.sizes.functions)
        other_sections = dict(self.base.sizes.other_sections)
        inlined = set(self.base.inlined)
        for o in won:
            o.accepted = True
            c = o.candidate
            for section, n in o.other.items():
                other_sections[section] = other_sections.get(section, 0) + n
            for f in c.footprint | o.extra:
                size = o.measured.sizes.functions.get(f)
                if size is None:
                    functions.pop(f, None)
                else:
                    functions[f] = size
            if c.release:  # the compiler's answer in the functions it was left: their sites now
                answer = {k for k in o.measured.inlined if _outermost(k) in c.release}
                for k in [k for k, x in self.inline.items() if x.caller in c.release]:
                    del self.inline[k]
                for k in answer:
                    x = self.sites.setdefault(k, site_of_key(k))
                    self.inline[k] = x
                inlined = {k for k in inlined if _outermost(k) not in c.release} | answer
            for s in c.sites:
                under = {k for k, x in self.inline.items() if x.is_under(s)} if not c.inline else set()
                if c.inline:
                    self.inline[s.key] = s
                    inlined.add(s.key)
                    inlined |= {k for k in o.measured.inlined if _is_under_any(k, [s])}
                else:
                    self.inline.pop(s.key, None)
                    for k in under:
                        del self.inline[k]
                    inlined -= {s.key} | under | {k for k in inlined if _is_under_any(k, [s])}
            self.unverified |= c.footprint | o.extra
        self._trees.clear()
        self._derived_by += [o.candidate for o in won]
        if len(won) == 1 and won[0].alone:
            # its compile is the new reference itself: exact, even where the flip's change spilled out of its
            # predicted footprint (then read from the object's total), which a derived reference would miss
            self.base = won[0].measured
            self.unverified.clear()
            self.compiled = True
            self._derived_by = []
            return [won[0].candidate]
        other = self.base.sizes.other + sum(n for o in won for n in o.other.values())
        sizes = ObjectSizes(sum(functions.values()) + other, functions, other, other_sections=other_sections)
        self.base = Measured(sizes, inlined, 0.0)
        self.compiled = False
        return [o.candidate for o in won]

    def _compile_reference(self) -> None:
        """Compile the current best (the reference a derived one stood for).
        When it comes out larger than derived, the flips that derived it
        interact (with each other, or with the flips they were measured
        beside): undoing each is measured first (:attr:`suspects`)."""
        derived = None if self.compiled else self.base.text
        self.base = self.ev.measure(self.inline.values())
        self.unverified.clear()
        self.compiled = True
        self._trees.clear()
        if derived is not None:
            self.drift += self.base.text - derived
        if derived is not None and self.base.text > derived + EH_FRAME_PADDING:
            final = self._final()
            self.suspects += [self._candidate(c.sites, not c.inline, final, kind="undo")
                              for c in self._derived_by if self._in_set(c)]
        self._derived_by = []

    def finish(self) -> None:
        """The best set compiled, so the reported size is the object's own
        (the budget keeps a compile for it)."""
        if not self.compiled:
            self._compile_reference()

    # -- the whole search --------------------------------------------------------
    def run(self) -> None:
        """Passes until the budget or the flips run out: every candidate
        once; then, while a pass found winners, again the flips whose
        functions a winner changed (their context is new); the groups after
        every pass that measured all it queued, formed from the best as it
        is then, each measured once (on validation at 60 compiles per module
        24,776 bytes against 24,679 when formed only after the first such
        pass; equal at 12), and the answered flips once.  A resumed search
        starts with the flips the earlier one left :attr:`pending`."""
        if self.base is None:
            self.begin()
        keys = {c.key for c in self.pending}
        self.early = [c for c in self.early_outlines() if c.key not in keys]
        self._passes(self.pending + [c for c in self.candidates() if c.key not in self.tried and c.key not in keys])
        self.finish()

    @property
    def stopped(self) -> str:
        """Why the search ended: every flip measured, a sweep left for the
        next pass (:meth:`resweep`), or the budget or the time ran out."""
        if self.exhausted:
            return "exhausted"
        if self.sweep_left:
            return "sweep"
        return "time" if self.deadline is not None and time.time() >= self.deadline else "budget"

    def _passes(self, queue: list[Candidate]) -> None:
        """Passes over ``queue``; what the budget or the time left unmeasured
        stays :attr:`pending` (a resumed search starts with it)."""
        queue = queue or self.resweep()
        self.exhausted = not queue
        while queue and self._left():
            touched, lost, rest = self._pass(queue)
            # (an answered flip is not retried: its functions left to the heuristic may hold winners now)
            queue = rest + [dataclasses.replace(o.candidate, kind="retry") for o in lost
                            if o.applied and o.candidate.footprint & touched and not self._in_set(o.candidate)
                            and not o.candidate.release]
            if not rest:  # every flip of the pass measured: the groups (again, from the new best), the answered flips
                keys = {c.key for c in queue}
                queue += [c for c in self.groups() if c.key not in self.tried and c.key not in keys]
                if not self.grouped:
                    queue += self.answered_flips()
                    self.grouped = True
            if not queue:
                queue = self.resweep()
                if queue and not self._affords(queue):  # (it waits for tune's next pass: see resweep)
                    self.sweep_left = True
                    break
            self.exhausted = not queue and self._left()
        self.pending = queue

    def _affords(self, sweep: list[Candidate]) -> bool:
        """Are this search's compiles left enough for ``sweep`` at the
        flips per compile it measured so far?"""
        per_compile = self.flips_measured / max(1, self.ev.compiles)
        return self.budget - 1 - self.ev.compiles >= len(sweep) / max(per_compile, 1.0)

    def _expected_winners(self, batch: list[Candidate]) -> float:
        """How many of ``batch``'s flips the prior expects to pay (its
        probabilities; without a prior, or for a flip it has none for, a
        flip counts as :data:`UNKNOWN_P`)."""
        return sum(self.flip_p.get(c.key, UNKNOWN_P) for c in batch)

    def _early_left(self) -> bool:
        """Outline groups to measure first, within their share of the compiles."""
        return bool(self.early) and self.ev.compiles < self.budget * EARLY_OUTLINE_SHARE

    def _next_batch(self, queue: list[Candidate]) -> tuple[list[Candidate], list[Candidate]]:
        """The batch :meth:`batches_of` packs from ``queue`` with the most
        expected winners (marked tried), and the candidates left: the
        prior's best flip leads the first batch, but a batch of many flips
        measured in copies may be worth more than it.  While outline groups
        are measured first (:meth:`early_outlines`), the next one leads the
        batch and the flips it leaves room for fill it."""
        queue = [self.fresh(c) for c in queue]
        if self._early_left():
            lead = self.fresh(self.early.pop(0))
            batch = self.batches_of([lead] + queue)[0]
            if lead not in batch:  # (it waits for the reference: measured alone once that is compiled)
                batch = [lead]
        else:
            self.early = []
            batch = max(self.batches_of(queue), key=self._expected_winners)  # (the first of equals)
        chosen = {id(c) for c in batch}
        self.tried.update(c.key for c in batch)
        return batch, [c for c in queue if id(c) not in chosen]

    def sweep(self, queue: list[Candidate]) -> list[Outcome]:
        """Every flip of ``queue`` measured by batches against the reference
        as it is, winners never applied (the reference stays put): each
        flip's change alone from the same decision set, what the flip-effect
        table (:mod:`mlgo_host.search.effects`) records."""
        outs: list[Outcome] = []
        queue = list(queue)
        while queue and self._left():
            batch, queue = self._next_batch(queue)
            got = self.measure(batch)
            self.outcomes.extend(got)  # per batch: a compile that fails later keeps these
            outs += got
            queue += self._unmeasured(batch, got)
        return outs

    def _unmeasured(self, batch: list[Candidate], outs: list[Outcome]) -> list[Candidate]:
        """The flips of ``batch`` left unmeasured (a failed copy, or the
        budget or time spent in the middle of a split), untried again: the
        search measures them later without copies, or a resumed search does
        (a flip stored as tried is never measured again)."""
        done = {id(o.candidate) for o in outs}
        back = [c for c in batch if id(c) not in done]
        for c in back:
            c.world = None
            self.tried.discard(c.key)
        return back

    def _pass(self, queue: list[Candidate]) -> tuple[set[str], list[Outcome], list[Candidate]]:
        """Measure every flip of ``queue`` (and the sites winners expose) by
        batches, applying each batch's winners; returns the functions the
        winners changed, the flips that did not pay and the flips the budget
        or the time left unmeasured."""
        touched: set[str] = set()
        lost: list[Outcome] = []
        queue = list(queue)
        while (queue or self.suspects) and self._left():
            if self.suspects:  # (their footprints were disjoint when they won together)
                batch, self.suspects = self.suspects, []
            else:
                batch, queue = self._next_batch(queue)
            outs = self.measure(batch)
            self.outcomes.extend(outs)
            queue += self._unmeasured(batch, outs)
            won, later = _disjoint_best([o for o in outs if o.applied and o.delta < 0])
            queue += [dataclasses.replace(o.candidate, kind="retry", world=None) for o in later]
            losers = [o for o in outs if not (o.applied and o.delta < 0)]
            lost += losers
            queue += [t for t in map(self.trimmed, losers) if t is not None]
            for c in self.accept(won):
                if c.kind == "undo":
                    self.interacting.add((c.key, not c.inline))
                touched |= c.footprint
                queue += [x for x in self.exposed(c) if x.key not in self.tried]
                queue += self.reinlined(c)
        return touched, lost, queue


def _landing_units(sites: Sequence[Site], final: dict[str, frozenset[str]]) -> list[tuple[frozenset[str], list[Site]]]:
    """``sites`` grouped by the functions their code ends up in (``final``,
    :func:`final_functions`), groups that share a function merged: each
    unit's change is read from its functions alone."""
    units: list[tuple[set[str], list[Site]]] = []
    for x in sites:
        fns = set(final.get(x.caller, frozenset({x.caller}))) or {x.caller}
        joined = [u for u in units if u[0] & fns]
        for u in joined:
            units.remove(u)
            fns |= u[0]
        units.append((fns, [y for u in joined for y in u[1]] + [x]))
    return [(frozenset(f), xs) for f, xs in units]


#: The assembler pads .eh_frame's last FDE to a multiple of 8 bytes: a flip
#: that changes the parity of the FDEs' total moves these 4 bytes, whichever
#: flip of a batch did it (objsizes counts them in ``other``).
EH_FRAME_PADDING = 4


def _only_padding_moved(base, now, explained: dict[str, int] | None = None) -> bool:
    """True when the bytes no function owns are the same but for
    .eh_frame's last-FDE padding (flips' own changes are exact; the padding
    follows their total, so it is nobody's) and the bytes ``explained``
    (section -> bytes of pieces traced to a flip, :func:`_pieces_moved`)."""
    explained = explained or {}
    if not explained and now.other == base.other:
        return True
    keys = set(base.other_sections) | set(now.other_sections)
    moved = {k: d for k in keys
             if (d := now.other_sections.get(k, 0) - base.other_sections.get(k, 0) - explained.get(k, 0))}
    if not moved:
        return bool(explained)
    return set(moved) == {".eh_frame"} and abs(moved[".eh_frame"]) <= EH_FRAME_PADDING


class _Batch:
    """Flips packed into one compile, and what they change and copy.

    A flip measured in a copy (a *world*) changes only its copy, so any
    number of them may share a function (:data:`MAX_WORLDS` in all); but
    the copies must start from the reference: no ordinary flip of the batch
    may change their function or what they copy, and none may delete or
    bring back a callee (the copies keep their own calls of it)."""

    def __init__(self):
        self.flips: list[Candidate] = []
        self.writes: set[str] = set()
        self.reads: set[str] = set()
        self.inlining: dict[str, int] = {}  # callee -> calls the batch inlines
        self.roots: set[str] = set()  # the functions flips are measured in copies of
        self.back: set[str] = set()  # the callees flips measured in copies bring back
        self.worlds = 0
        self.closed = False  # holds a flip measured alone (:attr:`BatchedSearch.interacting`)

    def admits(self, c: Candidate, search: "BatchedSearch", root: World | None = None, back: str | None = None
               ) -> bool:
        """``root``: the function ``c`` would be measured in a copy of;
        ``back``: the callee it brings back there (see :meth:`BatchedSearch.brought_back`)."""
        if root is not None:
            # (an unverified root is fine: its copies' gains are read against a control in the same
            # compile, and the original is checked against the derived reference like any other function)
            return (not set(roots_of(root)) & self.writes and not c.reads & self.writes
                    and back not in self.writes | self.reads and self.worlds + len(roots_of(root)) <= MAX_WORLDS
                    and all(_plain(x) for x in self.flips if x.world is None))
        if (c.footprint & (self.writes | self.reads | search.unverified | self.roots | self.back)
                or c.reads & self.writes):
            return False
        if self.roots and not _plain(c):
            return False
        if not self.flips:  # alone, a flip's change is the object's
            return True
        for s in (c.sites if c.inline else ()):
            if s.callee not in c.footprint and self.inlining.get(s.callee, 0) + 1 >= search._left_out(s.callee):
                return False
        return True

    def add(self, c: Candidate, root: World | None = None, back: str | None = None) -> None:
        self.flips.append(c)
        self.reads |= c.reads
        if root is not None:
            c.world = root
            self.roots |= set(roots_of(root))
            if back is not None:
                self.back.add(back)
            self.worlds += len(roots_of(root))  # (a copy per root)
            return
        self.writes |= c.footprint
        if c.inline:
            for s in c.sites:
                self.inlining[s.callee] = self.inlining.get(s.callee, 0) + 1


def _released(batch: Iterable[Candidate]) -> frozenset[str]:
    """The functions a batch's answered flips leave to the compiler's heuristic."""
    return frozenset().union(*(c.release for c in batch))


def _plain(c: Candidate) -> bool:
    """The flip changes only where its callers' code lies (it deletes or
    brings back no callee)."""
    return not any(s.callee in c.footprint for s in c.sites)


def _copied_chain(s: Site, names: set[str]) -> tuple[bool, list[bool]]:
    """Which of ``s``'s chain lies in renamed (copied) bodies, outermost in:
    the caller's own body is copied when it is of the tree (debug
    ``names``), and an inlined body when it is of the tree and the call
    that brought it lay in a copied body.  Returns (the call itself lies in
    a copied body, per chain entry)."""
    renamed = [False] * len(s.chain)
    inside = True
    for i in range(len(s.chain) - 1, -1, -1):
        inside = inside and s.chain[i][0] in names
        renamed[i] = inside
    return (renamed[0] if renamed else False), renamed


_WORLD = re.compile(r"\.mlgo(\d+)(?=[:\s;]|$)")


def _split_worlds(keys: Iterable[str]) -> tuple[set[str], dict[int, set[str]]]:
    """The compiler's inlined keys: those of the originals, and per world its
    keys named as the originals."""
    plain: set[str] = set()
    by_world: dict[int, set[str]] = {}
    for key in keys:
        m = _WORLD.search(key)
        if m is None:
            plain.add(key)
        else:
            by_world.setdefault(int(m.group(1)), set()).add(_WORLD.sub("", key))
    return plain, by_world


def _outermost(key: str) -> str:
    """The function whose body holds a key's call now (its chain's last entry)."""
    return site_of_key(key).caller


def _own_size(sizes: ObjectSizes, fn: str) -> int:
    """``fn``'s bytes wherever it lies: its number without trailing padding."""
    return sizes.unpadded(fn)


def _disjoint_best(won: list[Outcome]) -> tuple[list[Outcome], list[Outcome]]:
    """Winners to apply together (best first, footprints disjoint; winners
    measured in copies of one function share it) and the rest, to measure
    again from the new reference."""
    keep: list[Outcome] = []
    later: list[Outcome] = []
    taken: set[str] = set()
    for o in sorted(won, key=lambda o: o.delta):
        if o.candidate.footprint & taken:
            later.append(o)
        else:
            keep.append(o)
            taken |= o.candidate.footprint
    return keep, later


#: failures a compiled reference may read (:func:`_made_or_dropped`, :func:`_pieces_moved`), a derived one not
_TRACED = ("bytes no function owns moved", "a function outside every footprint changed")


def _made_or_dropped(outside: dict[str, int], base: ObjectSizes, now: ObjectSizes,
                     owner: dict[str, Candidate]) -> dict[str, Candidate] | None:
    """The flip that made or dropped each function that changed outside
    every footprint (None when one cannot be told): a function that
    appeared (or went) whose every referrer in the object that has it lies
    in one flip's footprint, or is such a function itself (a template
    instance a new call brought, and what it calls)."""
    if any(f in base.functions and f in now.functions for f in outside):
        return None  # (a function that changed size: the compiler's interprocedural work, nobody's)
    made: dict[str, Candidate] = {}
    grew = True
    while grew and len(made) < len(outside):
        grew = False
        for f in outside:
            if f in made:
                continue
            refs = (now.referrers if f in now.functions else base.referrers).get(f)
            who = {owner.get(g) or made.get(g) for g in refs or ()}
            if len(who) == 1 and None not in who:
                made[f] = who.pop()
                grew = True
    return made if len(made) == len(outside) else None


def _pieces_moved(base: ObjectSizes, now: ObjectSizes, owner: dict[str, Candidate]
                  ) -> list[tuple[tuple[str, int], Candidate]] | None:
    """The pieces of ``other`` (strings, constants) that appeared or went,
    each with the flip whose functions alone refer to it, and ``other``
    moved by nothing else but .eh_frame's padding (else None)."""
    out = []
    explained: dict[str, int] = {}
    for key in set(base.shared) | set(now.shared):
        n0, refs0 = base.shared.get(key, (0, frozenset()))
        n1, refs1 = now.shared.get(key, (0, frozenset()))
        if n0 == n1:
            continue
        who = {owner.get(g) for g in refs0 | refs1}
        if len(who) != 1 or None in who:
            return None
        out.append(((key[0], n1 - n0), who.pop()))
        explained[key[0]] = explained.get(key[0], 0) + n1 - n0
    return out if _only_padding_moved(base, now, explained) else None


def _bodies_brought(brought: set[str], copies: set[str], base: ObjectSizes, now: ObjectSizes,
                    theirs: frozenset[str] = frozenset()) -> dict[str, frozenset[str]] | None:
    """Every function of ``now`` that came back with the bodies ``brought``
    back (the copies' callees), with the bodies it came with: each body
    itself, and a function ``base`` does not have that only such functions
    refer to (a callee inlined only where the body was inlined before).
    None when another function appeared besides the copies, outside
    ``theirs`` (the footprints of the flips measured in place: what appears
    there, and all that appeared when nothing was brought back, is left to
    the originals' reading)."""
    owners = {f: frozenset({f}) for f in brought if f in now.functions}
    if not brought:
        return owners
    appeared = {f for f in now.functions
                if f not in base.functions and f not in copies and f not in brought and f not in theirs}
    if appeared and now.referrers is None:
        return None
    grew = True
    while grew:
        grew = False
        for f in appeared - owners.keys():
            refs = now.referrers.get(f) or ()
            if refs and all(g in owners for g in refs):
                owners[f] = frozenset().union(*(owners[g] for g in refs))
                grew = True
    return owners if appeared <= owners.keys() else None


def _pieces_of(owners: dict[str, frozenset[str]], base: ObjectSizes, now: ObjectSizes
               ) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """The pieces of ``other`` (strings, constants) that came with the
    bodies brought back: per body, {section: bytes} of each piece new since
    ``base`` that only functions that came back with it refer to, and all of
    them once per section (none when either object was not read piece by
    piece)."""
    out: dict[str, dict[str, int]] = {}
    came: dict[str, int] = {}
    if not owners or base.shared is None or now.shared is None:
        return out, came
    for key, (n, refs) in now.shared.items():
        grew = n - base.shared.get(key, (0, frozenset()))[0]
        if grew > 0 and refs and all(g in owners for g in refs):
            came[key[0]] = came.get(key[0], 0) + grew
            for body in frozenset().union(*(owners[g] for g in refs)):
                mine = out.setdefault(body, {})
                mine[key[0]] = mine.get(key[0], 0) + grew
    return out, came


def _adds_or_removes(c: Candidate, base: ObjectSizes, now: ObjectSizes) -> bool:
    """Did a function of the flip's footprint appear or disappear?"""
    return any((f in base.functions) != (f in now.functions) for f in c.footprint)


def _applied(c: Candidate, m: Measured) -> bool:
    """Did the compiler do what the flip asked?"""
    return all((s.key in m.inlined) == c.inline for s in c.sites)


def _is_under_any(key: str, sites: Sequence[Site]) -> bool:
    return any(key.endswith(" @ " + s.callsite) for s in sites)


def search_module_batched(module: Module, policy, cfg: dict, *, budget: int, default_size: int,
                          model: FlipGainModel | None = None, deadline: float | None = None,
                          max_batch: int = MAX_BATCH, resume: dict | None = None, prior=None) -> dict:
    """Probe ``module`` with ``policy`` (the compiler's default for tune),
    then search by batches until ``budget`` compiles in all (the probe
    counts two: its channel compile and the plain compile naming
    always-inline sites; one for a module without decisions).  ``resume``: an
    earlier result of this module to go on from (its probe, best set and
    tries; its compiles count).  ``prior``: a trained policy's P(inline)
    over feature records, to order the flips (:func:`flip_scores`).
    ``deadline`` bounds the probe as well as the search: a probe it cuts
    gives status ``skipped`` (nothing is stored; a later run probes again).
    Returns the result ``tune`` stores (see :func:`result_of`)."""
    t0 = time.monotonic()
    original = module
    flags = list(resume.get("base_flags") or ()) if resume is not None else []
    thresholds = resume.get("thresholds") if resume is not None else None
    module = with_flags(module, flags)
    if resume is not None:
        probe = resume["probe"]
    else:
        # the user's deadline bounds the probe too: one cut by it is no failure, the module waits for a later run
        try:
            probe = _probe_within(module, policy, cfg, deadline)
        except MlgoHostError as e:
            if deadline is not None and time.time() >= deadline:
                return {"name": module.name, "status": "skipped", "compiles": 0}
            return {"name": module.name, "module_key": module.key, "status": "failed", "reason": str(e),
                    "default_size": default_size, "compiles": 2, "search": "batched"}
    spent = resume["compiles"] if resume is not None else None
    due = _starts_due(resume, cfg, budget, deadline)
    if cfg.get("starts_only") and not due and resume is not None:  # (nothing to measure: it stays as it was)
        return resume
    policy_start = resume.get("policy_start") if resume is not None else None
    start_kind = (resume.get("start") or "base") if resume is not None else "base"
    if due:
        thresholds, policy_start, start, cost = _best_start(original, policy, resume, default_size, cfg, deadline)
        spent += cost
        if start is not None:  # the search starts over from that start's decisions
            module, flags, probe, start_kind = start
            resume = None
    if cfg.get("starts_only"):  # (tune's starts stage: the result is a probe's, the next search goes on from it)
        resume, budget = None, spent if spent is not None else probe.compiles
    s = search_of(module, probe, cfg, budget=budget, spent=spent,
                  model=model, deadline=deadline, max_batch=max_batch, prior=prior, worlds=cfg.get("copies", True))
    s.default_slot = cfg.get("default_slot")
    if resume is not None:
        s.resume_from(resume)
    try:
        if probe.episode.n and (resume is not None or budget > s.ev.compiles):  # else: a probe only
            s.run()
    except MlgoHostError as e:
        log.warning("%s: batched search stopped: %s", module.name, e)
        try:
            s.finish()
        except MlgoHostError:
            s.base = s.start  # the last size known for sure
    res = result_of(s, default_size, time.monotonic() - t0)
    # (the flags are part of how the module is compiled, not of which module it is: a T keeps the corpus's key)
    res.update(module_key=original.key, base_flags=flags, thresholds=thresholds, policy_start=policy_start,
               start=start_kind)
    if flags and res["status"] == "ok" and (s.base is None or s.provisional) and probe.plain is not None \
            and probe.plain.text < default_size:
        # the best is the threshold's own object, never compiled as a replay: a build gets the threshold
        # alone, which compiles that very object (no replay file)
        res.update(best_size=int(probe.plain.text), inline=None, scope=None)
    return res


def _starts_due(resume: dict | None, cfg: dict, budget: int, deadline: float | None) -> bool:
    """Measure the threshold starts (:mod:`.starts`) now?  Once per module,
    after its probe and before any flip (:func:`starts_pending`), when its
    compiles cover the thresholds and a second probe (its channel compile:
    its plain one is the threshold's)."""
    cost = start_cost(cfg.get("thresholds") or (), cfg.get("start_policy") is not None)
    return bool(cost) and resume is not None and starts_pending(resume) and budget - resume["compiles"] >= cost \
        and (deadline is None or time.time() < deadline)


def _best_start(module: Module, policy, resume: dict, default_size: int, cfg: dict, deadline: float | None
                ) -> tuple[dict[int, int | None], int | None, tuple[Module, list[str], Probe, str] | None, int]:
    """Measure the module's other starts and pick the smallest: the sizes
    at each threshold of ``cfg["thresholds"]`` (one plain compile each) and
    the size with ``cfg["start_policy"]``'s decisions (a probe with that
    policy: its channel compile and a plain one).  When one is smaller than
    -Oz's object, the search starts over from it: returns the module with
    its flags, the flags and its probe (a threshold's: a second probe with
    ``policy``, the compiler's default, at that threshold); None keeps
    -Oz's start (the tuple ends with the start's name: "policy" or
    "threshold T").  Returns the threshold sizes, the start policy's size (None:
    no start policy, or its probe failed), that start and the compiles spent.
    The user's ``deadline`` bounds every compile."""
    plains: dict = {}
    sizes = measure_thresholds(module, cfg["thresholds"], clang=cfg["clang"], timeout=cfg.get("module_timeout", 300.0),
                               deadline=deadline, plains=plains) if cfg.get("thresholds") else {}
    cost = len(sizes)
    oz = min(default_size, int(resume["probe"].text))
    by_policy = None
    if cfg.get("start_policy") is not None:
        try:
            by_policy = _probe_within(module, cfg["start_policy"], cfg, deadline)
            cost += by_policy.compiles
        except MlgoHostError as e:
            log.warning("%s: the probe with the start policy failed (%s): it is not a start", module.name, e)
            cost += 2
    t = best_start(sizes, oz)
    if by_policy is not None and by_policy.episode.n and by_policy.text < min([oz] + ([sizes[t]] if t else [])):
        return sizes, int(by_policy.text), (module, [], by_policy, "policy"), cost
    policy_size = int(by_policy.text) if by_policy is not None else None
    if t is None:
        return sizes, policy_size, None, cost
    flags = threshold_flags(t)
    flagged = with_flags(module, flags)
    try:
        # (its plain compile is the threshold's, made above: the probe costs its channel compile only)
        probe = _probe_within(flagged, policy, cfg, deadline, plain=plains.get(t))
    except MlgoHostError as e:
        log.warning("%s: the probe at inline threshold %d failed (%s): the search starts from -Oz", module.name, t, e)
        return sizes, policy_size, None, cost
    return sizes, policy_size, (flagged, flags, probe, f"threshold {t}"), cost + probe.compiles


def start_cost(thresholds: Sequence[int], policy: bool) -> int:
    """The compiles a module's other starts take at most: one per threshold
    and a second probe's channel compile (:mod:`.starts`), and a probe with
    the start policy (its channel compile and a plain one)."""
    return (len(thresholds) + REPROBE if thresholds else 0) + (2 if policy else 0)


def _probe_within(module: Module, policy, cfg: dict, deadline: float | None, plain=None) -> Probe:
    """:func:`probe_module` with the module's timeout cut at the user's
    ``deadline`` (an error, no compile, once it has passed)."""
    timeout = within_deadline(cfg.get("module_timeout", 300.0), deadline)
    if timeout <= 0:
        raise MlgoHostError("the deadline passed before the probe")
    return probe_module(module, policy, clang=cfg["clang"], llvm_size=cfg.get("llvm_size"), timeout=timeout,
                        plain=plain)


def search_of(module: Module, probe: Probe, cfg: dict, *, budget: int, spent: int | None = None,
              **kw) -> BatchedSearch:
    """A search of ``module`` from ``probe``: its replay evaluator (every
    function with a decision in scope) with the compiles already ``spent``
    counted (default: the probe's own)."""
    ev = ReplayEvaluator(module, {d.site.caller for d in probe.decisions}, clang=cfg["clang"],
                         timeout=cfg.get("module_timeout", 300.0))
    ev.compiles = probe.compiles if spent is None else spent
    return BatchedSearch(module, probe, ev, budget=budget, **kw)


def result_of(s: BatchedSearch, default_size: int, wall_s: float) -> dict:
    """A batched search as ``tune`` keeps it: sizes, compiles, every flip
    measured (key, the probe decision's features when it has one, the
    action it took, bytes), and the best decision set (replay lines and
    scope)."""
    ep = s.probe.episode
    nb = ep.header.observation_nbytes
    flips = list(s.earlier)
    for o in s.outcomes:
        c = o.candidate
        raw = ep.raw[c.index * nb:(c.index + 1) * nb] if c.index is not None else b""
        flips.append({"key": c.key, "index": c.index, "raw": raw, "from": 0 if c.inline else 1,
                      "delta": int(o.delta), "applied": o.applied, "kind": c.kind,
                      # (applied by the search and still in the best set: a flip undone later is not)
                      "accepted": o.accepted and s._in_set(c)})
    best = s.base.text if s.base is not None else None
    replay_matches = s.start_text == s.probe.text
    use_replay = best is not None and best < default_size
    return {
        "name": s.module.name, "module_key": s.module.key, "status": "ok", "reason": "", "search": "batched",
        "default_size": int(default_size), "policy_size": int(s.probe.text), "start_size": int(s.probe.text),
        "replay_start_size": s.start_text, "replay_matches": replay_matches,
        "best_size": int(best) if use_replay else int(default_size),
        "compiles": s.ev.compiles, "batches": s.batches, "splits": dict(s.splits), "flips_measured": s.flips_measured,
        "flips_in_copies": s.world_flips, "flips": flips,
        "pending": [{"keys": [x.key for x in c.sites], "lines": [x.replay_line() for x in c.sites],
                     "inline": c.inline, "kind": c.kind, "index": c.index, "release": sorted(c.release)}
                    for c in s.pending],
        "grouped": s.grouped, "wins": s.wins, "sweep_mark": s.sweep_mark,
        "interacting": sorted([k, inline] for k, inline in s.interacting),
        "broken_keys": len(s.broken), "broken": sorted(s.broken), "decisions": ep.n, "wall_s": wall_s,
        "tried": sorted(s.tried), "promise": s.promise(),
        "stopped": s.stopped if s.base is not None else ("budget" if ep.n else "exhausted"),
        "reference": s.base if s.base is not None and s.compiled and not s.provisional else None,
        "inline": sorted(x.replay_line() for x in s.inline.values()) if use_replay else None,
        "scope": sorted({d.site.caller for d in s.probe.decisions}) if use_replay else None,
        "inline_all": {k: x.replay_line() for k, x in s.inline.items()}, "probe": s.probe,
        # the imitation target: the best set's action at each decision of the probe's trajectory
        # (its features are the probe's: a decision's context changes little with flips elsewhere)
        "header": ep.header.to_json(), "raw": ep.raw, "probe_actions": ep.actions,
        "actions": np.array([1 if d.site.key in s.inline else 0 for d in s.probe.decisions], dtype=np.int64),
        "default_slot": s.default_slot,
    }
