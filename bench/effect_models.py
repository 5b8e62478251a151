"""Learn from the flip-effect table (issue 17, part 2) and compare methods
on the validation split by real compiles (``bench/results/effect_models.json``).

Data: the table's training-split entries (``bench/effects.py``) plus the
flips of a search run's rounds (``<run>/search/round-N.pkl``: training
modules only, checked).  Methods, all the project's actor network on the
same normalized features (the default decision an input):

* ``imitation``: the weighted imitation classifier (labels: the better
  action, weights: bytes at stake) retrained on these flips; gate p;
* ``mlp_huber`` / ``mlp_mse``: a regression of the bytes inlining saves
  (signed log), weighted by bytes at stake; the default is flipped where
  the predicted saving exceeds tau bytes;
* ``linear_huber``: the same regression without hidden layers (baseline).

Each (method, threshold) is compiled on the validation modules; the
choice is the smallest validation total with no module more than 1 %
bigger than -Oz.  Only the chosen one is then measured on the held-out
split and the external corpus (reporting only).  Every evaluation is
cached under ``--root`` (a rerun goes on).

usage: .venv/bin/python bench/effect_models.py --table effects_out/table --rounds RUN/search
       --corpus pretrain_out/training_corpus --external pretrain_out/external_corpus
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from mlgo_host.corpus.corpus import load_corpus, split_three  # noqa: E402
from mlgo_host.learning import effects as fx  # noqa: E402
from mlgo_host.search.effects import entries  # noqa: E402

IMITATION_GATES = (0.5, 0.6, 0.7, 0.9)
TAUS = (0.0, 2.0, 4.0, 8.0, 32.0)
METHODS = {
    "imitation": {"kind": "imitation", "fc": (40, 40, 20)},
    "mlp_huber": {"kind": "regression", "fc": (40, 40, 20), "loss": "huber"},
    "mlp_mse": {"kind": "regression", "fc": (40, 40, 20), "loss": "mse"},
    "linear_huber": {"kind": "regression", "fc": (), "loss": "huber"},
    "mlp_huber_sqrt": {"kind": "regression", "fc": (40, 40, 20), "loss": "huber", "weighting": "sqrt"},
    "mlp_huber_unweighted": {"kind": "regression", "fc": (40, 40, 20), "loss": "huber", "weighting": "none"},
    "linear_huber_unweighted": {"kind": "regression", "fc": (), "loss": "huber", "weighting": "none"},
    "imitation_unweighted": {"kind": "imitation", "fc": (40, 40, 20), "weighting": "none"},
}


def _round_rows(rounds: str, train_names: set[str], root: str):
    """The rounds' flips, cached (the round pickles take a minute to load)."""
    import pickle

    path = os.path.join(root, "round_rows.pkl")
    if os.path.exists(path):
        with open(path, "rb") as f:
            return pickle.load(f)
    rows = fx.effect_examples(fx.flips_of_rounds(sorted(glob.glob(os.path.join(rounds, "round-*.pkl"))), train_names))
    with open(path, "wb") as f:
        pickle.dump(rows, f, protocol=pickle.HIGHEST_PROTOCOL)
    return rows


def _rows(table: str, rounds: str, train_names: set[str], val_names: set[str], root: str):
    ents = list(entries(table))
    bad = [e["name"] for e in ents if e["name"] not in train_names | val_names]
    if bad:
        raise SystemExit(f"the table holds modules outside training and validation: {bad[:3]}")
    tab = fx.effect_examples(fx.flips_of_table(ents, ("train",)))
    rnd = _round_rows(rounds, train_names, root)
    val = fx.effect_examples(fx.flips_of_table(ents, ("validation",))) if any(
        e["split"] == "validation" and e["flips"] for e in ents) else None
    return tab, rnd, val


def _train(name: str, m: dict, rows, out: str, slot: str, val_rows) -> dict:
    from mlgo_host.learning.imitate import train_imitation

    if os.path.exists(os.path.join(out, "metadata.json")):  # trained before: how it fits, from the saved weights
        from mlgo_host.policies.saved import read_saved_policy

        actor = read_saved_policy(out).actor
        if m["kind"] == "imitation":
            ex = rows.as_imitation()
            acc = float(np.sum((actor.greedy(ex.records) == ex.labels) * ex.weights) / np.sum(ex.weights))
            return {"cached": True, "weighted_accuracy": acc}
        return {"cached": True, **fx.fit_report(actor, rows)}
    t0 = time.monotonic()
    if m["kind"] == "imitation":
        ex = rows.as_imitation()
        if m.get("weighting") == "none":
            ex.weights = np.ones_like(ex.weights)
        fit = train_imitation(ex, out, default_slot=slot, fc_layer_params=m["fc"], saved_model=False,
                              extra={"data": "effect table + search rounds"})
    else:
        fit = fx.train_effect_model(rows, out, default_slot=slot, loss=m["loss"], fc_layer_params=m["fc"],
                                    weighting=m.get("weighting", "bytes"))
        if val_rows is not None:
            from mlgo_host.policies.saved import read_saved_policy

            fit["validation_table"] = fx.fit_report(read_saved_policy(out).actor, val_rows)
    fit["train_s"] = round(time.monotonic() - t0, 1)
    return fit


def _thresholds(m: dict) -> list[tuple[str, float]]:
    return [("gate", g) for g in IMITATION_GATES] if m["kind"] == "imitation" else [("tau", t) for t in TAUS]


def _gated(src: str, dst: str, kind: str, thr: float) -> str:
    from mlgo_host.policies.saved import set_gate

    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    if kind == "gate":
        set_gate(dst, thr, chosen_on="validation")
    else:
        fx.set_tau(dst, thr, chosen_on="validation")
    return dst


def _val_figures(rep) -> dict:
    ok = [r for r in rep.rows if r.ok]
    b = sum(r.baseline_text for r in ok)
    p = sum(r.policy_text for r in ok)
    worst = max((100.0 * (r.policy_text - r.baseline_text) / max(r.baseline_text, 1) for r in ok), default=0.0)
    return {"modules": len(ok), "failed": len(rep.rows) - len(ok), "oz_text": b, "policy_text": p,
            "change_pct": round(100.0 * (p - b) / b, 4), "worst_module_pct": round(worst, 3),
            "bigger_1pct": sum(r.policy_text > 1.01 * r.baseline_text for r in ok)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", required=True)
    ap.add_argument("--rounds", required=True, help="a search run's search/ directory (round-N.pkl)")
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--external", default=None)
    ap.add_argument("--root", default="effect_models_out")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--final", action="store_true", help="measure the chosen one on held-out and external")
    ap.add_argument("--output", default=os.path.join(HERE, "results", "effect_models.json"))
    args = ap.parse_args()
    from mlgo_host.channel.default_probe import default_slot
    from mlgo_host.evaluation.evaluate import evaluate

    root = os.path.abspath(args.root)
    os.makedirs(root, exist_ok=True)
    cache = os.path.join(root, "evals.json")
    evals = json.load(open(cache)) if os.path.exists(cache) else {}
    corpus = load_corpus(args.corpus)
    train, val, _ = split_three(corpus.modules, 0.2, 0.2, 0)
    tab, rnd, val_rows = _rows(args.table, args.rounds, {m.name for m in train}, {m.name for m in val}, root)
    rows = tab + rnd
    slot = default_slot("clang-19", 300.0)
    report = {"data": {"table_train_rows": len(tab), "round_rows": len(rnd), "rows": len(rows),
                       "validation_table_rows": len(val_rows) if val_rows is not None else 0},
              "methods": {}}
    baselines = os.path.join(root, "baselines")
    for name in args.methods.split(","):
        m = METHODS[name]
        pdir = os.path.join(root, name)
        fit = _train(name, m, rows, pdir, slot, val_rows)
        report["methods"][name] = {"fit": fit, "validation": {}}
        for kind, thr in _thresholds(m):
            key = f"{name}@{kind}={thr:g}"
            if key not in evals:
                t0 = time.monotonic()
                gated = _gated(pdir, os.path.join(root, "gated", key.replace("=", "_")), kind, thr)
                rep = evaluate(args.corpus, gated, selected=val, jobs=args.workers, cache_dir=baselines,
                               progress=False)
                evals[key] = dict(_val_figures(rep), eval_s=round(time.monotonic() - t0, 1))
                with open(cache, "w") as f:
                    json.dump(evals, f, indent=1)
            report["methods"][name]["validation"][f"{kind}={thr:g}"] = evals[key]
            print(key, evals[key], flush=True)
    ok = [(v["change_pct"], k) for k, v in evals.items()
          if not k.startswith("final:") and v["worst_module_pct"] <= 1.0 and v["failed"] == 0 and k.split("@")[0] in args.methods.split(",")]
    chosen = min(ok)[1] if ok else None
    report["chosen"] = chosen
    if args.final and chosen:
        if f"final:{chosen}" not in evals:
            evals[f"final:{chosen}"] = _final(args, root, chosen, evaluate)
            with open(cache, "w") as f:
                json.dump(evals, f, indent=1)
        report["chosen_figures"] = evals[f"final:{chosen}"]
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    print("chosen on validation:", chosen)
    return 0


def _final(args, root: str, chosen: str, evaluate) -> dict:
    """The chosen policy on the held-out split and the external corpus, per project (reported only)."""
    from pretrain import _figures

    path = os.path.join(root, "gated", chosen.replace("=", "_"))
    out = {"policy": chosen}
    held = evaluate(args.corpus, path, split="heldout", heldout_fraction=0.2, jobs=args.workers, seed=0,
                    cache_dir=os.path.join(root, "baselines"), progress=False)
    out["heldout"] = _figures(held)
    if args.external:
        ext = evaluate(args.external, path, jobs=args.workers, seed=0, cache_dir=os.path.join(root, "baselines"),
                       progress=False)
        out["external"] = _figures(ext)
    return out


if __name__ == "__main__":
    sys.exit(main())
