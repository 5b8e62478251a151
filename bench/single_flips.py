"""Whether single flips of one direction carry over between projects: the single flips `tune`
measured from `-Oz`'s decisions (kind ``single``), by bands of the callee's linkage, uses and
``cost_estimate``, and a logistic model of "the flip made the file smaller" cross-validated by
project (5 folds: a project is never in its own fold's training).

A policy that adds (``--direction inline``) or refuses (``--direction refuse``) such flips gains
what the flips it picks net, won bytes minus lost bytes; a band or a threshold is worth a rule
only where that net is negative in most projects.  The linkage (``t``: internal, ``T``: external)
comes from ``llvm-nm`` on the module's bitcode: only an internal callee's body can die.

usage: .venv/bin/python bench/single_flips.py --tune T --corpus CORPUS [--tune T2 --corpus C2] \\
           [--direction inline] [--llvm-nm llvm-nm-19]
Writes bench/results/single_flips_DIRECTION.json (``--output``).
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from outline_model import FEATURES, LINEAR, auc, fit, predict, probed_results  # noqa: E402

from mlgo_host.fsutil import atomic_write_json  # noqa: E402
from mlgo_host.policies.outline import log_scaled  # noqa: E402

COST_BANDS = ((None, 5), (5, 15), (15, 30), (30, None))
THRESHOLDS = (0.3, 0.5, 0.7)


def symbol_linkage(bitcode: str, llvm_nm: str) -> dict[str, str]:
    """Function name -> its ``llvm-nm`` letter (``t`` internal, ``T`` external) in ``bitcode``."""
    out = subprocess.run([llvm_nm, bitcode], capture_output=True, text=True, check=True).stdout
    return {f[-1]: f[-2] for f in (line.split() for line in out.splitlines()) if len(f) >= 2}


def single_flips(tune_dir: str, corpus: str, direction: str, llvm_nm: str) -> list[dict]:
    """Every single flip of ``direction`` measured in ``tune_dir``: project, callee linkage,
    the site's decision features (as in the probe), size change and whether it was kept."""
    start = 0 if direction == "inline" else 1
    out = []
    for r, probe, records in probed_results(tune_dir):
        decision = {d.site.key: d for d in probe.decisions}
        flips = [f for f in r.get("flips", ()) if f["kind"] == "single" and f.get("from") == start
                 and f.get("applied") and f["key"] in decision]
        if not flips:
            continue
        linkage = symbol_linkage(os.path.join(corpus, r["name"] + ".bc"), llvm_nm)
        for f in flips:
            d = decision[f["key"]]
            rec = records[d.index]
            out.append({"project": r["name"].split("/", 1)[0], "linkage": linkage.get(d.site.callee, "?"),
                        "x": [float(np.ravel(rec[k])[0]) for k in FEATURES],
                        "delta": float(f["delta"]), "kept": bool(f["accepted"])})
    return out


def summary(flips: list[dict], picked: np.ndarray) -> dict:
    """What a policy making the ``picked`` flips nets, in all and per project."""
    delta = np.array([f["delta"] for f in flips])
    per_project = collections.Counter()
    for f, p in zip(flips, picked):
        if p:
            per_project[f["project"]] += f["delta"]
    return {"flips": int(picked.sum()), "smaller": int((picked & (delta < 0)).sum()),
            "net_bytes": float(delta[picked].sum()), "won_bytes": float(delta[picked & (delta < 0)].sum()),
            "projects_smaller": sum(v < 0 for v in per_project.values()),
            "projects_bigger": sum(v > 0 for v in per_project.values())}


def bands(flips: list[dict]) -> list[dict]:
    users = np.array([f["x"][FEATURES.index("callee_users")] for f in flips])
    cost = np.array([f["x"][FEATURES.index("cost_estimate")] for f in flips])
    linkage = np.array([f["linkage"] for f in flips])
    rows = []
    for link in ("t", "T"):
        for max_users in (2, 3, None):
            for lo, hi in COST_BANDS:
                picked = (linkage == link) & (users <= (max_users or np.inf)) \
                    & (cost > (lo if lo is not None else -np.inf)) & (cost <= (hi if hi is not None else np.inf))
                rows.append({"linkage": link, "max_users": max_users, "cost_estimate": [lo, hi],
                             **summary(flips, picked)})
    return rows


def project_cv(flips: list[dict], folds: int = 5) -> tuple[float, list[dict]]:
    """The project-CV AUC of "made the file smaller" and what the flips over each threshold net."""
    X = log_scaled(np.array([f["x"] for f in flips]), np.array([k not in LINEAR for k in FEATURES]))
    y = np.array([f["delta"] < 0 for f in flips], dtype=float)
    w = np.ones(len(y))
    projects = sorted({f["project"] for f in flips})
    fold_of = {p: i % folds for i, p in enumerate(np.random.default_rng(0).permutation(projects))}
    fold = np.array([fold_of[f["project"]] for f in flips])
    pred = np.zeros(len(y))
    for k in range(folds):
        te = fold == k
        pred[te] = predict(fit(X[~te], y[~te], w[~te]), X[te])
    return auc(pred, y, w), [{"threshold": t, **summary(flips, pred > t)} for t in THRESHOLDS]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tune", action="append", required=True, help="a tune directory; repeat")
    ap.add_argument("--corpus", action="append", required=True, help="the corpus of each --tune, in order")
    ap.add_argument("--direction", choices=("inline", "refuse"), default="inline",
                    help="inline where -Oz does not (default), or refuse where it inlines")
    ap.add_argument("--llvm-nm", default="llvm-nm-19")
    ap.add_argument("--output", default=None, help="default: bench/results/single_flips_DIRECTION.json")
    args = ap.parse_args()
    args.output = args.output or os.path.join(HERE, "results", f"single_flips_{args.direction}.json")
    if len(args.tune) != len(args.corpus):
        raise SystemExit("single_flips: give one --corpus per --tune")
    flips = [f for t, c in zip(args.tune, args.corpus) for f in single_flips(t, c, args.direction, args.llvm_nm)]
    if not flips:
        raise SystemExit("single_flips: no single flip of that direction in the tune directories")
    everything = summary(flips, np.ones(len(flips), dtype=bool))
    cv_auc, by_threshold = project_cv(flips)
    result = {"direction": args.direction, "tune": [os.path.basename(os.path.normpath(t)) for t in args.tune],
              "projects": len({f["project"] for f in flips}), "all": everything, "bands": bands(flips),
              "project_cv_auc": round(cv_auc, 3), "by_threshold": by_threshold}
    atomic_write_json(args.output, result)
    print(f"{everything['flips']} single flips to {args.direction} ({everything['smaller']} smaller) from "
          f"{result['projects']} projects: net {everything['net_bytes']:+.0f} B "
          f"(won {everything['won_bytes']:+.0f} B); project-CV AUC {cv_auc:.3f}")
    print("| linkage | callee uses ≤ | cost_estimate | flips | smaller | net B | won B | projects smaller / bigger |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for b in (b for b in result["bands"] if b["flips"]):
        lo, hi = b["cost_estimate"]
        band = f"{'' if lo is None else f'({lo}'}..{'' if hi is None else f'{hi}]'}"
        print(f"| {b['linkage']} | {b['max_users'] or 'any'} | {band} | {b['flips']} | {b['smaller']} | "
              f"{b['net_bytes']:+.0f} | {b['won_bytes']:+.0f} | {b['projects_smaller']} / {b['projects_bigger']} |")
    for t in by_threshold:
        print(f"model P > {t['threshold']}: {t['flips']} flips, net {t['net_bytes']:+.0f} B "
              f"(won {t['won_bytes']:+.0f} B), projects smaller / bigger {t['projects_smaller']} / "
              f"{t['projects_bigger']}")
    return 0


if __name__ == "__main__":
    from mlgo_host.cli import ends_quietly

    sys.exit(ends_quietly(main))
