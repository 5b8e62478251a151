"""What lies past `tune`'s optima: the neighbourhoods of each module's best set measured.

From a tune output (for `bench/tune.py`'s runs: <work>/T1, the run with as
many compiles as the greedy pass), per module with at least
--min-decisions decisions: every combination of the sites of each function
with at most --max-sites of them, and every pair of the --pairs-of flips
nearest to paying in each bigger function, measured by batches of functions
whose footprints are disjoint; the paying ones applied together and compiled
once.  A diagnostic, not a move: how far a search's optimum is from the best
its neighbourhoods hold, so a target the search misses can be told apart
from a target the modules do not hold.

A *function* here is where code lands
(:func:`~mlgo_host.search.sites.final_functions_of`): a site in a helper
inlined into one hub is the hub's.  Each compile holds one combination of
every function of its round; a function's change is read from its functions
and its sites' callees (the callee may be deleted or brought back), and a
compile in which a function outside the round's footprints changed is not
read (an interaction, counted as unread).  The reported gain is the compile
of the paying combinations together, not the sum of the readings.

Prints a line per module and the total, and writes bench/results/ceiling.json.

usage: .venv/bin/python bench/research/ceiling.py --tune <work>/T1 [--corpus bench_corpus]
       [--greedy-from bench/results/tune.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import sys
import time
from typing import Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, os.path.dirname(BENCH))

from mlgo_host.corpus.corpus import Module, load_corpus  # noqa: E402
from mlgo_host.fsutil import atomic_write_json  # noqa: E402
from mlgo_host.search.driver import search_of  # noqa: E402
from mlgo_host.search.replay import Measured  # noqa: E402
from mlgo_host.search.sites import Site, final_functions_of  # noqa: E402
from mlgo_host.search.starts import with_flags  # noqa: E402
from mlgo_host.search.tunedir import load_tune_results  # noqa: E402
from mlgo_host.workers.pool import make_pool, map_with_progress  # noqa: E402

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


def landing(s) -> dict[str, frozenset[str]]:
    """Where each function's code lands under search ``s``'s current set
    and reference (:func:`~mlgo_host.search.sites.final_functions_of`)."""
    names = {x.caller for x in s.sites.values()} | {x.callee for x in s.sites.values()}
    return final_functions_of(s.inline.values(), names, set(s.base.sizes.functions))


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
    hoods = neighbourhoods(inline, s.sites, landing(s), set(base.sizes.functions), latest, max_sites, pairs_of)
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tune", required=True, help="a tune output directory (its data/ holds each module's best set)")
    ap.add_argument("--corpus", default="bench_corpus", help="the corpus that tune searched")
    ap.add_argument("--min-decisions", type=int, default=27, help="leave out modules with fewer decisions")
    ap.add_argument("--max-sites", type=int, default=MAX_SITES,
                    help="functions with at most this many sites get every combination")
    ap.add_argument("--pairs-of", type=int, default=PAIRS_OF,
                    help="bigger functions: every pair among this many flips nearest to paying")
    ap.add_argument("--greedy-from", metavar="JSON", default=os.path.join(BENCH, "results", "tune.json"),
                    help="a bench/tune.py result: its greedy gain puts the totals in proportion ('' for none)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--clang", default="clang-19")
    ap.add_argument("--out", default=os.path.join(BENCH, "results", "ceiling.json"))
    args = ap.parse_args()
    t0 = time.monotonic()
    by_name = {m.name: m for m in load_corpus(args.corpus).modules}
    tuned = [r for r in load_tune_results(args.tune) if r.get("search") == "batched"]
    results = [r for r in tuned if r["decisions"] >= args.min_decisions and r["name"] in by_name]
    pool = make_pool("local", args.workers, "research_worker:ResearchWorker",
                     {"clang": args.clang, "module_timeout": 300.0})
    try:
        tasks = [(by_name[r["name"]].to_task(), r, args.max_sites, args.pairs_of) for r in results]
        outs = map_with_progress(pool, "ceiling", tasks, desc="neighbourhoods")
    finally:
        pool.close()
    rows = sorted((o.value for o in outs if o.ok), key=lambda r: r["name"])
    failed = [o.error for o in outs if not o.ok]
    gain = sum(r["default_size"] - r["best_size"] for r in rows)
    past = sum(r["gain_past"] for r in rows)
    res = {"tune": os.path.basename(os.path.normpath(args.tune)), "corpus": os.path.basename(os.path.normpath(args.corpus)),
           "min_decisions": args.min_decisions, "max_sites": args.max_sites, "pairs_of": args.pairs_of,
           "modules": len(rows), "failed": failed, "search_gain_bytes": gain, "gain_past_bytes": past,
           "compiles": sum(r["compiles"] for r in rows), "unread_compiles": sum(r["unread_compiles"] for r in rows),
           "functions": {k: sum(r["functions"][k] for r in rows) for k in ("all", "pairs")},
           "states": {k: sum(r["states"][k] for r in rows) for k in ("all", "pairs")},
           "minutes": round((time.monotonic() - t0) / 60.0, 2), "per_module": rows}
    if args.greedy_from and os.path.exists(args.greedy_from):  # (over every module tune searched, as bench/tune.py)
        with open(args.greedy_from) as f:
            greedy = json.load(f)["greedy"]["gain_bytes"]
        whole = sum(max(0, r["default_size"] - r["best_size"]) for r in tuned)
        res.update(greedy_gain_bytes=greedy, tune_gain_bytes=whole, tune_over_greedy=round(whole / max(greedy, 1), 3),
                   with_past_over_greedy=round((whole + past) / max(greedy, 1), 3))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    atomic_write_json(args.out, res)
    for r in rows:
        print(f"{r['name']}: searched {r['default_size'] - r['best_size']} B, past it {r['gain_past']} B "
              f"({r['functions']['all']} functions every combination, {r['functions']['pairs']} pairs; "
              f"{r['compiles']} compiles, {r['unread_compiles']} unread)")
    ratio = f"; tune's {res['tune_gain_bytes']} B on all {len(tuned)} modules are {res['tune_over_greedy']}x the " \
        f"greedy gain, {res['with_past_over_greedy']}x with what lies past" if "greedy_gain_bytes" in res else ""
    print(f"total: searched {gain} B, past the optima {past} B in {res['compiles']} compiles{ratio}")
    for e in failed:
        print(f"failed: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
