"""The shipped policy on every installed clang, side by side: its ``.text``
against that clang's own ``-Oz`` on the external corpus (projects no
training list contains), per compiler and per language, with the files it
makes bigger.  Each compiler reads the policy's inputs by meaning (clang-19
sends the inliner's default decision in ``callee_basic_block_count``,
clang-21+ in ``inlining_default``), so the figures should agree.

The corpus is built once (``mlgo-host corpus benchmark --sources external``,
cached under ``--root``); every clang compiles the same bitcode.  Prints a
table and writes bench/results/clangs.json.

usage: .venv/bin/python bench/clangs.py [--root bench_out] [--policy pretrained-oz] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OUT = os.path.join(HERE, "results", "clangs.json")
CPP_SUFFIXES = (".cc", ".cpp", ".cxx", ".c++", ".C")


def installed_clangs() -> list[int]:
    """Major versions N >= 17 with both clang-N and llvm-size-N on PATH."""
    from mlgo_host.measure.sizes import installed_clang_versions

    return [v for v in installed_clang_versions() if shutil.which(f"llvm-size-{v}")]


def languages(corpus_dir: str) -> dict[str, str]:
    """Module name -> C or C++, from its source file's name."""
    from mlgo_host.corpus.identity import read_sources

    return {n: "C++" if str(ident.get("source", "")).endswith(CPP_SUFFIXES) else "C"
            for n, ident in read_sources(corpus_dir).items()}


def corpus(root: str, workers: int) -> str:
    out = os.path.join(root, "external_corpus")
    if not os.path.exists(os.path.join(out, "corpus_description.json")):
        rc = subprocess.run([sys.executable, "-m", "mlgo_host", "corpus", "benchmark", "--sources", "external",
                             "--output", out, "--jobs", str(workers)]).returncode
        if rc:
            raise SystemExit(f"clangs: building the external corpus failed (exit {rc})")
    return out


def figures(rows) -> dict:
    """Totals against -Oz, files bigger, files > 1 % bigger, the worst file."""
    ok = [r for r in rows if r.ok]
    oz, pol = sum(r.baseline_text for r in ok), sum(r.policy_text for r in ok)
    growth = {r.module: 100.0 * (r.policy_text - r.baseline_text) / max(r.baseline_text, 1) for r in ok}
    worst = max(growth, key=growth.get) if growth else None
    return {"files": len(ok), "failed": len(rows) - len(ok), "oz_text": oz, "policy_text": pol,
            "change_pct": round(100.0 * (pol - oz) / oz, 3) if oz else 0.0,
            "bigger": sum(g > 0 for g in growth.values()), "bigger_1pct": sum(g > 1.0 for g in growth.values()),
            "worst_file": worst, "worst_pct": round(growth[worst], 2) if worst else 0.0}


def measure(corpus_dir: str, policy: str, version: int, workers: int, root: str) -> dict:
    from mlgo_host.evaluation.evaluate import evaluate

    t0 = time.time()
    rep = evaluate(corpus_dir, policy, jobs=workers, clang=f"clang-{version}", llvm_size=f"llvm-size-{version}",
                   cache_dir=os.path.join(root, f"baselines-{version}"), progress=sys.stderr.isatty())
    out = {"compiler": subprocess.run([f"clang-{version}", "--version"], capture_output=True,
                                      text=True).stdout.splitlines()[0],
           "all": figures(rep.rows), "minutes": round((time.time() - t0) / 60, 2)}
    lang_of = languages(corpus_dir)
    for lang in ("C", "C++"):
        out[lang] = figures([r for r in rep.rows if lang_of.get(r.module) == lang])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default="bench_out", help="corpus and baseline caches (default: bench_out)")
    ap.add_argument("--policy", default="pretrained-oz", help="a shipped policy's name or a saved policy directory")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--clangs", default=None, help="comma-separated major versions (default: every installed one)")
    args = ap.parse_args()
    from mlgo_host.fsutil import atomic_write_json
    from mlgo_host.shipped import resolve_policy

    versions = [int(v) for v in args.clangs.split(",")] if args.clangs else installed_clangs()
    corpus_dir = corpus(args.root, args.workers)
    policy = resolve_policy(args.policy)
    per = {f"clang-{v}": measure(corpus_dir, policy, v, args.workers, args.root) for v in versions}
    print(f"{'compiler':<10} {'lang':<5} {'files':>5} {'vs -Oz':>8} {'bigger':>6} {'>1 %':>5}  worst file")
    for name, m in per.items():
        for lang in ("all", "C", "C++"):
            f = m[lang]
            print(f"{name:<10} {lang:<5} {f['files']:>5} {f['change_pct']:>+7.3f}% {f['bigger']:>6} "
                  f"{f['bigger_1pct']:>5}  {f['worst_file']} ({f['worst_pct']:+.2f} %)")
    atomic_write_json(OUT, {"policy": args.policy, "corpus": "external", "when": time.strftime("%Y-%m-%d %H:%M"),
                            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                            "per_compiler": per})
    print(f"wrote {os.path.relpath(OUT, REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
