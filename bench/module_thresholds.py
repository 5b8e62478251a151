"""What one inline threshold per file could give: each file compiled at every threshold of a grid
(`-mllvm -inline-threshold=T`; `-Oz`'s own is 5), the total at each threshold for every file, and
the *oracle*, the smallest threshold's object for each file.  A policy that picks one threshold per
file from what it can see before compiling gets at most the oracle.

The sizes are kept in the output as they are measured: a stopped run continues where it stopped.

usage: .venv/bin/python bench/module_thresholds.py --corpus DIR [--modules-file NAMES.txt]
           [--thresholds -20,-10,0,5,15,30] [--jobs 2]
Writes bench/results/module_thresholds.json (``--output``).
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from mlgo_host.fsutil import atomic_write_json  # noqa: E402

OZ = 5  # -Oz's inline threshold


def measure(task: tuple) -> tuple[str, dict]:
    from mlgo_host.search.starts import measure_thresholds

    module, thresholds, clang = task
    return module.name, {str(t): s for t, s in measure_thresholds(module, thresholds, clang=clang,
                                                                  timeout=300.0).items()}


def summarize(sizes: dict[str, dict[str, int | None]], thresholds: list[int]) -> dict:
    """Per threshold: the change of the total against -Oz and the files smaller, bigger, > 1 % bigger;
    the oracle's change in all and per project."""
    ok = {m: s for m, s in sizes.items() if s.get(str(OZ)) is not None}
    oz = sum(s[str(OZ)] for s in ok.values())
    out = {"files": len(ok), "oz_text": oz, "by_threshold": {}}
    for t in thresholds:
        at = [(s[str(t)] if s.get(str(t)) is not None else s[str(OZ)], s[str(OZ)]) for s in ok.values()]
        out["by_threshold"][str(t)] = {
            "change_pct": round(100.0 * (sum(a for a, _ in at) - oz) / oz, 3),
            "smaller": sum(a < b for a, b in at), "bigger": sum(a > b for a, b in at),
            "bigger_1pct": sum(a > 1.01 * b for a, b in at)}
    best = {m: min(v for v in s.values() if v is not None) for m, s in ok.items()}
    out["oracle_change_pct"] = round(100.0 * (sum(best.values()) - oz) / oz, 3)
    per = collections.defaultdict(lambda: [0, 0])
    for m, s in ok.items():
        per[m.split("/", 1)[0]][0] += s[str(OZ)]
        per[m.split("/", 1)[0]][1] += best[m]
    out["oracle_by_project"] = {p: round(100.0 * (b - a) / a, 3) for p, (a, b) in sorted(per.items())}
    return out


def main() -> int:
    from mlgo_host.corpus.corpus import load_corpus

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--modules-file", default=None, help="the files to measure, one name a line (default: all)")
    ap.add_argument("--thresholds", default="-20,-10,0,5,15,30", help="the grid; it must hold -Oz's 5")
    ap.add_argument("--clang", default="clang-19")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--output", default=os.path.join(HERE, "results", "module_thresholds.json"))
    args = ap.parse_args()
    thresholds = sorted(int(t) for t in args.thresholds.split(","))
    if OZ not in thresholds:
        raise SystemExit(f"module_thresholds: the grid must hold -Oz's threshold {OZ}")
    modules = load_corpus(args.corpus).modules
    if args.modules_file:
        with open(args.modules_file) as f:
            wanted = set(f.read().split())
        modules = [m for m in modules if m.name in wanted]
    sizes: dict = {}
    if os.path.exists(args.output):
        with open(args.output) as f:
            sizes = json.load(f).get("sizes", {})
    todo = [(m, thresholds, args.clang) for m in modules
            if not all(str(t) in sizes.get(m.name, {}) for t in thresholds)]
    with mp.get_context("spawn").Pool(args.jobs) as pool:
        for i, (name, s) in enumerate(pool.imap_unordered(measure, todo), 1):
            sizes[name] = s
            if i % 20 == 0:
                atomic_write_json(args.output, {"thresholds": thresholds, "sizes": sizes})
    result = summarize(sizes, thresholds)
    atomic_write_json(args.output, {"thresholds": thresholds, **result, "sizes": sizes})
    print(f"{result['files']} files, {result['oz_text']} B at -Oz")
    print("| threshold | change | smaller / bigger | > 1 % bigger |\n| --- | --- | --- | --- |")
    for t, r in result["by_threshold"].items():
        print(f"| {t} | {r['change_pct']:+.3f} % | {r['smaller']} / {r['bigger']} | {r['bigger_1pct']} |")
    print(f"oracle (each file at its best threshold): {result['oracle_change_pct']:+.3f} %")
    return 0


if __name__ == "__main__":
    from mlgo_host.cli import ends_quietly

    sys.exit(ends_quietly(main))
