"""Which starts `tune` tries, chosen per language on validation projects:
the same corpus tuned with each set of starts (-Oz's own always; the inline
thresholds; the shipped policy's decisions) at a fixed number of compiles per
file, and under a deadline, each in a fresh tune directory.  Prints, per
configuration and language, the .text against -Oz, the compiles, and how the
files started; writes bench/results/tune_starts.json.

Run it on projects no training corpus contains and that you will not report
on (e.g. a corpus of Debian packages from `mlgo-host corpus debian`); the
held-out projects and the external corpus are for reporting only.

usage: .venv/bin/python bench/tune_starts.py --corpus DIR [--work bench_out/starts] [--compiles 14] [--minutes 0]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OUT = os.path.join(HERE, "results", "tune_starts.json")

#: name -> tune's flags for that set of starts
CONFIGS = {
    "oz": ["--no-thresholds", "--start-policy", "none"],
    "thresholds": ["--start-policy", "none"],
    "policy": ["--no-thresholds"],
    "thresholds+policy": [],
}


def run_tune(corpus: str, out: str, flags: list[str], budget: list[str], jobs: int) -> float:
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "mlgo_host", "tune", "--corpus", corpus, "--output", out,
                        "--jobs", str(jobs), "--no-progress", *budget, *flags], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"tune_starts: tune failed: {r.stderr.strip().splitlines()[-1:]}")
    return time.time() - t0


def figures(corpus: str, out: str) -> dict:
    """Per language (and all): -Oz's and the best .text, the change, the
    compiles, the files per start, files searched past their start."""
    from mlgo_host.corpus.corpus import load_corpus

    lang = {m.name: m.language for m in load_corpus(corpus).modules}
    with open(os.path.join(out, "tune.json")) as f:
        mods = json.load(f)["modules"]
    acc: dict = {}
    for name, m in mods.items():
        if m["status"] != "ok" or m.get("best_size") is None:
            continue
        for key in ("all", lang.get(name, "C")):
            a = acc.setdefault(key, {"files": 0, "oz_text": 0, "best_text": 0, "compiles": 0,
                                     "starts": collections.Counter(), "past_start": 0, "bigger": 0})
            a["files"] += 1
            a["oz_text"] += m["default_size"]
            a["best_text"] += m["best_size"]
            a["compiles"] += m["compiles"]
            a["starts"][m.get("start") or "base"] += 1
            a["past_start"] += bool(m.get("tried"))
            a["bigger"] += m["best_size"] > m["default_size"]
    for a in acc.values():
        a["change_pct"] = round(100.0 * (a["best_text"] - a["oz_text"]) / a["oz_text"], 3) if a["oz_text"] else 0.0
        a["compiles_per_file"] = round(a["compiles"] / max(1, a["files"]), 2)
        a["starts"] = dict(a["starts"])
    return acc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, help="a corpus of validation projects")
    ap.add_argument("--work", default="bench_out/starts", help="where the tune directories go")
    ap.add_argument("--compiles", type=float, default=14, help="compiles per file (default 14)")
    ap.add_argument("--minutes", type=float, default=0, help="also a run under this deadline per configuration")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="which configurations (default: all)")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    from mlgo_host.fsutil import atomic_write_json

    budgets = [("compiles", ["--compiles-per-module", f"{args.compiles:g}"])]
    if args.minutes:
        budgets.append(("minutes", ["--budget-minutes", f"{args.minutes:g}"]))
    res: dict = {}
    for bname, budget in budgets:
        for name in args.configs.split(","):
            out = os.path.join(args.work, f"{bname}-{name}")
            wall = run_tune(args.corpus, out, CONFIGS[name], budget, args.jobs)
            res.setdefault(bname, {})[name] = {"minutes": round(wall / 60, 2), **figures(args.corpus, out)}
            for lang, f in res[bname][name].items():
                if isinstance(f, dict):
                    print(f"{bname:<8} {name:<18} {lang:<4} {f['files']:>4} files {f['change_pct']:>+7.3f}% "
                          f"{f['compiles_per_file']:>6.1f} compiles/file  starts {f['starts']}", flush=True)
    atomic_write_json(OUT, {"corpus": os.path.basename(os.path.normpath(args.corpus)), "compiles": args.compiles,
                            "minutes": args.minutes, "jobs": args.jobs, "when": time.strftime("%Y-%m-%d %H:%M"),
                            "results": res})
    print(f"wrote {os.path.relpath(OUT, REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
