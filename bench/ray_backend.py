"""Modules per minute with the Ray backend vs the local backend (same machine).

Both pools run the same CollectWorker (default policy, greedy, episodes
recorded as in training) on the same modules with the same number of
workers; the baselines are cached by a warm-up pass first, so each timed
pass does the same work: one interactive compile + llvm-size per module.
Passes alternate (local, ray, local, ray, ...) and the median is reported;
pool start-up is measured separately.

    .venv/bin/python bench/ray_backend.py                  # synthetic corpus (generated C, clang-19)
    .venv/bin/python bench/ray_backend.py --corpus DIR     # an mlgo-utils corpus
    .venv/bin/python bench/ray_backend.py --workers 2 --repeats 3 --ray-address auto

Prints a summary and writes bench/results/ray.json (atomically).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FACTORY = "mlgo_host.workers.worker:CollectWorker"


def synthetic_corpus(root: str, modules: int, clang: str):
    """``modules`` generated C files of 10 to ~200 functions, built into a corpus."""
    from mlgo_host.corpus.synth import caller_module
    from mlgo_host.corpus.corpus import load_corpus
    from mlgo_host.corpus.build import build_corpus, load_compile_commands, write_compile_commands

    src = os.path.join(root, "src")
    os.makedirs(src, exist_ok=True)
    entries = []
    for k in range(modules):
        n = 10 + (k * 37) % 190
        name = f"m{k:03d}"
        with open(os.path.join(src, name + ".c"), "w") as f:
            f.write(caller_module(n, k))
        entries.append({"directory": src, "file": os.path.join(src, name + ".c"),
                        "arguments": [clang, "-Oz", "-c", name + ".c", "-o", name + ".o"]})
    write_compile_commands(os.path.join(src, "compile_commands.json"), entries)
    build_corpus(load_compile_commands(os.path.join(src, "compile_commands.json")), os.path.join(root, "corpus"),
                 clang=clang, progress=False)
    return load_corpus(os.path.join(root, "corpus"))


def timed_pass(pool, tasks) -> tuple[float, int, int]:
    t0 = time.monotonic()
    out = pool.map_unordered("collect", tasks)
    dt = time.monotonic() - t0
    ok = [o for o in out if o.ok and o.value and o.value["status"] == "ok"]
    return dt, len(ok), sum(o.value["observations"] for o in ok)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", help="an mlgo-utils corpus directory (default: a generated one)")
    ap.add_argument("--modules", type=int, default=32, help="modules (generated, or the first N of --corpus)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="timed passes per backend (median reported)")
    ap.add_argument("--ray-address", default=None, help="an existing Ray cluster (default: a local instance)")
    ap.add_argument("--ship-bitcode", action="store_true", help="send module bytes with each task")
    ap.add_argument("--dispatch-tasks", type=int, default=400, help="no-op tasks timed for the dispatch cost")
    ap.add_argument("--clang", default="clang-19")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "ray.json"))
    args = ap.parse_args(argv)

    import ray

    from mlgo_host.fsutil import atomic_write_json
    from mlgo_host.corpus.corpus import load_corpus
    from mlgo_host.workers.pool import WorkerPool
    from mlgo_host.workers.ray_pool import RayPool

    with tempfile.TemporaryDirectory(prefix="mlgo-bench-ray-") as tmp:
        if args.corpus:
            corpus = load_corpus(args.corpus)
            corpus_name = os.path.basename(os.path.abspath(args.corpus))
        else:
            corpus = synthetic_corpus(tmp, args.modules, args.clang)
            corpus_name = f"synthetic ({args.modules} generated C modules, 10-199 functions)"
        mods = sorted(corpus.modules, key=lambda m: m.name)[:args.modules]
        tasks = [(m.to_task(ship_bitcode=args.ship_bitcode), 0, True, True) for m in mods]
        kwargs = {"clang": args.clang, "baseline_cache": os.path.join(tmp, "baselines")}

        t0 = time.monotonic()
        local = WorkerPool(args.workers, FACTORY, kwargs)
        local_start = time.monotonic() - t0
        local.broadcast("set_policy", {"heuristic": "default"})
        warm = local.map_unordered("collect", tasks)  # fills the baseline cache (not timed)
        failed = [o.error or o.value["reason"] for o in warm if not (o.ok and o.value["status"] == "ok")]
        if failed:
            print(f"warning: {len(failed)} modules fail: {failed[0]}", file=sys.stderr)

        t0 = time.monotonic()
        ray_init_s = 0.0
        if not ray.is_initialized():
            ray.init(address=args.ray_address, include_dashboard=False, log_to_driver=False,
                     **({} if args.ray_address else {"num_cpus": args.workers}))
            ray_init_s = time.monotonic() - t0
        t1 = time.monotonic()
        rpool = RayPool(args.workers, FACTORY, kwargs)
        ray_pool_start = time.monotonic() - t1
        t1 = time.monotonic()
        rpool.broadcast("set_policy", {"heuristic": "default"})
        ray_broadcast_s = time.monotonic() - t1
        rpool.map_unordered("collect", tasks[: args.workers])  # first call on each actor (imports)

        # per-task dispatch cost alone: a no-op method (the worker's ping)
        dispatch_ms = {}
        for name, pool in (("local", local), ("ray", rpool)):
            pool.map_unordered("ping", [()] * 20)
            t1 = time.monotonic()
            pool.map_unordered("ping", [()] * args.dispatch_tasks)
            dispatch_ms[name] = 1000.0 * (time.monotonic() - t1) / args.dispatch_tasks
            print(f"{name:5s}: {dispatch_ms[name]:.2f} ms per no-op task ({args.workers} workers)", flush=True)

        res = {"local": [], "ray": []}
        pair_ratios = []
        load_before = os.getloadavg()
        try:
            for r in range(args.repeats):
                # alternate the order so a drifting machine load favours neither backend
                order = (("local", local), ("ray", rpool)) if r % 2 == 0 else (("ray", rpool), ("local", local))
                mpm = {}
                for name, pool in order:
                    dt, ok, obs = timed_pass(pool, tasks)
                    mpm[name] = 60.0 * ok / dt
                    res[name].append({"seconds": round(dt, 3), "ok": ok, "decisions": obs,
                                      "modules_per_minute": round(mpm[name], 1)})
                    print(f"{name:5s}: {ok} modules in {dt:.2f} s = {mpm[name]:.1f} modules/min", flush=True)
                pair_ratios.append(mpm["local"] / mpm["ray"])
        finally:
            local.close()
            rpool.close()
            ray.shutdown()

    med = {k: statistics.median(r["modules_per_minute"] for r in v) for k, v in res.items()}
    ratio = statistics.median(pair_ratios)
    summary = {
        "what": "modules per minute, default policy (greedy, episodes recorded), local vs Ray pool",
        "corpus": corpus_name, "modules": len(tasks), "workers": args.workers, "repeats": args.repeats,
        "ship_bitcode": args.ship_bitcode, "ray_address": "cluster" if args.ray_address else "local instance",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "ray": ray.__version__},
        "median_modules_per_minute": {k: round(v, 1) for k, v in med.items()},
        "overhead_ratio_local_over_ray": round(ratio, 3),
        "overhead_ratio_note": "median over rounds of (local modules/min) / (ray modules/min), "
                               "each round running both backends back to back",
        "pair_ratios": [round(x, 3) for x in pair_ratios],
        "dispatch_ms_per_noop_task": {k: round(v, 3) for k, v in dispatch_ms.items()},
        "loadavg_1min": {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)},
        "startup_s": {"local_pool": round(local_start, 2), "ray_init": round(ray_init_s, 2),
                      "ray_pool": round(ray_pool_start, 2), "ray_first_broadcast": round(ray_broadcast_s, 3)},
        "passes": res,
    }
    atomic_write_json(args.out, summary)
    print(f"median: local {med['local']:.1f} modules/min, ray {med['ray']:.1f} modules/min; "
          f"local/ray (median of per-round ratios) = {ratio:.3f} (1.0 = no Ray overhead); "
          f"1-min load {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"start-up: local pool {local_start:.2f} s; ray.init {ray_init_s:.2f} s + actors {ray_pool_start:.2f} s")
    print(f"wrote {os.path.relpath(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
