"""How PPO chooses ``saved_policy``, side by side on the same runs.

For each seed (the seed also chooses which projects validate and which are held out), a short
``ppo.gin`` run with no warm start, and one from behavioural cloning (``bc.gin`` first, same seed),
each evaluating its greedy policy on validation every ``--eval-every`` iterations.  Two rules then
pick from the same evaluated policies:

* first, then best: the first evaluated policy (or the warm start), then any with a smaller or equal
  validation total, whatever its worst module;
* the rule (``ppo.gin``'s defaults): no validation module more than 1 % bigger than under -Oz, and a
  significant saving of at least 0.1 % against the warm start, else against -Oz's decisions; when
  nothing meets it, -Oz's decisions (the last policy gated at 1.0).

What each picks is compiled over the run's held-out projects, unguarded, against -Oz.  Writes
``bench/results/ppo_rule.json`` (``--output``) and prints one line per run and rule.

usage: .venv/bin/python bench/ppo_rule.py --corpus demo_out/corpus --workdir runs/ppo_rule --seeds 0 1 2 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from mlgo_host.fsutil import atomic_write_json  # noqa: E402

CONFIGS = os.path.join(os.path.dirname(HERE), "configs", "inlining")
HELDOUT_FRACTION = 0.3  # as make demo splits its seven projects


def train(root: str, corpus: str, gin: str, bindings: list[str]) -> None:
    """``mlgo-host train`` (resumes a finished or stopped run)."""
    subprocess.run([sys.executable, "-m", "mlgo_host", "train", "--root_dir", root, "--corpus", corpus,
                    "--gin_files", os.path.join(CONFIGS, gin), "--gin_bindings", *bindings, "--no_progress"],
                   check=True)


def first_then_best(state: dict) -> int | None:
    """The iteration the rule without limits picks: the warm start or the first evaluated policy, then
    the last with the smallest validation total."""
    start = state.get("warmstart_validation")
    best = (0, start["size_change_pct"]) if start else None
    for row in state["history"]:
        pct = row.get("validation_size_change_pct")
        if pct is not None and (best is None or pct <= best[1]):
            best = (row["iteration"], pct)
    return None if best is None else best[0]


def heldout_row(corpus: str, policy: str, held, jobs: int) -> dict:
    """``policy`` (greedy) on the held-out modules against -Oz, unguarded."""
    from mlgo_host.evaluation.evaluate import evaluate

    rep = evaluate(corpus, policy, selected=held, jobs=jobs, progress=False)
    ok = [r for r in rep.rows if r.ok]
    growth = {r.module: 100.0 * (r.policy_text - r.baseline_text) / max(r.baseline_text, 1) for r in ok}
    worst = max(growth, key=growth.get, default=None)
    worst = worst if worst is not None and growth[worst] > 0 else None  # no module grew
    s = rep.summary()
    return {"size_change_pct": round(s.change_percent or 0.0, 4), "modules": s.modules, "ok": s.ok,
            "smaller": s.smaller, "bigger": s.bigger, "over_1pct": sum(g > 1.0 for g in growth.values()),
            "worst_module": worst, "worst_pct": round(growth[worst], 3) if worst else 0.0}


def measure_run(root: str, corpus: str, seed: int, jobs: int) -> dict:
    """Both rules' picks of a finished run and their held-out figures."""
    from mlgo_host.corpus.corpus import load_corpus, split_three

    with open(os.path.join(root, "state.json")) as f:
        state = json.load(f)
    _, val, held = split_three(load_corpus(corpus).modules, HELDOUT_FRACTION, 0.2, seed, "project")
    rows = {r["iteration"]: r for r in state["history"]}
    start = state.get("warmstart_validation")
    picks = {"first, then best": first_then_best(state), "the rule": (state.get("best") or {}).get("iteration")}
    out = {"validation_projects": sorted({m.name.split("/")[0] for m in val}),
           "heldout_projects": sorted({m.name.split("/")[0] for m in held}),
           "curve": [{k: r.get(k) for k in ("iteration", "validation_size_change_pct", "validation_worst_pct",
                                            "heldout_size_change_pct")} for r in state["history"]
                     if "validation_size_change_pct" in r],
           "warm_start_validation": None if start is None else {
               "size_change_pct": start["size_change_pct"],
               "worst_pct": max(0.0, (start.get("worst_module") or {}).get("change_pct", 0.0))},
           "rules": {}}
    for rule, it in picks.items():
        if it is None:  # the rule kept -Oz's decisions: saved_policy is gated at 1.0
            policy, val_pct, val_worst = os.path.join(root, "saved_policy"), 0.0, 0.0
        elif it == 0:
            policy, val_pct = os.path.join(root, "policy", "0"), start["size_change_pct"]
            val_worst = out["warm_start_validation"]["worst_pct"]
        else:
            policy = os.path.join(root, "policy", str(it))
            val_pct, val_worst = rows[it]["validation_size_change_pct"], rows[it].get("validation_worst_pct")
        out["rules"][rule] = {"iteration": it, "validation_pct": val_pct, "validation_worst_pct": val_worst,
                              "heldout": heldout_row(corpus, policy, held, jobs)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--workdir", required=True, help="the training runs (kept; a finished run is reused)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--modules-per-iteration", type=int, default=32)
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--output", default=os.path.join(HERE, "results", "ppo_rule.json"))
    args = ap.parse_args()

    corpus = os.path.abspath(args.corpus)
    runs = []
    for seed in args.seeds:
        common = [f"num_workers={args.jobs}", f"heldout_fraction={HELDOUT_FRACTION}", f"seed={seed}"]
        ppo = [f"num_iterations={args.iterations}", f"modules_per_iteration={args.modules_per_iteration}",
               f"eval_every={args.eval_every}"]
        bc_root = os.path.join(args.workdir, f"s{seed}-bc")
        for start in ("none", "bc"):
            root = os.path.join(args.workdir, f"s{seed}-ppo-{start}")
            warm = []
            if start == "bc":
                train(bc_root, corpus, "bc.gin", common)
                warm = [f"warmstart_policy='{os.path.abspath(os.path.join(bc_root, 'saved_policy'))}'"]
            train(root, corpus, "ppo.gin", common + ppo + warm)
            run = {"seed": seed, "warm_start": start, **measure_run(root, corpus, seed, args.jobs)}
            runs.append(run)
            for rule, r in run["rules"].items():
                h = r["heldout"]
                print(f"seed {seed}, warm start {start}, {rule}: iteration {r['iteration']}, validation "
                      f"{r['validation_pct']:+.3f}% (worst {r['validation_worst_pct']}), held-out "
                      f"{h['size_change_pct']:+.3f}%, {h['over_1pct']} files > 1 %, worst {h['worst_pct']:+.2f}% "
                      f"({h['worst_module']})", flush=True)
            atomic_write_json(args.output, {"corpus": os.path.basename(corpus.rstrip("/")), "iterations":
                                            args.iterations, "modules_per_iteration": args.modules_per_iteration,
                                            "eval_every": args.eval_every, "runs": runs})
    print(f"wrote {os.path.relpath(args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
