"""PPO warm-started from the shipped policy (``pretrained-oz``): does PPO add
anything on top of search-then-imitate, and does ``saved_policy`` keep the
warm start's gain when it does not?

1. the training and external corpora of ``bench/pretrain.py`` (built there
   when missing);
2. ``mlgo-host train`` with ``configs/inlining/ppo.gin`` and
   ``warmstart_policy='pretrained-oz'``: the warm start is evaluated on the
   validation split before any update and is ``saved_policy`` until a PPO
   policy's validation saving over it is significant (a paired bootstrap over
   the validation modules; held-out is not evaluated in the loop: nothing may
   be chosen there);
3. ``saved_policy`` against ``-Oz`` on the held-out split and the external
   corpus, per project, with bench/pretrain.py's evaluation, next to the
   shipped policy's own figures (its ``recipe.json``);
4. ``bench/results/ppo_warmstart.json``.

Resumable: a second run continues the training where it stopped.

usage: .venv/bin/python bench/ppo_warmstart.py [--root pretrain_out] [--iterations 20] [--eval-every 1] [--workers 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from pretrain import INSTALL, _corpus, _figures, _mlgo  # noqa: E402  (bench/pretrain.py)

RESULT = os.path.join(HERE, "results", "ppo_warmstart.json")


def _seed_baselines(src: str | None, dest: str) -> None:
    """Copy a cache of -Oz sizes (keyed by module, compiler and advisor, so
    any run's is valid here) into the run's, sparing the default compiles."""
    if src and os.path.isdir(src) and not os.path.isdir(dest):
        shutil.copytree(src, dest)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default="pretrain_out", help="where the corpora are or go (default: pretrain_out)")
    ap.add_argument("--run-dir", default=None, help="the PPO run's root_dir (default: ROOT/ppo_warmstart)")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--modules-per-iteration", type=int, default=64)
    ap.add_argument("--eval-every", type=int, default=1, help="validation every N iterations (and the last)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--binding", action="append", default=[], help="extra --gin_bindings for the run")
    ap.add_argument("--output", default=RESULT)
    args = ap.parse_args()
    t0 = time.monotonic()
    root = os.path.abspath(args.root)
    train_corpus = _corpus(root, "training", args.workers)
    external = _corpus(root, "external", args.workers)
    run_dir = os.path.abspath(args.run_dir or os.path.join(root, "ppo_warmstart"))
    os.makedirs(run_dir, exist_ok=True)
    _seed_baselines(os.path.join(root, "search", "baselines"), os.path.join(run_dir, "baselines"))
    bindings = ["warmstart_policy='pretrained-oz'", f"num_workers={args.workers}",
                f"num_iterations={args.iterations}", f"modules_per_iteration={args.modules_per_iteration}",
                f"eval_every={args.eval_every}", "train.report_heldout=False", "seed=0",
                # the split of the shipped policy's recipe (bench/pretrain.py), whose figures are compared
                "split_by='module'", *args.binding]
    _mlgo(["train", "--root_dir", run_dir, "--corpus", train_corpus,
           "--gin_files", os.path.join(REPO, "configs", "inlining", "ppo.gin"), "--gin_bindings", *bindings])
    t_train = time.monotonic() - t0
    with open(os.path.join(run_dir, "state.json")) as f:
        state = json.load(f)
    policy = os.path.join(run_dir, "saved_policy")

    from mlgo_host.evaluation.evaluate import evaluate

    held = evaluate(train_corpus, policy, split="heldout", heldout_fraction=0.2, split_by="module", jobs=args.workers,
                    seed=0)
    ext = evaluate(external, policy, jobs=args.workers, seed=0)
    with open(os.path.join(INSTALL, "recipe.json")) as f:
        shipped = json.load(f)
    start = state.get("warmstart_validation") or {}
    result = {
        # (no paths: the file is committed)
        "command": (f"bench/ppo_warmstart.py --iterations {args.iterations} --modules-per-iteration "
                    f"{args.modules_per_iteration} --eval-every {args.eval_every} --workers {args.workers}"
                    + "".join(f" --binding {b}" for b in args.binding)),
        "config": "configs/inlining/ppo.gin", "gin_bindings": bindings,
        "validation": {
            "modules": start.get("modules"),
            "warmstart_pct": start.get("size_change_pct"),
            "per_iteration": [{"iteration": h["iteration"], "size_change_pct": h["validation_size_change_pct"],
                               "bigger": h.get("validation_bigger")}
                              for h in state["history"] if "validation_size_change_pct" in h],
        },
        "training": [{k: h.get(k) for k in ("iteration", "reward_mean", "decisions", "entropy", "kl", "collect_s",
                                            "train_s")} for h in state["history"]],
        "saved_policy": state.get("best"),
        "heldout": _figures(held), "external": _figures(ext),
        "pretrained_oz": {"heldout_pct": shipped["heldout"]["change_pct"],
                          "external_pct": shipped["external"]["change_pct"],
                          "validation_pct": shipped.get("best_validation_pct")},
        "minutes": {"train": round(t_train / 60.0, 1), "total": round((time.monotonic() - t0) / 60.0, 1)},
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(result, f, indent=1)
    best = result["saved_policy"]
    print("saved_policy: -Oz's decisions (no policy met the rule on validation)" if best is None else
          f"saved_policy: iteration {best['iteration']} (0 = the warm start), validation "
          f"{best['size_change_pct']:+.3f}% vs -Oz")
    for k, ref in (("heldout", "heldout_pct"), ("external", "external_pct")):
        r = result[k]
        print(f"{k:>8}: {r['change_pct']:+.3f}% vs -Oz ({r['policy_text']} vs {r['oz_text']} bytes, {r['modules']} "
              f"modules); pretrained-oz {result['pretrained_oz'][ref]:+.3f}%")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
