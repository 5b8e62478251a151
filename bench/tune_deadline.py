"""`tune --budget-minutes N` as a user runs it, code revisions side by side:
for each git revision, the same corpus tuned under the same deadline in a
fresh tune directory (one revision after the other: on a shared machine,
compare only figures from one run of this script).  Prints, per revision,
the .text against -Oz per language, and per project the files, the compiles
and how the files stopped; writes bench/results/tune_deadline.json (one
entry per corpus, kept beside the other corpora's).

Choices are made on validation projects (a corpus of Debian packages from
`mlgo-host corpus debian`); the external corpus is for reporting only.

usage: .venv/bin/python bench/tune_deadline.py --corpus DIR [--minutes 8] [--jobs 2]
           [--revs REV ...] [--work bench_out/deadline]
       .venv/bin/python bench/tune_deadline.py --corpus DIR --read NAME=T ...   (tables of tune directories made before)
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OUT = os.path.join(HERE, "results", "tune_deadline.json")
sys.path.insert(0, HERE)

from tune_starts import figures  # noqa: E402  (per language: .text against -Oz, compiles, starts)


def code_of(rev: str, into: str) -> str:
    """The package as it is at git revision ``rev``, unpacked under ``into``
    (the directory its runs start in, and their PYTHONPATH)."""
    os.makedirs(into, exist_ok=True)
    archive = subprocess.run(["git", "-C", REPO, "archive", rev, "mlgo_host"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", into], input=archive.stdout, check=True)
    return into


def run_tune(corpus: str, out: str, minutes: float, jobs: int, code: str) -> str:
    """One tune run under ``minutes``; returns its last lines (the summary)."""
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=code)
    # run from the unpacked code: `python -m` puts the working directory first on sys.path, before
    # PYTHONPATH, so from the checkout every revision would run the working tree's package
    r = subprocess.run([sys.executable, "-m", "mlgo_host", "tune", "--corpus", os.path.abspath(corpus),
                        "--output", os.path.abspath(out), "--budget-minutes", f"{minutes:g}", "--jobs", str(jobs),
                        "--no-progress"], capture_output=True, text=True, env=env, cwd=code)
    if r.returncode:
        raise SystemExit(f"tune_deadline: tune failed: {r.stderr.strip().splitlines()[-1:]}")
    return "\n".join(r.stdout.strip().splitlines()[-2:])


def projects(out: str) -> dict:
    """Per project (a module name's first part): files, compiles, and how
    many files stopped how ("starts only": no flip measured)."""
    with open(os.path.join(out, "tune.json")) as f:
        mods = json.load(f)["modules"]
    acc: dict = {}
    for name, m in mods.items():
        p = acc.setdefault(name.split("/")[0], {"files": 0, "compiles": 0, "stopped": collections.Counter()})
        p["files"] += 1
        p["compiles"] += m.get("compiles") or 0
        p["stopped"][(m.get("stopped") or m["status"]) if m.get("tried") else "starts only"] += 1
    return {k: dict(v, stopped=dict(v["stopped"])) for k, v in sorted(acc.items())}


def table(corpus: str, out: str) -> dict:
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    return {"languages": figures(corpus, out), "projects": projects(out),
            **{k: s.get(k) for k in ("run_minutes", "run_compiles", "searched_past_start", "exhausted", "time_spent")}}


def show(name: str, t: dict) -> None:
    print(f"== {name}: {t['run_minutes']} min, {t['run_compiles']} compiles, {t['searched_past_start']} files searched "
          f"past their start, {t['exhausted']} to exhaustion; time {t['time_spent']}")
    for lang, f in sorted(t["languages"].items()):
        print(f"   {lang:<4} {f['files']:>4} files {f['change_pct']:>+7.3f}%  {f['compiles_per_file']:>5.1f} compiles/file"
              f"  starts {f['starts']}")
    print("   | project | files | compiles | how files stopped |")
    for p, v in t["projects"].items():
        print(f"   | {p} | {v['files']} | {v['compiles']} | {v['stopped']} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, help="the corpus to tune")
    ap.add_argument("--minutes", type=float, default=8.0, help="tune's --budget-minutes (default 8)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--revs", nargs="+", default=["HEAD"], help="git revisions to compare (default HEAD)")
    ap.add_argument("--work", default="bench_out/deadline", help="where the tune directories go")
    ap.add_argument("--read", nargs="+", metavar="NAME=T", help="only read these tune directories, made before")
    args = ap.parse_args()
    from mlgo_host.fsutil import atomic_write_json

    got: dict = {}
    if args.read:
        for item in args.read:
            name, _, out = item.partition("=")
            got[name] = table(args.corpus, out)
            show(name, got[name])
    else:
        with tempfile.TemporaryDirectory(prefix="tune-deadline-") as tmp:
            for rev in args.revs:
                code = code_of(rev, os.path.join(tmp, rev.replace("/", "_")))
                out = os.path.join(args.work, rev.replace("/", "_"))
                print(run_tune(args.corpus, out, args.minutes, args.jobs, code), flush=True)
                got[rev] = table(args.corpus, out)
                show(rev, got[rev])
    old = json.load(open(OUT)) if os.path.exists(OUT) else {}
    name = os.path.basename(os.path.normpath(args.corpus))
    when = time.strftime("%Y-%m-%d %H:%M")
    # (runs of earlier invocations stay, each with its own time: docs/results.md cites them)
    runs = {**old.get(name, {}).get("runs", {}), **{k: dict(v, when=when) for k, v in got.items()}}
    old[name] = {"minutes": args.minutes, "jobs": args.jobs, "when": when, "runs": runs}
    atomic_write_json(OUT, old)
    print(f"wrote {os.path.relpath(OUT, REPO)}")
    return 0


if __name__ == "__main__":
    from mlgo_host.cli import ends_quietly

    sys.exit(ends_quietly(main))
