"""`mlgo-host tune` against a plain greedy pass, on the same modules in the same run.

Greedy pass: every decision of the module once, in order (flip it, keep the
flip when llvm-size .text shrinks, go on from the new best): the search
that found the figures of issue 11.  Tune: `mlgo-host tune` (prior-ordered
flips, early stop on modules that do not pay, the rest of the budget to the
modules that paid) with ``--share`` of the greedy pass's compiles per module
(measured first, in this run).  Both start from the compiler's default; the
default compile that measures -Oz (cached) is not counted in either.

Corpus: the benchmark corpus's held-out split (Corpus.split(0.2, seed=0)),
modules above --max-bc-kb of bitcode left out (a greedy pass over a module
with a thousand decisions takes a thousand compiles).

Prints and writes bench/results/tune.json: per method total .text vs -Oz,
modules improved, compiles (per module), minutes.

usage: .venv/bin/python bench/tune.py [--corpus /work/bench_corpus] [--jobs 2] [--share 0.5] [--max-bc-kb 100]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from mlgo_host.corpus.corpus import load_corpus
from mlgo_host.fsutil import atomic_write_json
from mlgo_host.workers.pool import make_pool
from mlgo_host.search.flips import run_searches, total_gain_pct
from mlgo_host.search.tune import tune

HERE = os.path.dirname(os.path.abspath(__file__))


def greedy_pass(mods, jobs: int, work: str, clang: str) -> dict:
    """Every decision once, in order, from the default, on every module."""
    t0 = time.monotonic()
    pool = make_pool("local", jobs, "mlgo_host.search.worker:SearchWorker",
                     {"clang": clang, "advisor": "inline", "baseline_cache": os.path.join(work, "baselines")})
    try:
        pool.broadcast("set_policy", {"heuristic": "default"})
        # task, budget, model, start_forced, seed, patience, exclude, from_default, deadline, in_order
        tasks = [(m.to_task(), 10**6, None, None, 0, None, (), True, None, True) for m in mods]
        res = run_searches(pool, tasks, "greedy pass", sys.stderr.isatty())
    finally:
        pool.close()
    rows = [r for r in res.values() if r["status"] == "ok"]
    return _figures(rows, time.monotonic() - t0, len(mods))


def _figures(rows: list[dict], seconds: float, n: int) -> dict:
    d = sum(r["default_size"] for r in rows)
    b = sum(r["best_size"] for r in rows)
    c = sum(r["compiles"] for r in rows)
    return {"modules": n, "searched": len(rows), "default_text": d, "best_text": b, "gain_bytes": d - b,
            "gain_pct": round(-total_gain_pct(rows), 3), "improved": sum(r["best_size"] < r["default_size"] for r in rows),
            "compiles": c, "compiles_per_module": round(c / max(len(rows), 1), 1), "minutes": round(seconds / 60.0, 2),
            "per_module": {r["name"]: {"default": r["default_size"], "best": r["best_size"], "compiles": r["compiles"],
                                       "decisions": len(r["actions"])} for r in rows}}


def tune_run(corpus: str, mods, jobs: int, work: str, per_module: float, clang: str) -> dict:
    out = os.path.join(work, "T")
    t0 = time.monotonic()
    s = tune(corpus, out, compiles_per_module=per_module, jobs=jobs, clang=clang, modules=[m.name for m in mods],
             progress=sys.stderr.isatty())
    with open(os.path.join(out, "tune.json")) as f:
        man = json.load(f)["modules"]
    rows = [dict(m, name=n) for n, m in man.items() if m["status"] == "ok"]
    fig = {"modules": len(mods), "searched": len(rows), "default_text": s["default_text"],
           "best_text": s["best_text"], "gain_bytes": s["gain_bytes"], "gain_pct": round(s["gain_pct"], 3),
           "improved": s["improved"], "compiles": s["compiles"],
           "compiles_per_module": round(s["compiles_per_module"], 1),
           "minutes": round((time.monotonic() - t0) / 60.0, 2), "budget_per_module": round(per_module, 1),
           "per_module": {r["name"]: {"default": r["default_size"], "best": r["best_size"], "compiles": r["compiles"],
                                      "decisions": r["decisions"]} for r in rows}}
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="/work/bench_corpus")
    ap.add_argument("--heldout-fraction", type=float, default=0.2)
    ap.add_argument("--max-bc-kb", type=float, default=100.0, help="leave out modules with more bitcode")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--share", type=float, default=0.5, help="tune's compiles per module / the greedy pass's")
    ap.add_argument("--clang", default="clang-19")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "tune.json"))
    ap.add_argument("--work", default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--greedy-from", metavar="JSON", default=None,
                    help="reuse the greedy pass of an earlier run's JSON (same modules; its compiles and gains are "
                         "deterministic, its minutes are that run's)")
    args = ap.parse_args()
    _, held = load_corpus(args.corpus).split(args.heldout_fraction, seed=0)
    mods = sorted((m for m in held if m.size <= 1024 * args.max_bc_kb), key=lambda m: m.name)
    work = args.work or tempfile.mkdtemp(prefix="bench-tune-")
    os.makedirs(work, exist_ok=True)
    print(f"{len(mods)} of {len(held)} held-out modules (bitcode <= {args.max_bc_kb:g} KB); work dir {work}",
          file=sys.stderr)
    if args.greedy_from:  # the greedy pass is deterministic: its figures from an earlier run of these modules
        with open(args.greedy_from) as f:
            greedy = dict(json.load(f)["greedy"], reused_from=args.greedy_from)
        assert sorted(greedy["per_module"]) == sorted(m.name for m in mods), "not the same modules"
    else:
        greedy = greedy_pass(mods, args.jobs, work, args.clang)
    print(f"greedy pass: {greedy['gain_pct']:.3f}% smaller than -Oz, {greedy['compiles_per_module']} compiles/module, "
          f"{greedy['minutes']:.1f} min", file=sys.stderr)
    per_module = max(2.0, args.share * greedy["compiles"] / max(greedy["searched"], 1))
    tuned = tune_run(args.corpus, mods, args.jobs, work, per_module, args.clang)
    print(f"tune: {tuned['gain_pct']:.3f}% smaller than -Oz, {tuned['compiles_per_module']} compiles/module, "
          f"{tuned['minutes']:.1f} min", file=sys.stderr)
    res = {"corpus": args.corpus, "split": f"held-out {args.heldout_fraction:g} (seed 0)", "jobs": args.jobs,
           "load_average_at_end": os.getloadavg()[0], "greedy": greedy, "tune": tuned,
           "goal_met": tuned["gain_bytes"] >= greedy["gain_bytes"] and tuned["compiles"] <= 0.5 * greedy["compiles"]}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    atomic_write_json(args.out, res)
    for k in ("greedy", "tune"):
        r = res[k]
        print(f"{k:>6}: {r['gain_pct']:6.3f}% smaller than -Oz ({r['gain_bytes']} of {r['default_text']} bytes), "
              f"{r['improved']}/{r['searched']} modules smaller, {r['compiles']} compiles "
              f"({r['compiles_per_module']}/module), {r['minutes']:.1f} min")
    print(f"goal (>= greedy's gain in <= half its compiles): {'met' if res['goal_met'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
