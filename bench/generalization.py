"""How inlining policies do on code from projects they were not trained on,
per language: unguarded, against each file's `-Oz`.

Each ``--corpus ROLE=DIR[:heldout]`` is measured for every ``--policy``:
``DIR`` whole, or with ``:heldout`` only its held-out projects (the split
every trainer uses: by project, ``--heldout-fraction``, seed 0).  Roles are
labels: ``validation`` (where choices are made), ``heldout``, ``external``
(reported only).  For each policy, role and language (C, C++): the total
``.text`` change, the files more than 1 % bigger (and their names), the
largest growth (and its file) and the change per project.

Writes ``bench/results/generalization.json`` (``--output``) and prints one
markdown table row per policy, role and language.

usage: .venv/bin/python bench/generalization.py --policy pretrained-oz --policy R/saved_policy \\
           --corpus validation=validation_corpus/ --corpus heldout=combined/:heldout --jobs 2
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from mlgo_host.fsutil import atomic_write_json  # noqa: E402

LANGUAGES = ("C", "C++", "all")


def _parse_corpus(spec: str) -> tuple[str, str, bool]:
    role, sep, rest = spec.partition("=")
    if not sep or not rest:
        raise SystemExit(f"generalization: --corpus {spec!r}: expected ROLE=DIR or ROLE=DIR:heldout")
    heldout = rest.endswith(":heldout")
    return role, rest[: -len(":heldout")] if heldout else rest, heldout


def language_figures(rows, language_of: dict[str, str]) -> dict[str, dict]:
    """Per language (and all): files, both totals, the change, the files more
    than 1 % bigger, the largest growth and per project."""
    from mlgo_host.evaluation.evaluate import by_project

    out = {}
    for lang in LANGUAGES:
        rs = [r for r in rows if r.ok and (lang == "all" or language_of.get(r.module) == lang)]
        oz = sum(r.baseline_text for r in rs)
        pol = sum(r.policy_text for r in rs)
        growth = [(100.0 * (r.policy_text - r.baseline_text) / max(r.baseline_text, 1), r.module) for r in rs]
        worst = max(growth, default=(0.0, None))
        out[lang] = {"files": len(rs), "oz_text": oz, "policy_text": pol,
                     "change_pct": round(100.0 * (pol - oz) / oz, 3) if oz else 0.0,
                     "smaller": sum(1 for r in rs if r.policy_text < r.baseline_text),
                     "bigger": sum(1 for r in rs if r.policy_text > r.baseline_text),
                     "bigger_1pct": sum(1 for g, _ in growth if g > 1.0),
                     "worst_pct": round(worst[0], 3), "worst_file": worst[1],
                     "files_bigger_1pct": {m: round(g, 3) for g, m in sorted(growth, reverse=True) if g > 1.0},
                     "per_project": by_project(rs)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", action="append", required=True, help="a policy (name or saved directory); repeat")
    ap.add_argument("--corpus", action="append", required=True, metavar="ROLE=DIR[:heldout]",
                    help="a corpus and its role; :heldout keeps only its held-out projects; repeat")
    ap.add_argument("--heldout-fraction", type=float, default=0.2)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--clang", default="clang-19")
    ap.add_argument("--output", default=os.path.join(HERE, "results", "generalization.json"))
    args = ap.parse_args()

    from mlgo_host.corpus.corpus import load_corpus
    from mlgo_host.evaluation.evaluate import evaluate

    results: dict = {"clang": args.clang, "heldout_fraction": args.heldout_fraction, "runs": []}
    print("| policy | corpus | language | files | change | smaller / bigger | > 1 % bigger | largest growth |")
    print("|---|---|---|---|---|---|---|---|")
    for spec in args.corpus:
        role, path, heldout = _parse_corpus(spec)
        corpus = load_corpus(path)
        language_of = {m.name: m.language for m in corpus.modules}
        for policy in args.policy:
            t0 = time.monotonic()
            rep = evaluate(path, policy, split="heldout" if heldout else "all",
                           heldout_fraction=args.heldout_fraction, jobs=args.jobs, clang=args.clang,
                           progress=sys.stderr.isatty())
            figs = language_figures(rep.rows, language_of)
            results["runs"].append({"policy": policy, "role": role, "corpus": os.path.basename(path.rstrip("/")),
                                    "heldout_only": heldout, "seconds": round(time.monotonic() - t0, 1),
                                    "languages": figs})
            for lang in LANGUAGES:
                f = figs[lang]
                worst = f"{f['worst_pct']:+.2f} % ({f['worst_file']})" if f["worst_file"] else "-"
                print(f"| {policy} | {role} | {lang} | {f['files']} | {f['change_pct']:+.3f} % | "
                      f"{f['smaller']} / {f['bigger']} | {f['bigger_1pct']} | {worst} |", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    atomic_write_json(args.output, results)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    from mlgo_host.cli import ends_quietly

    sys.exit(ends_quietly(main))
