"""Which flips a batched search tries, and in what order.

A flip inlines a site the set leaves out, or leaves out one it inlines; its
*footprint* is the functions it may change (where its caller's code ends
up, by the current set's inline tree, and the callee it may delete or
bring back), formed again when winners changed the set since
(:meth:`Candidates.fresh`).  What this module proposes:

* *single* flips of every probe decision, ordered by the prior
  (:func:`~mlgo_host.search.flips.flip_scores`: the measured winner
  patterns, or a fitted flip-gain model, led by a trained policy's
  probability when there is one; :meth:`Candidates.promise` sums what is
  left of it);
* *exposed* sites: the calls a winning ``inline`` flip brought into its
  caller;
* *groups*, once every single flip was measured: every not-inlined site of
  one callee flipped together (:data:`MAX_GROUP` at most; the callee goes
  only once its last call is inlined), and per function and callee its calls
  there inlined together (*caller groups*);
* *outline groups*, the mirror: every inlined call of a callee left out
  together (one body and k calls against k inlined copies), the ones of every
  callee inlined at two or more sites first (:meth:`Candidates.early_outlines`),
  a losing one trimmed to the callers it made smaller
  (:meth:`Candidates.trimmed`), each call of a winning one inlined again alone;
* *answered* flips: a lost flip with the functions that call the function it
  is written in left to the compiler's own heuristic, whose answer becomes
  the set (:meth:`Candidates.answered`);
* *again* (a sweep of every single flip from the current best), *undo* (a
  winner whose compiled set came out larger) and the flips a stored search
  left pending (:meth:`Candidates.stored`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Iterable, Sequence

import numpy as np

from mlgo_host.search.flips import FlipGainModel, flip_scores
from mlgo_host.search.sites import Decision, Site, site_of_line
from mlgo_host.search.state import Candidate, Outcome, SearchState

#: sites of one callee flipped together at most (groups)
MAX_GROUP = 6
#: inlined sites of one callee left out together at most (outline groups)
MAX_OUTLINE = 64


class Candidates:
    """The flips of one module's search (see the module docstring)."""

    def __init__(self, state: SearchState, model: FlipGainModel | None = None, prior=None):
        self.state = state
        self.model = model
        #: a trained policy's P(inline) over feature records (the shipped one), or None: the prior's lead
        self.prior = prior
        #: site key -> the prior's probability that its flip pays (with a prior): where, and how much, to search
        self.flip_p: dict[str, float] = self._flip_probabilities(state.first)

    def _flip_probabilities(self, ds: Sequence[Decision]) -> dict[str, float]:
        if self.prior is None or not ds:
            return {}
        feats = self.state.probe.episode.features()[[d.index for d in ds]]
        p1 = np.asarray(self.prior(feats), dtype=np.float64)
        return {d.site.key: float(1.0 - p if d.inlined else p) for d, p in zip(ds, p1)}

    def promise(self) -> float | None:
        """The flips that may still pay, as the prior expects them: the sum
        of its probabilities over the flips not measured yet (None without
        a prior).  ``tune`` shares its compiles by it."""
        if self.prior is None:
            return None
        st = self.state
        return float(sum(p for k, p in self.flip_p.items() if k not in st.tried and k not in st.broken))

    # -- footprints -------------------------------------------------------------
    def footprint(self, sites: Sequence[Site], final: dict[str, frozenset[str]], inline: bool = True
                  ) -> frozenset[str]:
        """The functions flipping ``sites`` (all to ``inline``) may change:
        where their callers' code ends up, and the callee when the flip may
        delete it (an inlined call of a callee with no other call left out)
        or bring it back (an un-inlined call of a callee that is gone)."""
        fp: set[str] = set()
        flipped = {x.key for x in sites}
        for s in sites:
            fp |= final.get(s.caller, frozenset({s.caller}))
            if inline and self.state.left_out(s.callee, flipped) == 0:
                fp.add(s.callee)
            elif not inline and s.callee not in self.state.base.sizes.functions:
                fp.add(s.callee)
        return frozenset(fp)

    def candidate(self, sites: tuple[Site, ...], inline: bool, final, **kw) -> Candidate:
        """A flip of ``sites`` to ``inline``, its footprint formed against the
        current set (``final``: :meth:`SearchState.final`)."""
        reads = frozenset(s.callee for s in sites) if inline else frozenset()
        return Candidate(sites, inline, self.footprint(sites, final, inline), reads=reads,
                         formed=self.state.version, **kw)

    def fresh(self, c: Candidate) -> Candidate:
        """``c`` with its footprint formed against the current set, when
        winners changed the set since it was formed: a flip retried after a
        winner left a helper out of one of two hubs lands in the other one
        alone now (and may go in a copy of it); one whose caller a winner
        inlined somewhere lands there too (else its attribution fails and
        the batch is split).  An answered flip keeps its own."""
        if c.formed == self.state.version or c.release:
            return c
        return dataclasses.replace(c, footprint=self.footprint(c.sites, self.state.final(), c.inline),
                                   formed=self.state.version)

    # -- single flips -----------------------------------------------------------
    def singles(self) -> list[Candidate]:
        """Every flip of a probe decision with a working key, best prior first."""
        final = self.state.final()
        ds = [d for d in self.state.first if d.site.key not in self.state.broken]
        if not ds:
            return []
        scores = self._scores(ds)
        out = [self.candidate((d.site,), not d.inlined, final, score=float(sc), index=d.index)
               for d, sc in zip(ds, scores)]
        out.sort(key=lambda c: -c.score)
        return out

    def _scores(self, ds: Sequence[Decision]) -> np.ndarray:
        ep = self.state.probe.episode
        feats = ep.features()[[d.index for d in ds]]
        acts = np.array([1 if d.inlined else 0 for d in ds], dtype=np.int64)
        p = np.array([self.flip_p[d.site.key] for d in ds]) if self.prior is not None else None
        return flip_scores(feats, acts, model=self.model, prior_flip_p=p)

    def again(self) -> list[Candidate]:
        """Every probe decision's site flipped again from the current best
        (a sweep: see :meth:`~.scheduling.Scheduler.resweep`)."""
        final = self.state.final()
        return [self.candidate(c.sites, c.sites[0].key not in self.state.inline, final, score=c.score,
                               index=c.index, kind="again") for c in self.singles()]

    def exposed(self, won: Candidate) -> list[Candidate]:
        """The sites a winning ``inline`` flip brought into its caller."""
        if not won.inline or won.index is None:
            return []
        d = self.state.probe.decisions[won.index]
        final = self.state.final()
        out = []
        for s in d.exposed:
            if s.key in self.state.sites or s.key in self.state.broken:
                continue
            self.state.sites[s.key] = s
            out.append(self.candidate((s,), True, final, kind="exposed"))
        return out

    def undos(self, flips: Iterable[Candidate]) -> list[Candidate]:
        """Undoing each of ``flips`` still in the set."""
        final = self.state.final()
        return [self.candidate(c.sites, not c.inline, final, kind="undo") for c in flips if self.state.in_set(c)]

    def stored(self, stored: Iterable[dict]) -> list[Candidate]:
        """The flips an earlier search queued and did not measure (see
        :func:`~.result.result_of`), their footprints from the reference."""
        flips = [(tuple(self.state.sites.get(k) or site_of_line(ln) for k, ln in zip(p["keys"], p["lines"])), p)
                 for p in stored]
        for sites, _ in flips:
            for x in sites:
                self.state.sites.setdefault(x.key, x)  # (an exposed site: not a probe decision)
        final = self.state.final()
        out = []
        for sites, p in flips:
            c = self.candidate(sites, p["inline"], final, kind=p["kind"], index=p.get("index"))
            if p.get("release"):  # an answered flip, formed again: dropped when its functions changed since
                c = self.answered(c, final)
                if c is None:
                    continue
            out.append(c)
        return out

    # -- groups -----------------------------------------------------------------
    def groups(self) -> list[Candidate]:
        """Flips of several sites that may pay only together, formed once
        every single flip was measured: per callee, its not-inlined sites
        whose single flips all lost, inlined together (its deletion may need
        every one); and per callee inlined at every call, all its inlined
        sites left out together (:meth:`outline_groups`)."""
        lost_inline, lost_outline = self._lost_singles()
        final = self.state.final()
        out = self.inline_groups(lost_inline, final) + self.caller_groups(lost_inline, final) \
            + self.outline_groups(lost_outline, final)
        return list({c.key: c for c in out}.values())  # (a callee's calls in one function may be all of them)

    def _lost_singles(self) -> tuple[set[str], set[str]]:
        """The keys of single-site flips the compiler applied and that did
        not pay, in this search and the ones it resumes: (to inline, to
        leave out)."""
        lost: tuple[set[str], set[str]] = (set(), set())
        for f in self.state.earlier:
            if " + " not in f["key"] and f["applied"] and f["delta"] >= 0:
                lost[f["from"]].add(f["key"])
        for o in self.state.outcomes:
            c = o.candidate
            if len(c.sites) == 1 and o.applied and o.delta >= 0:
                lost[0 if c.inline else 1].add(c.key)
        return lost

    def inline_groups(self, lost: set[str], final: dict[str, frozenset[str]]) -> list[Candidate]:
        """Per callee, its not-inlined sites (at most :data:`MAX_GROUP`)
        when each one's own flip lost (keys in ``lost``), inlined together."""
        defined = self.state.base.sizes.functions
        by_callee: dict[str, list[Site]] = {}
        for s in self.state.sites.values():
            if s.caller in defined and s.key not in self.state.inline:
                by_callee.setdefault(s.callee, []).append(s)
        return [self.candidate(tuple(rest), True, final, kind="group")
                for callee, rest in by_callee.items()
                if 2 <= len(rest) <= MAX_GROUP and len(rest) == self.state.left_out(callee)
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
        for s in self.state.sites.values():
            if s.key in lost and s.key not in self.state.inline:
                by.setdefault((final.get(s.caller, frozenset({s.caller})), s.callee), []).append(s)
        return [self.candidate(tuple(sorted(sites, key=lambda x: x.key)), True, final, kind="group")
                for sites in by.values() if 2 <= len(sites) <= MAX_OUTLINE]  # (the outline groups' bound)

    # -- outline groups -----------------------------------------------------------
    def outline_groups(self, lost: set[str], final: dict[str, frozenset[str]]) -> list[Candidate]:
        """Per callee the object no longer has (every call inlined), all its
        inlined sites left out together when each one's own flip lost
        (keys in ``lost``): one body and k calls can be smaller than k
        inlined copies, though no one call pays for bringing the body back
        (what -Oz's per-site cost model cannot see).  ``final``: where each
        function's code ends up (:func:`final_functions`)."""
        defined = self.state.base.sizes.functions
        by_callee: dict[str, list[Site]] = {}
        for s in self.state.inline.values():
            if s.callee not in defined:  # (a site in a function inlined everywhere too: its copies call it then)
                by_callee.setdefault(s.callee, []).append(s)
        return [self.candidate(tuple(sites), False, final, kind="outline")
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
        final = self.state.final()
        by_callee: dict[str, list[Site]] = {}
        for s in self.state.inline.values():
            by_callee.setdefault(s.callee, []).append(s)
        out = [self.candidate(tuple(sorted(sites, key=lambda x: x.key)), False, final, kind="outline")
               for sites in by_callee.values() if 2 <= len(sites) <= MAX_OUTLINE]
        out.sort(key=lambda c: -len(c.sites))
        return [c for c in out if c.key not in self.state.tried]

    def reinlined(self, won: Candidate) -> list[Candidate]:
        """After an outline group pays, each of its calls inlined again
        alone: the body is back either way, so a call whose inlined copy
        folds away (a constant argument) may pay now."""
        if won.kind != "outline":
            return []
        final = self.state.final()
        index = {d.site.key: d.index for d in self.state.first}
        return [self.candidate((s,), True, final, kind="retry", index=index.get(s.key)) for s in won.sites]

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
        final = self.state.final()
        units = _landing_units(c.sites, final)
        if len(units) < 2:
            return None
        now, ref = o.measured.sizes.functions, self.state.base.sizes.functions
        change = [sum(now.get(f, 0) - ref.get(f, 0) for f in fns) for fns, _ in units]
        body = o.delta - sum(change)  # (the callee's body, what it refers to, and anything else the group moved)
        paying = [i for i, d in enumerate(change) if d < 0]
        if not paying or len(paying) == len(units) or body + sum(change[i] for i in paying) >= 0:
            return None
        sites = tuple(sorted((x for i in paying for x in units[i][1]), key=lambda x: x.key))
        t = self.candidate(sites, False, final, kind="outline")
        return None if t.key in self.state.tried else t

    # -- answered flips -------------------------------------------------------------
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
        holders = frozenset(x.caller for x in self.state.sites.values() if x.callee == written_in) - {written_in}
        if not holders or not all(self.state.untouched(h) for h in holders):
            return None
        if final is None:
            final = self.state.final()
        fp = set(c.footprint) | holders
        for x in self.state.sites.values():  # (the heuristic may inline, delete or bring back any of their callees)
            if x.caller in holders:
                fp |= final.get(x.caller, frozenset({x.caller})) | {x.callee}
        return dataclasses.replace(c, footprint=frozenset(fp), release=holders, kind="answered", index=None,
                                   in_copy=None)

    def answered_flips(self) -> list[Candidate]:
        """:meth:`answered` of every single flip the compiler applied that
        did not pay, formed once every single flip was measured (the calls of
        the function they are written in most inlined first: the more
        copies the compiler may stop making)."""
        inlined = Counter(x.callee for x in self.state.inline.values())
        final = self.state.final()
        lost_inline, lost_outline = self._lost_singles()
        out = []
        for key in sorted(lost_inline | lost_outline):
            x = self.state.sites.get(key)
            if x is None or self.state.in_set(Candidate((x,), key in lost_inline, frozenset())):
                continue
            a = self.answered(self.candidate((x,), key in lost_inline, final), final)
            if a is not None and a.key not in self.state.tried:
                out.append(a)
        out.sort(key=lambda c: -inlined[c.sites[0].chain[0][0]])
        return out


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
