"""Fit the outline model (:mod:`mlgo_host.policies.outline`): which outline groups win.

An *outline group* is a flip `tune` measures (kind ``outline``): a callee left
out at every site `-Oz` inlined it.  On C they hold most of what `tune` finds.
This script reads the groups measured in one or more tune directories (every
group of a module whose probe is kept), gives each of the group's sites the
features its decision had in the probe (the channel's record), and fits a
logistic model of "the group won" on them (each site weighted 1 / the group's
sites; features log-scaled and standardized).  It reports the model's AUC and
the bytes the groups it would refuse won and lost, by project-grouped
cross-validation (5 folds of projects: a project is never in its own fold's
training), and writes the model fitted on every group, with the threshold
given (chosen on validation projects: docs/results.md), as an outline model
file.  The shipped policy's C part is one (docs/training.md has its recipe).

usage: .venv/bin/python bench/outline_model.py --tune T1 [--tune T2 ...] [--output model.json --threshold 0.5]
"""

from __future__ import annotations

import argparse
import glob
import os
import pickle
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from mlgo_host.policies.outline import OutlineModel, log_scaled  # noqa: E402

#: the decision features the model reads (the clang-19 slot that carries -Oz's decision is left out)
FEATURES = ("callee_users", "cost_estimate", "callsite_cost", "is_multiple_blocks",
            "callee_conditionally_executed_blocks", "node_count", "edge_count", "caller_users", "sroa_savings",
            "sroa_losses", "nr_ctant_params", "constant_args", "num_loops", "simplified_instructions",
            "caller_basic_block_count", "caller_conditionally_executed_blocks", "callsite_height",
            "nested_inlines", "load_elimination", "call_argument_setup", "lowered_call_arg_setup", "threshold",
            "unsimplified_common_instructions", "dead_blocks")
#: features kept linear (flags)
LINEAR = ("is_multiple_blocks",)


def probed_results(tune_dir: str):
    """(stored result, its probe, the probe's feature records) of each module of ``tune_dir`` whose
    probe made decisions."""
    for path in sorted(glob.glob(os.path.join(tune_dir, "data", "*.pkl"))):
        with open(path, "rb") as f:
            r = pickle.load(f)
        probe = r.get("probe")
        if r.get("status") == "ok" and probe is not None and probe.episode.n:
            yield r, probe, probe.episode.features()


def outline_groups(tune_dir: str) -> list[dict]:
    """Every outline group measured in ``tune_dir``: its project, sites'
    feature records, size change (bytes; negative: smaller) and outcome."""
    out = []
    for r, probe, records in probed_results(tune_dir):
        index_of = {d.site.key: d.index for d in probe.decisions}
        for flip in r.get("flips", ()):
            if flip["kind"] != "outline" or not flip.get("applied"):
                continue
            idx = [index_of[k] for k in flip["key"].split(" + ") if k in index_of]
            if idx:
                out.append({"project": r["name"].split("/", 1)[0], "sites": records[idx],
                            "delta": float(flip["delta"]), "won": bool(flip["accepted"])})
    return out


def site_matrix(groups: list[dict]):
    """(X, y, weight, group index) with one row per site."""
    X, y, w, g = [], [], [], []
    for k, grp in enumerate(groups):
        for rec in grp["sites"]:
            X.append([float(np.ravel(rec[f])[0]) for f in FEATURES])  # (each feature is a 1-element tensor)
            y.append(float(grp["won"]))
            w.append(1.0 / len(grp["sites"]))
            g.append(k)
    log = np.array([f not in LINEAR for f in FEATURES])
    return log_scaled(np.array(X), log), np.array(y), np.array(w), np.array(g)


def fit(X, y, w, l2: float = 1.0, steps: int = 500, rate: float = 0.5):
    """Weighted logistic regression by gradient descent on standardized X."""
    mu, sd = X.mean(0), X.std(0) + 1e-9
    Z = (X - mu) / sd
    beta, b = np.zeros(Z.shape[1]), 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(Z @ beta + b)))
        beta -= rate * (Z.T @ (w * (p - y)) / w.sum() + l2 * beta / len(Z))
        b -= rate * float((w * (p - y)).sum() / w.sum())
    return mu, sd, beta, b


def predict(model, X):
    mu, sd, beta, b = model
    return 1.0 / (1.0 + np.exp(-(((X - mu) / sd) @ beta + b)))


def auc(p, y, w) -> float:
    o = np.argsort(p)
    p, y, w = p[o], y[o], w[o]
    pos, neg = (w * y).sum(), (w * (1 - y)).sum()
    return float((w * y * np.cumsum(w * (1 - y))).sum() / (pos * neg)) if pos and neg else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tune", action="append", required=True, help="a tune directory; repeat")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--exclude-project", action="append", default=[], metavar="PROJECT",
                    help="leave this project's groups out (a validation project); repeat")
    ap.add_argument("--output", default=None, help="write the model fitted on every group here (outline model JSON)")
    ap.add_argument("--threshold", type=float, default=0.5,
                    help="the model's P(win) over which the policy refuses an inlining")
    ap.add_argument("--install", metavar="POLICY_DIR", default=None,
                    help="with --output: make the model answer POLICY_DIR's C compiles (e.g. "
                         "mlgo_host/data/policies/pretrained-oz)")
    args = ap.parse_args()
    groups = [g for t in args.tune for g in outline_groups(t) if g["project"] not in args.exclude_project]
    if not groups:
        raise SystemExit("outline_groups: no outline group in the tune directories")
    X, y, w, gid = site_matrix(groups)
    projects = sorted({g["project"] for g in groups})
    fold = {p: i % args.folds for i, p in enumerate(np.random.default_rng(0).permutation(projects))}
    site_fold = np.array([fold[groups[k]["project"]] for k in gid])
    pred = np.zeros(len(X))
    for k in range(args.folds):
        te = site_fold == k
        pred[te] = predict(fit(X[~te], y[~te], w[~te]), X[te])
    # (the model is written before the report: a reader that stops early, `| head`, loses no model)
    if args.output:
        mu, sd, beta, b = fit(X, y, w)
        OutlineModel(FEATURES, np.array([x not in LINEAR for x in FEATURES]), mu, sd, beta, float(b), args.threshold,
                     {"groups": len(groups), "won": int(sum(g["won"] for g in groups)), "projects": len(projects),
                      "sites": len(X), "project_cv_auc": round(auc(pred, y, w), 4)}).save(args.output)
        if args.install:
            from mlgo_host.policies.saved import set_language_part

            set_language_part(args.install, "C", args.output)
    print(f"{len(groups)} groups ({sum(g['won'] for g in groups)} won) from {len(projects)} projects, "
          f"{len(X)} sites; project-CV AUC {auc(pred, y, w):.3f}")
    delta = np.array([g["delta"] for g in groups])
    group_p = np.array([pred[gid == k].mean() for k in range(len(groups))])
    print(f"all winning groups: {delta[delta < 0].sum():+.0f} B")
    for t in (0.3, 0.5, 0.7):
        sel = group_p > t
        print(f"refused at P > {t}: {sel.sum()} groups, {delta[sel].sum():+.0f} B "
              f"(won {delta[sel & (delta < 0)].sum():+.0f}, lost {delta[sel & (delta > 0)].sum():+.0f})")
    if args.output and args.install:
        print(f"{args.install}: its C compiles are answered by {args.output}'s outline model")
    return 0


if __name__ == "__main__":
    from mlgo_host.cli import ends_quietly

    sys.exit(ends_quietly(main))
