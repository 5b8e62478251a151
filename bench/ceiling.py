"""What lies past `tune`'s optima: the neighbourhoods of each module's best set measured.

From a tune output (for `bench/tune.py`'s runs: <work>/T1, the run with as
many compiles as the greedy pass), per module with at least
--min-decisions decisions: every combination of the sites of each function
with at most --max-sites of them, and every pair of the --pairs-of flips
nearest to paying in each bigger function (mlgo_host.search.ceiling), the
paying ones applied together and compiled once.  A diagnostic that reports:
how many bytes the search's moves leave where it stopped, against what a
target asks for.

Prints a line per module and the total, and writes bench/results/ceiling.json.

usage: .venv/bin/python bench/ceiling.py --tune <work>/T1 [--corpus bench_corpus] [--greedy-from bench/results/tune.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from mlgo_host.corpus.corpus import load_corpus  # noqa: E402
from mlgo_host.fsutil import atomic_write_json  # noqa: E402
from mlgo_host.search.ceiling import MAX_SITES, PAIRS_OF  # noqa: E402
from mlgo_host.search.tune import load_tune_results  # noqa: E402
from mlgo_host.workers.pool import make_pool, map_with_progress  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tune", required=True, help="a tune output directory (its data/ holds each module's best set)")
    ap.add_argument("--corpus", default="bench_corpus", help="the corpus that tune searched")
    ap.add_argument("--min-decisions", type=int, default=27, help="leave out modules with fewer decisions")
    ap.add_argument("--max-sites", type=int, default=MAX_SITES,
                    help="functions with at most this many sites get every combination")
    ap.add_argument("--pairs-of", type=int, default=PAIRS_OF,
                    help="bigger functions: every pair among this many flips nearest to paying")
    ap.add_argument("--greedy-from", metavar="JSON", default=os.path.join(HERE, "results", "tune.json"),
                    help="a bench/tune.py result: its greedy gain puts the totals in proportion ('' for none)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--clang", default="clang-19")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "ceiling.json"))
    args = ap.parse_args()
    t0 = time.monotonic()
    by_name = {m.name: m for m in load_corpus(args.corpus).modules}
    tuned = [r for r in load_tune_results(args.tune) if r.get("search") == "batched"]
    results = [r for r in tuned if r["decisions"] >= args.min_decisions and r["name"] in by_name]
    pool = make_pool("local", args.workers, "mlgo_host.search.worker:SearchWorker",
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
