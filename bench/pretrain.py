"""Rebuild the policy that ships in the package (``--policy pretrained-oz``)
from scratch with its recorded recipe, and measure it.

1. the training corpus (``corpus benchmark --sources training``: 33 projects,
   1,017 modules) and the external corpus (``--sources external``: projects
   no training list contains, for reporting only);
2. search, then imitate (``configs/inlining/search.gin``, batched search)
   on the training split for ``--minutes``: everything it chooses (the
   round, the gate) is chosen on the validation split;
3. the saved policy against ``-Oz`` on the held-out split and on the
   external corpus, per project (reported only: nothing is chosen there);
4. installed into ``mlgo_host/data/policies/pretrained-oz/`` (numpy weights,
   metadata with compiler and feature meanings, vocab) with ``recipe.json``
   (this recipe and the figures).  The installed policy's C part, inlining
   bound and gate, chosen apart on validation projects (docs/results.md),
   are kept.

Resumable: every step keeps its output under ``--root`` and a second run
continues the training where it stopped (``make pretrain`` runs it).

usage: .venv/bin/python bench/pretrain.py [--root pretrain_out] [--minutes 25] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
INSTALL = os.path.join(REPO, "mlgo_host", "data", "policies", "pretrained-oz")
#: the files of a saved policy the package ships (no SavedModel: numpy runs it)
SHIPPED_FILES = ("actor.npz", "metadata.json", "vocab")


def _mlgo(args: list[str]) -> None:
    print("$ mlgo-host " + " ".join(args), file=sys.stderr, flush=True)
    rc = subprocess.run([sys.executable, "-m", "mlgo_host", *args]).returncode
    if rc != 0:
        raise SystemExit(f"pretrain: step failed (exit {rc}): mlgo-host {' '.join(args)}")


def _corpus(root: str, sources: str, workers: int) -> str:
    out = os.path.join(root, f"{sources}_corpus")
    if not os.path.exists(os.path.join(out, "corpus_description.json")):
        _mlgo(["corpus", "benchmark", "--sources", sources, "--output", out, "--jobs", str(workers)])
    return out


def _figures(rep) -> dict:
    from mlgo_host.evaluation.evaluate import by_project

    s = rep.summary().as_dict()
    worst = max((100.0 * (r.policy_text - r.baseline_text) / max(r.baseline_text, 1) for r in rep.rows if r.ok),
                default=0.0)
    return {"modules": s["modules"], "oz_text": s["baseline_total"], "policy_text": s["policy_total"],
            "change_pct": round(s["change_percent"], 3), "smaller": s["smaller"], "bigger": s["bigger"],
            "worst_module_pct": round(worst, 3), "per_project": by_project(rep.rows)}


def _earlier_minutes(root: str):
    try:
        with open(os.path.join(root, "recipe.json")) as f:
            return json.load(f).get("minutes")
    except (OSError, ValueError):
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default="pretrain_out", help="where everything goes (default: pretrain_out)")
    ap.add_argument("--minutes", type=float, default=25.0, help="training time budget (default: 25)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--compiles-per-round", type=int, default=3000)
    ap.add_argument("--no-install", action="store_true", help="measure, but do not replace the shipped policy")
    ap.add_argument("--measure-only", action="store_true",
                    help="no training: measure the run's saved policy again (e.g. after a change to the channel) "
                         "and write the recipe's figures")
    args = ap.parse_args()
    t0 = time.monotonic()
    root = os.path.abspath(args.root)
    os.makedirs(root, exist_ok=True)
    train_corpus = _corpus(root, "training", args.workers)
    external = _corpus(root, "external", args.workers)
    # the shipped policy's recipe splits file by file (the training corpus's
    # validation and held-out files share projects with its training files)
    bindings = [f"num_workers={args.workers}", f"time_budget_minutes={args.minutes}",
                f"compiles_per_round={args.compiles_per_round}", "seed=0", "split_by='module'",
                # the network's recipe: rounds without bounds, any validation saving (the installed
                # bounds and gate are put on the network after training, below)
                "search_loop.train_search.min_validation_gain_pct=0.0",
                "search_loop.train_search.extra_inlining_max_users=None",
                "search_loop.train_search.extra_inlining_min_functions=None"]
    run_dir = os.path.join(root, "search")
    if not args.measure_only:
        _mlgo(["train", "--root_dir", run_dir, "--corpus", train_corpus,
               "--gin_files", os.path.join(REPO, "configs", "inlining", "search.gin"), "--gin_bindings", *bindings])
    policy = os.path.join(run_dir, "saved_policy")

    from mlgo_host.evaluation.evaluate import evaluate

    held = evaluate(train_corpus, policy, split="heldout", heldout_fraction=0.2, split_by="module", jobs=args.workers,
                    seed=0)
    ext = evaluate(external, policy, jobs=args.workers, seed=0)
    with open(os.path.join(run_dir, "state.json")) as f:
        state = json.load(f)
    recipe = {
        "command": "bench/pretrain.py (make pretrain)",
        "training_corpus": "corpus benchmark --sources training (mlgo_host/data/training_sources.json)",
        "config": "configs/inlining/search.gin", "gin_bindings": bindings,
        "rounds": state.get("round"), "best_round": state.get("best_round"),
        "best_validation_pct": state.get("best_val"),
        "heldout": _figures(held), "external": _figures(ext),
        "minutes": round((time.monotonic() - t0) / 60.0, 1),
    }
    if args.measure_only:  # the training's minutes are the earlier run's
        recipe["minutes"] = _earlier_minutes(root)
        recipe["measured_again"] = "bench/pretrain.py --measure-only"
    with open(os.path.join(root, "recipe.json"), "w") as f:
        json.dump(recipe, f, indent=1)
    if not args.no_install:
        from mlgo_host.policies.bounds import bound_of, set_inlining_bound
        from mlgo_host.policies.saved import (language_parts, read_metadata, say_no_saved_model, set_gate,
                                              set_language_part)

        # the parts per language are made apart (bench/outline_model.py), the inlining bound and the gate
        # chosen apart on validation projects (docs/results.md): a new network keeps them
        parts = {lang: p.model for lang, p in language_parts(INSTALL).items()} if os.path.isdir(INSTALL) else {}
        installed = read_metadata(INSTALL) if os.path.isdir(INSTALL) else {}
        bound, gate = bound_of(installed), installed.get("gate")
        shutil.rmtree(INSTALL, ignore_errors=True)
        os.makedirs(INSTALL)
        for name in SHIPPED_FILES:
            src = os.path.join(policy, name)
            (shutil.copytree if os.path.isdir(src) else shutil.copy2)(src, os.path.join(INSTALL, name))
        say_no_saved_model(INSTALL)  # its metadata names only files it ships
        for lang, model in parts.items():
            model_file = os.path.join(root, f"{lang}_outline.json")
            model.save(model_file)
            set_language_part(INSTALL, lang, model_file)
        if bound:
            set_inlining_bound(INSTALL, bound)
        if gate is not None:
            set_gate(INSTALL, gate.pop("threshold"), **gate)
        with open(os.path.join(INSTALL, "recipe.json"), "w") as f:
            json.dump(recipe, f, indent=1)
    for k in ("heldout", "external"):
        r = recipe[k]
        print(f"{k:>8}: {r['change_pct']:+.3f}% vs -Oz ({r['policy_text']} vs {r['oz_text']} bytes, {r['modules']} "
              f"modules, {r['smaller']} smaller, {r['bigger']} bigger, worst {r['worst_module_pct']:+.2f}%)")
    print(f"installed in {INSTALL}" if not args.no_install else "not installed (--no-install)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
