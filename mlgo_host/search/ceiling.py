"""What a search's moves leave past its optimum: from a module's best set
(a ``tune`` result), every combination of the sites of each function with
few of them, and every pair of the flips nearest to paying in each bigger
function, measured by batches of functions whose footprints are disjoint.

A diagnostic (``bench/ceiling.py``), not a move: it measures how far a
search's optimum is from the best its neighbourhoods hold, so a target the
search misses can be told apart from a target the modules do not hold.  A
*function* here is where code lands (:func:`~mlgo_host.search.sites.final_functions_of`): a site
in a helper inlined into one hub is the hub's.  Each compile holds one
combination of every function of its round; a function's change is read
from its functions and its sites' callees (the callee may be deleted or
brought back), and a compile in which a function outside the round's
footprints changed is not read (an interaction, counted as unread).  The
paying combinations are applied together and compiled once: the reported
gain is that compile's, not the sum of the readings.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import Sequence

from mlgo_host.corpus.corpus import Module
from mlgo_host.search.batched import search_of
from mlgo_host.search.evaluate import Measured
from mlgo_host.search.sites import Site
from mlgo_host.search.starts import with_flags

#: functions with at most this many sites get every combination (2**6 - 1 compiles at most each)
MAX_SITES = 6
#: in bigger functions, every pair of this many flips nearest to paying (66 pairs)
PAIRS_OF = 12


@dataclasses.dataclass(eq=False)
class Neighbourhood:
    """One function's sites and the states of them to measure (each a
    tuple of inline-or-not, one per site), read from ``footprint``."""

    functions: frozenset[str]
    footprint: frozenset[str]
    sites: tuple[Site, ...]
    states: list[tuple[bool, ...]]
    kind: str  # "all" (every combination) or "pairs"
    best: tuple[int, tuple[bool, ...]] | None = None  # (bytes, state) of the best paying state read


def neighbourhoods(inline: dict[str, Site], sites: dict[str, Site], final: dict[str, frozenset[str]],
                   defined: set[str], latest: dict[str, int], max_sites: int = MAX_SITES,
                   pairs_of: int = PAIRS_OF) -> list[Neighbourhood]:
    """The neighbourhoods of the set ``inline`` (key -> site) among the
    known ``sites``: per function the object ``defined`` (where each
    function's code lands under the set: ``final``), every state of its
    sites that flips two or more of them when it has at most
    ``max_sites``, else every pair of flips among the ``pairs_of`` sites
    whose latest single flip (``latest``: key -> bytes) came nearest to
    paying."""
    by_fn: dict[frozenset[str], list[Site]] = {}
    for s in sites.values():
        fns = final.get(s.caller, frozenset({s.caller}))
        if fns & defined:
            by_fn.setdefault(fns, []).append(s)
    out = []
    for fns, ss in by_fn.items():
        ss = sorted(ss, key=lambda x: x.key)
        if len(ss) <= max_sites:
            kind = "all"
        else:
            kind = "pairs"
            ss = sorted((x for x in ss if x.key in latest), key=lambda x: (latest[x.key], x.key))[:pairs_of]
        if len(ss) < 2:
            continue
        now = tuple(x.key in inline for x in ss)
        if kind == "all":
            states = [st for st in itertools.product((False, True), repeat=len(ss))
                      if sum(a != b for a, b in zip(st, now)) >= 2]
        else:
            states = [tuple(not v if k in (i, j) else v for k, v in enumerate(now))
                      for i, j in itertools.combinations(range(len(ss)), 2)]
        fp = set(fns)
        for x in ss:
            fp |= final.get(x.caller, frozenset({x.caller})) | {x.callee}
        out.append(Neighbourhood(fns, frozenset(fp), tuple(ss), states, kind))
    return out


def rounds_of(hoods: Sequence[Neighbourhood]) -> list[list[Neighbourhood]]:
    """``hoods`` packed into rounds of disjoint footprints, the most states
    first (a round takes as many compiles as its largest member)."""
    rounds: list[list[Neighbourhood]] = []
    for h in sorted(hoods, key=lambda h: -len(h.states)):
        for r in rounds:
            if all(not (h.footprint & o.footprint) for o in r):
                r.append(h)
                break
        else:
            rounds.append([h])
    return rounds


def _with_states(inline: dict[str, Site], states: Sequence[tuple[Neighbourhood, tuple[bool, ...]]]
                 ) -> dict[str, Site]:
    out = dict(inline)
    for h, st in states:
        for s, on in zip(h.sites, st):
            if on:
                out[s.key] = s
            else:
                out.pop(s.key, None)
    return out


def _change(m: Measured, base: Measured, fns) -> int:
    return sum(m.sizes.functions.get(f, 0) - base.sizes.functions.get(f, 0) for f in fns)


def measure_rounds(ev, inline: dict[str, Site], base: Measured, rounds: list[list[Neighbourhood]]) -> int:
    """Measure every state of every round (one compile per state index),
    keeping each neighbourhood's best paying state; returns the compiles
    whose reading was refused (a function outside the round moved)."""
    unread = 0
    for r in rounds:
        for i in range(max(len(h.states) for h in r)):
            live = [h for h in r if i < len(h.states)]
            m = ev.measure(_with_states(inline, [(h, h.states[i]) for h in live]).values())
            owned = set().union(*(h.footprint for h in live))
            outside = (set(m.sizes.functions) | set(base.sizes.functions)) - owned
            if any(m.sizes.functions.get(f, 0) != base.sizes.functions.get(f, 0) for f in outside):
                unread += 1
                continue
            for h in live:
                d = _change(m, base, h.footprint)
                if d < 0 and (h.best is None or d < h.best[0]):
                    h.best = (d, h.states[i])
    return unread


def ceiling_of(module: Module, result: dict, cfg: dict, max_sites: int = MAX_SITES,
               pairs_of: int = PAIRS_OF) -> dict:
    """The neighbourhoods of ``result``'s best set (a batched ``tune``
    result of ``module``) measured, the paying states applied together and
    compiled: how many bytes they add to the search's gain, and what."""
    t0 = time.monotonic()
    mod = with_flags(module, list(result.get("base_flags") or ()))
    s = search_of(mod, result["probe"], cfg, budget=0, spent=0)
    s.resume_from(result)
    if s.provisional:  # (a probe's plain compile stands in for the start: the set itself compiled)
        s.base = s.ev.measure(s.inline.values())
    inline, base = dict(s.inline), s.base  # (a stored reference is the set's own compile)
    latest: dict[str, int] = {}
    for f in result["flips"]:
        if " + " not in f["key"] and f["applied"]:
            latest[f["key"]] = f["delta"]
    hoods = neighbourhoods(inline, s.sites, s._final(), set(base.sizes.functions), latest, max_sites, pairs_of)
    unread = measure_rounds(s.ev, inline, base, rounds_of(hoods))
    paying = [h for h in hoods if h.best is not None]
    after = base
    if paying:
        after = s.ev.measure(_with_states(inline, [(h, h.best[1]) for h in paying]).values())
    return {
        "name": module.name, "default_size": result["default_size"], "best_size": base.text,
        "past_size": min(after.text, base.text), "gain_past": max(0, base.text - after.text),
        "read_gain": sum(h.best[0] for h in paying),
        "functions": {k: sum(1 for h in hoods if h.kind == k) for k in ("all", "pairs")},
        "states": {k: sum(len(h.states) for h in hoods if h.kind == k) for k in ("all", "pairs")},
        "compiles": s.ev.compiles, "unread_compiles": unread,
        "paying": [{"bytes": h.best[0], "flips": [[x.key, on] for x, on in zip(h.sites, h.best[1])
                                                   if on != (x.key in inline)]} for h in paying],
        "wall_s": round(time.monotonic() - t0, 1),
    }
