"""Modules per minute for `mlgo-host eval` on the benchmark corpus.

Builds the benchmark corpus first if needed (`mlgo-host corpus benchmark`,
idempotent), then evaluates the default policy over it:

1. a cold pass with 2 jobs into an empty baseline cache (each module compiled
   twice: the plain default compile, cached, and the interactive one);
2. warm passes with 1 and 2 jobs (baselines read from the cache: one
   interactive compile + llvm-size per module), the throughput a training or
   evaluation run sees once baselines exist.

Also reports the corpus itself: module count, C / C++ split and the total
default -Oz .text (the sum of the baselines), and checks that the default
policy reproduced every baseline (reward 0 everywhere).

usage: .venv/bin/python bench/eval.py [--corpus DIR] [--modules N] [--jobs 1 2]
Prints the figures and writes bench/results/eval.json (atomically).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from mlgo_host.fsutil import atomic_write_json  # noqa: E402
from mlgo_host.corpus.benchmark import build_benchmark, default_cache_dir  # noqa: E402
from mlgo_host.corpus.corpus import load_corpus  # noqa: E402
from mlgo_host.evaluation.evaluate import evaluate, select_modules  # noqa: E402

CXX_EXTS = (".cc", ".cpp", ".cxx", ".c++", ".C")


def language_of(module) -> str:
    """C or C++, from the cc1 command's -main-file-name."""
    cmd = list(module.cmd)
    if "-main-file-name" in cmd:
        name = cmd[cmd.index("-main-file-name") + 1]
        return "C++" if name.endswith(CXX_EXTS) else "C"
    return "C++" if any(a.startswith("-std=c++") or a.startswith("-std=gnu++") for a in cmd) else "C"


def timed_eval(corpus: str, selected, jobs: int, cache: str) -> tuple[float, object]:
    t0 = time.perf_counter()
    rep = evaluate(corpus, "default", jobs=jobs, cache_dir=cache, progress=True, selected=selected)
    return time.perf_counter() - t0, rep


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=None,
                    help="an existing corpus (default: build the benchmark corpus in the user cache)")
    ap.add_argument("--modules", type=int, default=None, help="evaluate only N modules spread over the sizes")
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2], help="job counts of the warm passes")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "eval.json"))
    args = ap.parse_args()

    t0 = time.perf_counter()
    if args.corpus is None:
        corpus_dir = str(default_cache_dir() / "corpus")
        build = build_benchmark(corpus_dir, jobs=2, progress=True)
        print(f"benchmark corpus: {build.summary()} in {time.perf_counter() - t0:.1f} s")
    else:
        corpus_dir = args.corpus
    corpus = load_corpus(corpus_dir)
    selected = select_modules(corpus, args.modules)
    langs = [language_of(m) for m in selected]
    cache = tempfile.mkdtemp(prefix="mlgo-bench-baselines-")
    try:
        cold_s, cold = timed_eval(corpus_dir, selected, 2, cache)
        warm = {}
        for j in args.jobs:
            s, rep = timed_eval(corpus_dir, selected, j, cache)
            warm[j] = (s, rep)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    summ = cold.summary()
    n = len(selected)
    ok_rows = [r for r in cold.rows if r.ok]
    result = {
        "corpus": {
            "modules": len(corpus.modules), "evaluated": n, "c": langs.count("C"), "cxx": langs.count("C++"),
            "default_text_total": summ.baseline_total, "failed": summ.failed,
            "observations_total": sum(r.observations for r in ok_rows),
        },
        "default_policy_reproduces_baseline": all(r.reward == 0.0 for r in ok_rows),
        "cold_2_jobs": {"wall_s": round(cold_s, 2), "modules_per_minute": round(60 * n / cold_s, 1)},
        "warm": {str(j): {"wall_s": round(s, 2), "modules_per_minute": round(60 * n / s, 1),
                          "failed": rep.summary().failed} for j, (s, rep) in warm.items()},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    c = result["corpus"]
    print(f"corpus: {c['modules']} modules ({c['c']} C, {c['cxx']} C++), default -Oz .text total "
          f"{c['default_text_total']} bytes, {c['observations_total']} inliner decisions, {c['failed']} failed")
    print(f"default policy reproduces every baseline: {result['default_policy_reproduces_baseline']}")
    print(f"cold (baseline + policy compile), 2 jobs: {result['cold_2_jobs']['modules_per_minute']} modules/min "
          f"({cold_s:.1f} s)")
    for j, w in result["warm"].items():
        print(f"warm (policy compile, cached baseline), {j} job(s): {w['modules_per_minute']} modules/min "
              f"({w['wall_s']} s)")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    atomic_write_json(args.out, result)
    print(f"wrote {os.path.relpath(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
