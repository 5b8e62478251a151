"""The full quality run of search-then-imitate training (the goal: a policy
that beats -Oz on code it was not trained on).

1. ``mlgo-host train`` with ``configs/inlining/search.gin`` on the benchmark
   corpus, ``--minutes`` of budget (60), ``--workers`` (2);
2. the saved policy (best round by validation, gate included) on the
   held-out split and, with ``--external CORPUS``, on every module of a
   corpus of other projects: total .text vs -Oz, modules more than 1 %
   bigger, and the guard (the smaller of the policy's and -Oz's object per
   module);
3. JSON (bench/results/quality.json) with the per-round history (search
   headroom on train, the policy on train / validation / held-out, flips,
   compiles per minute) and a learning-curve PNG (bench/results/quality.png).

usage: .venv/bin/python bench/quality.py --corpus BENCH_CORPUS [--minutes 60] [--workers 2]
       [--root DIR] [--external CORPUS] [--gin_bindings B ...]
       .venv/bin/python bench/quality.py --policy pretrained-oz --corpus TRAINING_CORPUS --external CORPUS
       (no training: the shipped policy, made by its own recipe, bench/pretrain.py)
A second run with the same --root resumes the training run (and only
re-evaluates when it is already complete).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from mlgo_host.fsutil import atomic_write_json  # noqa: E402


def train(root: str, corpus: str, minutes: float, workers: int, bindings: list[str]) -> float:
    cmd = [sys.executable, "-m", "mlgo_host", "train", "--root_dir", root, "--corpus", corpus,
           "--gin_files", os.path.join(REPO, "configs", "inlining", "search.gin"),
           "--gin_bindings", f"time_budget_minutes={minutes}", f"num_workers={workers}", *bindings]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    t0 = time.monotonic()
    rc = subprocess.run(cmd, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}).returncode
    if rc != 0:
        raise SystemExit(f"quality: training failed (exit {rc})")
    return time.monotonic() - t0


def evaluate_rows(corpus: str, policy: str, split: str, jobs: int) -> dict:
    """The policy and the guard (min of policy and -Oz per module) on a split."""
    from mlgo_host.evaluation.evaluate import by_project, evaluate

    rep = evaluate(corpus, policy, split=split, heldout_fraction=0.2, jobs=jobs, seed=0)
    ok = [r for r in rep.rows if r.ok]
    base = sum(r.baseline_text for r in ok)
    pol = sum(r.policy_text for r in ok)
    guard = sum(min(r.policy_text, r.baseline_text) for r in ok)
    worst = max(ok, key=lambda r: (r.policy_text - r.baseline_text) / max(r.baseline_text, 1), default=None)
    return {
        "modules": len(rep.rows), "ok": len(ok), "default_total": base, "policy_total": pol,
        "policy_pct": 100.0 * (pol - base) / base if base else None,
        "guard_total": guard, "guard_pct": 100.0 * (guard - base) / base if base else None,
        "smaller": sum(r.policy_text < r.baseline_text for r in ok),
        "bigger": sum(r.policy_text > r.baseline_text for r in ok),
        "bigger_than_1pct": sum(r.policy_text > 1.01 * r.baseline_text for r in ok),
        "worst_module": None if worst is None else
        {"module": worst.module, "pct": 100.0 * (worst.policy_text - worst.baseline_text) / max(worst.baseline_text, 1)},
        "per_project": by_project(ok),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", required=True, help="the benchmark corpus (mlgo-host corpus benchmark --output ...)")
    p.add_argument("--minutes", type=float, default=60.0, help="training budget (time_budget_minutes)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--root", default=os.path.join(REPO, "out", "quality"), help="the training run's root_dir")
    p.add_argument("--external", default=None, help="a corpus of other projects to evaluate the final policy on")
    p.add_argument("--gin_bindings", nargs="+", action="extend", default=[])
    p.add_argument("--policy", default=None, help="no training: measure this policy (a shipped name such as "
                   "pretrained-oz, or a saved policy directory) on --corpus's held-out split and --external")
    p.add_argument("--output", default=os.path.join(HERE, "results", "quality.json"))
    p.add_argument("--plot", default=os.path.join(HERE, "results", "quality.png"))
    args = p.parse_args()

    load0 = os.getloadavg()
    if args.policy:
        return measure_only(args, load0)
    train_s = train(os.path.abspath(args.root), args.corpus, args.minutes, args.workers, args.gin_bindings)
    with open(os.path.join(args.root, "state.json")) as f:
        state = json.load(f)
    policy = os.path.join(args.root, "saved_policy")
    result = {
        "when": time.strftime("%Y-%m-%d %H:%M"), "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_average_start": [round(x, 2) for x in load0], "minutes_budget": args.minutes, "workers": args.workers,
        "train_wall_min": round(train_s / 60.0, 1), "rounds": state["round"], "best_round": state["best_round"],
        "history": state["history"],
        "heldout": evaluate_rows(args.corpus, policy, "heldout", args.workers),
    }
    if args.external:
        result["external"] = evaluate_rows(args.external, policy, "all", args.workers)
    result["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    from mlgo_host.evaluation.plots import plot_search

    plot_search(os.path.join(args.root, "state.json"), args.plot)
    atomic_write_json(args.output, result)
    last = state["history"][-1]
    print(f"rounds {state['round']} (best by validation: {state['best_round']}), "
          f"{result['train_wall_min']} min, {sum(x['compiles'] for x in state['history'])} compiles")
    print(f"search headroom on train: {last['headroom_pct']:+.3f}%")
    _print_rows(result)
    print(f"wrote {args.output} and {args.plot}")
    return 0


def measure_only(args, load0) -> int:
    """--policy: the policy's figures, no training (the shipped policy's own
    recipe, bench/pretrain.py, says how it was trained)."""
    from mlgo_host.shipped import resolve_policy

    policy = resolve_policy(args.policy)
    result = {"when": time.strftime("%Y-%m-%d %H:%M"), "machine": {"cpus": os.cpu_count(),
              "python": platform.python_version()}, "load_average_start": [round(x, 2) for x in load0],
              "policy": args.policy, "training": "none here: see the policy's recipe.json",
              "heldout": evaluate_rows(args.corpus, policy, "heldout", args.workers)}
    if args.external:
        result["external"] = evaluate_rows(args.external, policy, "all", args.workers)
    result["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    atomic_write_json(args.output, result)
    _print_rows(result)
    print(f"wrote {args.output}")
    return 0


def _print_rows(result: dict) -> None:
    for name in ("heldout", "external"):
        if name in result:
            r = result[name]
            print(f"{name}: policy {r['policy_pct']:+.3f}% vs -Oz over {r['ok']} modules "
                  f"({r['smaller']} smaller, {r['bigger']} bigger, {r['bigger_than_1pct']} > +1%); "
                  f"guard {r['guard_pct']:+.3f}%")


if __name__ == "__main__":
    sys.exit(main())
