"""A policy's `.text` after a relocatable link of each project, against
`-Oz`'s: does the gain survive the linker?

Each file of a corpus is compiled twice, with `-Oz`'s own decisions and with
the policy's (unguarded, over the channel), the objects kept.  The objects of
each project and language are then linked into one relocatable object
(`ld -r`), which keeps one copy of each inline function that several files
define (a C++ `linkonce_odr` COMDAT group), as the link of a program or
library does.  Both `.text` totals are reported per project and language,
before the link (the sum of the files) and after it, in the same run.

Writes ``bench/results/linked.json`` (``--output``) and prints a markdown
table (one row per language and corpus, then one per project).

usage: .venv/bin/python bench/linked.py --policy pretrained-oz \\
           --corpus validation=validation_corpus/ --corpus external=external_corpus/ --jobs 2
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from generalization import _parse_corpus  # noqa: E402

from mlgo_host.fsutil import atomic_write_json  # noqa: E402

_POLICY = None  # the policy of this worker process (loaded once)


def _init(policy: str) -> None:
    global _POLICY
    from mlgo_host.policies import load_policy
    from mlgo_host.shipped import resolve_policy

    _POLICY = load_policy(resolve_policy(policy))


def _compile_both(job: tuple) -> tuple[str, str | None]:
    """Module ``name``'s two objects into ``oz`` and ``pol``; (name, error or None)."""
    from mlgo_host.channel.problems import ready_and_run

    module, clang, oz, pol, timeout = job
    try:
        r = subprocess.run(module.compile_command(clang, oz), capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0 or not os.path.exists(oz):
            return module.name, f"-Oz compile failed: {r.stderr.strip()[-200:]}"
        res = ready_and_run(module.compile_command(clang, pol), "inline", _POLICY, timeout=timeout)
        if res.returncode != 0 or not os.path.exists(pol):
            return module.name, f"policy compile failed: {res.stderr_tail.strip()[-200:]}"
    except Exception as e:  # noqa: BLE001 (one module's failure is reported, the others go on)
        return module.name, f"{type(e).__name__}: {e}"
    return module.name, None


def _relocatable_link(objects: list[str], out: str) -> None:
    # (muldefs: a project's programs each define main; the link still keeps one copy per COMDAT group)
    r = subprocess.run(["ld", "-r", "-z", "muldefs", "-o", out, *objects], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"linked: ld -r failed: {r.stderr.strip()[:300]}")


def _figures(oz_files: int, pol_files: int, oz_linked: int, pol_linked: int) -> dict:
    def pct(a, b):
        return round(100.0 * (b - a) / a, 3) if a else 0.0

    return {"oz_files": oz_files, "policy_files": pol_files, "files_change_pct": pct(oz_files, pol_files),
            "oz_linked": oz_linked, "policy_linked": pol_linked, "linked_change_pct": pct(oz_linked, pol_linked)}


def measure(path: str, heldout: bool, policy: str, args, tmp: str) -> dict:
    """Per (project, language) and per language: both totals, files and linked."""
    from mlgo_host.corpus.corpus import load_corpus, project_of
    from mlgo_host.evaluation.evaluate import select_modules
    from mlgo_host.measure.sizes import text_size

    corpus = load_corpus(path)
    mods = select_modules(corpus, None, "heldout" if heldout else "all", args.heldout_fraction)
    obj = {m.name: (os.path.join(tmp, "oz", f"{i}.o"), os.path.join(tmp, "pol", f"{i}.o")) for i, m in enumerate(mods)}
    for d in ("oz", "pol"):
        os.makedirs(os.path.join(tmp, d), exist_ok=True)
    failed = {}
    with multiprocessing.Pool(args.jobs, initializer=_init, initargs=(policy,)) as pool:
        jobs = [(m, args.clang, *obj[m.name], args.timeout) for m in mods]
        for name, err in pool.imap_unordered(_compile_both, jobs):
            if err:
                failed[name] = err
    groups = collections.defaultdict(list)
    for m in mods:
        if m.name not in failed:
            groups[(project_of(m.name), m.language)].append(m.name)
    per_group, per_lang = {}, collections.defaultdict(lambda: [0, 0, 0, 0])
    for (project, lang), names in sorted(groups.items()):
        sizes = []
        for k, side in enumerate(("oz", "pol")):
            files = sum(text_size(obj[n][k], None, clang=args.clang) for n in names)
            out = os.path.join(tmp, f"{side}-linked.o")
            _relocatable_link([obj[n][k] for n in names], out)
            sizes += [files, text_size(out, None, clang=args.clang)]
        oz_f, oz_l, pol_f, pol_l = sizes
        per_group[f"{project} ({lang})"] = dict(_figures(oz_f, pol_f, oz_l, pol_l), files=len(names))
        acc = per_lang[lang]
        for i, v in enumerate((oz_f, pol_f, oz_l, pol_l)):
            acc[i] += v
    return {"modules": len(mods), "failed": failed,
            "languages": {lang: _figures(*v) for lang, v in sorted(per_lang.items())},
            "projects": per_group}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="pretrained-oz", help="a policy (name or saved directory)")
    ap.add_argument("--corpus", action="append", required=True, metavar="ROLE=DIR[:heldout]",
                    help="a corpus and its role; :heldout keeps only its held-out projects; repeat")
    ap.add_argument("--heldout-fraction", type=float, default=0.2)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--clang", default="clang-19")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--output", default=os.path.join(HERE, "results", "linked.json"))
    args = ap.parse_args()
    if shutil.which("ld") is None:
        raise SystemExit("linked: no `ld` on PATH (apt-get install binutils)")

    results: dict = {"policy": args.policy, "clang": args.clang, "heldout_fraction": args.heldout_fraction,
                     "runs": []}
    print("| corpus | language or project | files | change, files | change, linked (`ld -r`) |")
    print("|---|---|---|---|---|")
    for spec in args.corpus:
        role, path, heldout = _parse_corpus(spec)
        t0 = time.monotonic()
        tmp = tempfile.mkdtemp(prefix="mlgo-linked-")
        try:
            run = measure(path, heldout, args.policy, args, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        run.update(role=role, corpus=os.path.basename(path.rstrip("/")), heldout_only=heldout,
                   seconds=round(time.monotonic() - t0, 1))
        results["runs"].append(run)
        for lang, f in run["languages"].items():
            n = sum(g["files"] for k, g in run["projects"].items() if k.endswith(f"({lang})"))
            print(f"| {role} | **{lang}** | {n} | {f['files_change_pct']:+.3f} % | {f['linked_change_pct']:+.3f} % |")
        for k, g in run["projects"].items():
            print(f"| {role} | {k} | {g['files']} | {g['files_change_pct']:+.3f} % | {g['linked_change_pct']:+.3f} % |")
        if run["failed"]:
            print(f"({role}: {len(run['failed'])} modules failed: {next(iter(run['failed'].items()))})")
        sys.stdout.flush()
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    atomic_write_json(args.output, results)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    from mlgo_host.cli import ends_quietly

    sys.exit(ends_quietly(main))
