"""Which flips a batched search tries, in what order, and each one's *footprint* (the functions it may change)."""

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
    def __init__(self, state: SearchState, model: FlipGainModel | None = None, prior=None):
        self.state = state
        self.model = model
        #: a trained policy's P(inline) over feature records, or None
        self.prior = prior
        #: site key -> the prior's probability that its flip pays
        self.flip_p: dict[str, float] = {}
        if prior is not None and state.first:
            feats = state.probe.episode.features()[[d.index for d in state.first]]
            p1 = np.asarray(prior(feats), dtype=np.float64)
            self.flip_p = {d.site.key: float(1.0 - p if d.inlined else p) for d, p in zip(state.first, p1)}

    def promise(self) -> float | None:
        """The prior's expected winners not measured yet (``tune`` shares its compiles by it)."""
        if self.prior is None:
            return None
        st = self.state
        return float(sum(p for k, p in self.flip_p.items() if k not in st.tried and k not in st.broken))

    def footprint(self, sites: Sequence[Site], final: dict[str, frozenset[str]], inline: bool = True
                  ) -> frozenset[str]:
        """Where the callers' code ends up, and the callee when the flip may delete it or bring it back."""
        fp: set[str] = set()
        flipped = {x.key for x in sites}
        namesakes = self.state.probe.namesakes or {}
        for s in sites:
            for f in namesakes.get(s.caller, (s.caller,)):  # (a key decides in each function of its debug name)
                fp |= final.get(f, frozenset({f}))
            if inline and self.state.left_out(s.callee, flipped) == 0:
                fp.add(s.callee)
            elif not inline and s.callee not in self.state.base.sizes.functions:
                fp.add(s.callee)
        return frozenset(fp)

    def candidate(self, sites: tuple[Site, ...], inline: bool, final, **kw) -> Candidate:
        """A flip, its footprint formed against the current set (``final``: :meth:`SearchState.final`)."""
        return Candidate(sites, inline, self.footprint(sites, final, inline), formed=self.state.version,
                         reads=frozenset(s.callee for s in sites) if inline else frozenset(), **kw)

    def fresh(self, c: Candidate) -> Candidate:
        """``c`` with its footprint formed again if winners changed the set since (not an answered flip)."""
        if c.formed == self.state.version or c.release:
            return c
        return dataclasses.replace(c, footprint=self.footprint(c.sites, self.state.final(), c.inline),
                                   formed=self.state.version)

    def singles(self) -> list[Candidate]:
        """Every flip of a probe decision with a working key, best prior first."""
        final = self.state.final()
        ds = [d for d in self.state.first if d.site.key not in self.state.broken]
        if not ds:
            return []
        return sorted((self.candidate((d.site,), not d.inlined, final, score=float(sc), index=d.index)
                       for d, sc in zip(ds, self._scores(ds))), key=lambda c: -c.score)

    def _scores(self, ds: Sequence[Decision]) -> np.ndarray:
        feats = self.state.probe.episode.features()[[d.index for d in ds]]
        acts = np.array([1 if d.inlined else 0 for d in ds], dtype=np.int64)
        p = np.array([self.flip_p[d.site.key] for d in ds]) if self.prior is not None else None
        return flip_scores(feats, acts, model=self.model, prior_flip_p=p)

    def again(self) -> list[Candidate]:
        """A sweep: every probe decision flipped again from the current best."""
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
        """The flips an earlier search queued and did not measure (:func:`~.driver.result_of`)."""
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
            if c is not None:
                out.append(c)
        return out

    def groups(self) -> list[Candidate]:
        """Flips of several sites that may pay only together (once every single flip was measured)."""
        lost_inline, lost_outline = self._lost_singles()
        final = self.state.final()
        out = self.inline_groups(lost_inline, final) + self.caller_groups(lost_inline, final) \
            + self.outline_groups(lost_outline, final)
        return list({c.key: c for c in out}.values())  # (a callee's calls in one function may be all of them)

    def _lost_singles(self) -> tuple[set[str], set[str]]:
        """Keys of applied single-site flips that did not pay: (to inline, to leave out)."""
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
        """Per callee, its left-out sites whose flips all lost, inlined together (deleting it may need all)."""
        return [self.candidate(tuple(rest), True, final, kind="group") for rest in self.state.left_out_sites().values()
                if 2 <= len(rest) <= MAX_GROUP and all(s.key in lost for s in rest)]

    def caller_groups(self, lost: set[str], final: dict[str, frozenset[str]]) -> list[Candidate]:
        """Per function where code lands and per callee, its lost left-out calls there inlined
        together: they may pay together in one function where the whole group pays for copies elsewhere."""
        by: dict[tuple[frozenset[str], str], list[Site]] = {}
        for s in self.state.sites.values():
            if s.key in lost and s.key not in self.state.inline:
                by.setdefault((final.get(s.caller, frozenset({s.caller})), s.callee), []).append(s)
        return [self.candidate(tuple(sorted(sites, key=lambda x: x.key)), True, final, kind="group")
                for sites in by.values() if 2 <= len(sites) <= MAX_OUTLINE]  # (the outline groups' bound)

    def outline_groups(self, lost: set[str], final: dict[str, frozenset[str]]) -> list[Candidate]:
        """Per callee the object no longer has, its inlined sites whose flips all lost, left out together:
        one body and k calls can be smaller than k inlined copies, though no one call pays for the body."""
        defined = self.state.base.sizes.functions
        by_callee: dict[str, list[Site]] = {}
        for s in self.state.inline.values():
            if s.callee not in defined:  # (a site in a function inlined everywhere too: its copies call it then)
                by_callee.setdefault(s.callee, []).append(s)
        return [self.candidate(tuple(sites), False, final, kind="outline")
                for callee, sites in by_callee.items()
                if 2 <= len(sites) <= MAX_OUTLINE and all(s.key in lost for s in sites)]

    def early_outlines(self) -> list[Candidate]:
        """Per callee inlined at two or more sites, all of them left out together, measured first (most
        sites first); unlike :meth:`outline_groups`, whatever the single flips did."""
        final = self.state.final()
        by_callee: dict[str, list[Site]] = {}
        for s in self.state.inline.values():
            by_callee.setdefault(s.callee, []).append(s)
        out = [self.candidate(tuple(sorted(sites, key=lambda x: x.key)), False, final, kind="outline")
               for sites in by_callee.values() if 2 <= len(sites) <= MAX_OUTLINE]
        return sorted((c for c in out if c.key not in self.state.tried), key=lambda c: -len(c.sites))

    def reinlined(self, won: Candidate) -> list[Candidate]:
        """After an outline group pays, each of its calls inlined again alone (its copy may fold away)."""
        if won.kind != "outline":
            return []
        final = self.state.final()
        index = {d.site.key: d.index for d in self.state.first}
        return [self.candidate((s,), True, final, kind="retry", index=index.get(s.key)) for s in won.sites]

    def trimmed(self, o: Outcome) -> Candidate | None:
        """A losing outline group without the calls whose functions it made larger (read off its
        compile), or None when no strict subset is predicted to pay."""
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

    def answered(self, c: Candidate, final: dict[str, frozenset[str]] | None = None) -> Candidate | None:
        """Flip ``c`` (one site) with the functions that call the function its call is written in
        left to the compiler's heuristic, whose decisions there are its answer to the flip.  None
        unless those functions are as the start has them (else it would undo what the search applied)."""
        if len(c.sites) != 1 or c.release:
            return None
        (s,) = c.sites
        written_in = s.chain[0][0]
        if s.caller != written_in:  # (a call in an inlined copy: the function holding it would be left too)
            return None
        holders = frozenset(x.caller for x in self.state.sites.values() if x.callee == written_in) - {written_in}
        if not holders or not all(self.state.untouched(h) for h in holders):
            return None
        final = final if final is not None else self.state.final()
        fp = set(c.footprint) | holders
        for x in self.state.sites.values():  # (the heuristic may inline, delete or bring back any of their callees)
            if x.caller in holders:
                fp |= final.get(x.caller, frozenset({x.caller})) | {x.callee}
        return dataclasses.replace(c, footprint=frozenset(fp), release=holders, kind="answered", index=None,
                                   in_copy=None)

    def answered_flips(self) -> list[Candidate]:
        """:meth:`answered` of every applied single flip that did not pay, most inlined function first."""
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
    """``sites`` grouped by the functions their code ends up in, groups sharing a function merged."""
    units: list[tuple[set[str], list[Site]]] = []
    for x in sites:
        fns = set(final.get(x.caller, frozenset({x.caller}))) or {x.caller}
        joined = [u for u in units if u[0] & fns]
        for u in joined:
            units.remove(u)
            fns |= u[0]
        units.append((fns, [y for u in joined for y in u[1]] + [x]))
    return [(frozenset(f), xs) for f, xs in units]
