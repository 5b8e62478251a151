"""Build the flip-effect table (issue 17) on the training and validation
splits of the training corpus and report its size and cost
(``bench/results/effects.json``).

Resumable: every module's entry is cached under ``--root``; a second run
measures only the modules that have none.  ``--minutes`` stops dispatching
(the modules under way finish) so a budget is kept; run again to go on.

usage: .venv/bin/python bench/effects.py --corpus pretrain_out/training_corpus [--root effects_out] [--cap 100]
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
from mlgo_host.search.effects import MAX_DECISIONS, build_table, table_modules, table_report  # noqa: E402
from mlgo_host.workers.pool import make_pool  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--root", default="effects_out")
    ap.add_argument("--cap", type=int, default=MAX_DECISIONS, help="decisions measured per module at most")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--splits", default="train,validation", help="which splits to measure (never heldout)")
    ap.add_argument("--smallest-first", action="store_true",
                    help="for a run cut by time: the most decisions per minute first")
    ap.add_argument("--report-only", action="store_true", help="measure nothing: report the table as it is")
    ap.add_argument("--output", default=os.path.join(HERE, "results", "effects.json"))
    args = ap.parse_args()
    t0 = time.monotonic()
    corpus = load_corpus(args.corpus)
    mods = [(m, sp) for m, sp in table_modules(corpus.modules, 0.2, 0.2, args.seed) if sp in args.splits.split(",")]
    root = os.path.abspath(args.root)
    cfg = {"clang": "clang-19", "module_timeout": 300.0}
    done = []
    pool = None if args.report_only else make_pool("local", args.workers, "mlgo_host.search.worker:SearchWorker",
                     {"clang": cfg["clang"], "module_timeout": cfg["module_timeout"]})
    if pool is not None:
        try:
            done = build_table(root, mods, cfg, cap=args.cap, seed=args.seed, corpus=args.corpus, pool=pool,
                               smallest_first=args.smallest_first)
        finally:
            pool.close()
    rep = table_report(root)
    rep.update({"cap": args.cap, "seed": args.seed, "modules_in_splits": len(mods),
                "measured_this_run": len(done), "this_run_minutes": round((time.monotonic() - t0) / 60.0, 2),
                "splits": args.splits,
                "command": "bench/effects.py --cap %d --workers %d --splits %s%s" % (
                    args.cap, args.workers, args.splits, " --smallest-first" if args.smallest_first else "")})
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(rep, f, indent=1, sort_keys=True)
    print(json.dumps(rep, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
