"""Training benchmarks on the benchmark corpus.

1. Collection scaling: modules per minute of episode collection (what one
   training iteration spends waiting for) with 1 and 2 worker processes, on
   the same modules, with baselines already cached, the stochastic numpy
   policy of a saved policy (the BC warm start when there is one), rounds
   alternating between the two worker counts.  Goal: 2 workers >= 1.8x.
2. Quality (``--quality``): behavioural cloning, then N PPO iterations from
   it, split by project as ``make demo`` splits, then the greedy
   policies on the held-out split against clang's -Oz: total .text change,
   mean per-module reward, worst module; the held-out curve as a PNG.
   Goal: held-out total >= 1.5% smaller than -Oz, no module > 1% larger.

usage: .venv/bin/python bench/train.py [--workdir DIR] [--quality] [--iterations N]
Prints the figures and writes bench/results/train.json (and
bench/results/train_heldout.png with --quality).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from mlgo_host.fsutil import atomic_write_json  # noqa: E402

FACTORY = "mlgo_host.workers.worker:CollectWorker"


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def collection_scaling(corpus_dir: str, policy: str, modules: int, rounds: int, cache: str) -> dict:
    from mlgo_host.corpus.corpus import load_corpus
    from mlgo_host.workers.pool import WorkerPool
    from mlgo_host.workers.worker import policy_blob_from_dir

    corpus = load_corpus(corpus_dir)
    train_mods, _ = corpus.split(0.2, seed=0, by="module")  # the split its recorded figures used
    mods = corpus.sampler(train_mods, seed=1).take(modules)
    blob = policy_blob_from_dir(policy) if os.path.isdir(policy) else {"heuristic": policy}
    kw = {"baseline_cache": cache}
    tasks = [(m.to_task(), 1000 + i, False, True) for i, m in enumerate(mods)]
    out: dict[int, list[float]] = {1: [], 2: []}
    decisions = 0
    pools = {n: WorkerPool(n, FACTORY, kw) for n in (1, 2)}
    try:
        for p in pools.values():
            p.broadcast("set_policy", blob)
        # warm-up: the default-heuristic baselines into the cache, imports, page cache
        warm = pools[2].map_unordered("collect", tasks)
        failed = [o for o in warm if not o.ok or o.value["status"] != "ok"]
        decisions = sum(o.value["observations"] for o in warm if o.ok and o.value)
        for r in range(rounds):
            for n in ((1, 2) if r % 2 == 0 else (2, 1)):
                t0 = time.perf_counter()
                res = pools[n].map_unordered("collect", tasks)
                dt = time.perf_counter() - t0
                assert all(o.ok for o in res), [o.error for o in res if not o.ok]
                out[n].append(60.0 * len(tasks) / dt)
                print(f"round {r + 1}: {n} worker(s): {out[n][-1]:.1f} modules/min ({dt:.1f} s), "
                      f"load {loadavg()}", flush=True)
    finally:
        for p in pools.values():
            p.close()
    best = {n: max(v) for n, v in out.items()}
    med = {n: sorted(v)[len(v) // 2] for n, v in out.items()}
    return {
        "modules": len(tasks), "decisions_per_pass": decisions, "failed_in_warmup": len(failed),
        "policy": "stochastic numpy actor of " + os.path.basename(os.path.normpath(policy))
        if os.path.isdir(policy) else policy,
        "modules_per_minute": {str(n): [round(x, 1) for x in v] for n, v in out.items()},
        "median_modules_per_minute": {str(n): round(v, 1) for n, v in med.items()},
        "scaling_median": round(med[2] / med[1], 3), "scaling_best": round(best[2] / best[1], 3),
        "goal_scaling": 1.8,
    }


def quality(workdir: str, corpus_dir: str, iterations: int, modules_per_iteration: int, eval_every: int,
            png: str) -> dict:
    """Behavioural cloning, then PPO from it (``bc.gin``, ``ppo.gin``), split by project as ``make demo``
    splits; both greedy policies on the held-out projects against -Oz."""
    import subprocess

    from mlgo_host import demo
    from mlgo_host.evaluation.plots import plot_training

    t0 = time.perf_counter()
    configs = os.path.join(os.path.dirname(HERE), "configs", "inlining")
    common = ["num_workers=2", f"heldout_fraction={demo.HELDOUT_FRACTION}"]
    ppo_bindings = [f"warmstart_policy='{os.path.join(workdir, 'bc', 'saved_policy')}'",
                    f"num_iterations={iterations}", f"modules_per_iteration={modules_per_iteration}",
                    f"eval_every={eval_every}"]
    for run, gin, extra in (("bc", "bc.gin", []), ("ppo", "ppo.gin", ppo_bindings)):
        subprocess.run([sys.executable, "-m", "mlgo_host", "train", "--root_dir", os.path.join(workdir, run),
                        "--corpus", corpus_dir, "--gin_files", os.path.join(configs, gin),
                        "--gin_bindings", *common, *extra], check=True)
    policies = {"behavioural cloning": os.path.join(workdir, "bc", "saved_policy"),
                "PPO": os.path.join(workdir, "ppo", "saved_policy")}
    res = {"table": demo.heldout_table(corpus_dir, policies, workdir, jobs=2),
           "timings_s": {"all": round(time.perf_counter() - t0, 1)}}
    with open(os.path.join(workdir, "ppo", "state.json")) as f:
        history = json.load(f)["history"]
    plot_training(os.path.join(workdir, "ppo", "state.json"), png,
                  title=f"PPO from BC, {modules_per_iteration} modules/iteration: held-out .text vs -Oz")
    rows = {r["policy"]: r for r in res["table"]["rows"]}
    ppo = rows["PPO"]
    return {
        "iterations": iterations, "modules_per_iteration": modules_per_iteration,
        # this invocation (a resumed run only evaluates) and the PPO run's own time
        "wall_s": round(time.perf_counter() - t0, 1), "timings_s": res["timings_s"],
        "ppo_seconds": round(sum(h.get("collect_s", 0) + h.get("train_s", 0) + h.get("save_s", 0)
                                 for h in history), 1),
        "heldout": {k: {"change_percent": v["change_percent"], "policy_total": v["policy_total"],
                        "baseline_total": v["baseline_total"], "mean_reward": v["mean_reward"],
                        "smaller": v["smaller"], "equal": v["equal"], "bigger": v["bigger"],
                        "worst_module": v["worst_module"], "modules": v["ok"]} for k, v in rows.items()},
        "curve": [{"iteration": h["iteration"], "heldout_size_change_pct": h.get("heldout_size_change_pct"),
                   "reward_mean": h.get("reward_mean"), "entropy": h.get("entropy")} for h in history],
        "goal": {"heldout_change_percent_at_most": -1.5, "worst_module_change_percent_at_most": 1.0},
        "goal_met": bool(ppo["change_percent"] is not None and ppo["change_percent"] <= -1.5
                         and ppo["worst_module"] and ppo["worst_module"]["change_percent"] <= 1.0),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=None, help="corpus (default: the benchmark corpus in the user cache)")
    ap.add_argument("--workdir", default=None, help="keep the training runs here (default: a temp dir)")
    ap.add_argument("--policy", default=None,
                    help="saved policy for the scaling run (default: WORKDIR/bc/saved_policy when it exists, "
                         "else the random heuristic)")
    ap.add_argument("--modules", type=int, default=48, help="modules per collection pass (default: 48)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per worker count (default: 3)")
    ap.add_argument("--quality", action="store_true", help="also run the quality budget (minutes to an hour)")
    ap.add_argument("--iterations", type=int, default=30, help="PPO iterations of the quality run")
    ap.add_argument("--modules-per-iteration", type=int, default=32)
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "train.json"))
    args = ap.parse_args()

    from mlgo_host.corpus.benchmark import build_benchmark, default_cache_dir

    corpus_dir = args.corpus
    if corpus_dir is None:
        corpus_dir = str(default_cache_dir() / "corpus")
        build_benchmark(corpus_dir, jobs=2, progress=True)
    workdir = args.workdir or tempfile.mkdtemp(prefix="mlgo-bench-train-")
    result: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                    "loadavg_start": loadavg()}
    if os.path.exists(args.out):  # keep the part not re-run
        with open(args.out) as f:
            old = json.load(f)
        for k in ("quality",):
            if k in old:
                result[k] = old[k]
    if args.quality:
        png = os.path.join(os.path.dirname(os.path.abspath(args.out)), "train_heldout.png")
        result["quality"] = q = quality(workdir, corpus_dir, args.iterations, args.modules_per_iteration,
                                        args.eval_every, png)
        q["loadavg_end"] = loadavg()
        ppo = q["heldout"]["PPO"]
        print(f"quality: PPO held-out .text {ppo['change_percent']:+.3f}% vs -Oz over {ppo['modules']} modules, "
              f"mean reward {ppo['mean_reward']:+.5f}, worst {ppo['worst_module']}, goal met: {q['goal_met']}")
    policy = args.policy or (os.path.join(workdir, "bc", "saved_policy")
                             if os.path.isdir(os.path.join(workdir, "bc", "saved_policy")) else "random")
    cache = tempfile.mkdtemp(prefix="mlgo-bench-baselines-")
    try:
        result["collection"] = c = collection_scaling(corpus_dir, policy, args.modules, args.rounds, cache)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    result["loadavg_end"] = loadavg()
    m = c["median_modules_per_minute"]
    print(f"collection ({c['policy']}, {c['modules']} modules, {c['decisions_per_pass']} decisions per pass): "
          f"1 worker {m['1']} modules/min, 2 workers {m['2']} modules/min, scaling {c['scaling_median']}x "
          f"(median; best {c['scaling_best']}x; goal {c['goal_scaling']}x)")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    atomic_write_json(args.out, result)
    print(f"wrote {os.path.relpath(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
