"""The gin-configured training loop (``mlgo-host train``).

Per iteration: sample modules (size-stratified, seeded), collect episodes in
parallel with the current *stochastic* numpy policy (weights shipped once to
the long-lived workers), compute each module's reward against the cached
default-heuristic baseline (or a moving average of past policy sizes),
train the tf-agents PPO agent on the episodes, export the new weights, and
write the iteration's state atomically: TF checkpoint, ``state.json`` (reward
statistics, sampler position), ``policy/<iteration>/``.  Every
``eval_every`` iterations the greedy policy is evaluated on the held-out
split.  Re-running the same command resumes after the last completed
iteration.

Only this module (and the learner) imports TensorFlow; workers never do.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

import gin
import numpy as np

from mlgo_host.errors import ConfigError
from mlgo_host.fsutil import atomic_write_json

log = logging.getLogger("mlgo_host.train")


def percentile_summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    arr = np.asarray(values, dtype=np.float64)
    out = {f"p{p}": float(np.percentile(arr, p)) for p in (10, 20, 30, 40, 50, 60, 70, 80, 90)}
    out["mean"] = float(arr.mean())
    return out


@gin.configurable(module="train")
def train(
    root_dir: str,
    corpus_dir: str,
    *,
    clang_path: str = "clang-19",
    llvm_size_path: str | None = None,
    advisor: str = "inline",
    num_iterations: int = 10,
    modules_per_iteration: int = 32,
    num_workers: int = 2,
    worker_backend: str = "local",
    ray_address: str | None = None,
    ship_bitcode: bool = False,
    vocab_path: str | None = None,
    warmstart_policy: str | None = None,
    eval_every: int = 5,
    heldout_fraction: float = 0.2,
    heldout_modules: int = 0,
    seed: int = 0,
    use_moving_average_baseline: bool = True,
    moving_average_decay: float = 0.8,
    module_timeout: float = 300.0,
    early_exit_fraction: float = 0.9,
    early_exit_grace_s: float = 60.0,
    collection_timeout_s: float = 1800.0,
    trace_modules: int = 0,
    sampling_strategy: str = "round_robin",
    saved_model_every_iteration: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Train a policy; returns the final statistics (also in state.json)."""
    from tqdm import tqdm

    from mlgo_host.corpus.corpus import load_corpus
    from mlgo_host.trainers.pool import EarlyExit, make_pool
    from mlgo_host.corpus.reward import MovingAverageBaseline, reward
    from mlgo_host.trainers.summaries import Summaries
    from mlgo_host.trainers.worker import policy_blob_from_dir

    # absolute: workers (Ray actors too) may run in another directory
    root_dir = os.path.abspath(root_dir)
    os.makedirs(root_dir, exist_ok=True)
    corpus = load_corpus(corpus_dir)
    train_mods, heldout_mods = corpus.split(heldout_fraction, seed=seed)
    if heldout_modules:
        heldout_mods = heldout_mods[:heldout_modules]
    if not train_mods:
        raise ConfigError(f"corpus {corpus_dir} has no training modules")
    baseline_cache = os.path.join(root_dir, "baselines")
    worker_kwargs = {"clang": clang_path, "llvm_size": llvm_size_path, "advisor": advisor,
                     "module_timeout": module_timeout, "baseline_cache": baseline_cache}
    pool_opts = {"ray_address": ray_address} if worker_backend == "ray" else {}
    state_path = os.path.join(root_dir, "state.json")
    state: dict[str, Any] = {}
    if os.path.exists(state_path):
        with open(state_path) as f:
            state = json.load(f)
        log.info("resuming %s after iteration %d", root_dir, state["iteration"])

    def task_of(m):
        return m.to_task(ship_bitcode=ship_bitcode)

    pool = make_pool(worker_backend, num_workers, "mlgo_host.trainers.worker:CollectWorker", worker_kwargs,
                     **pool_opts)
    try:
        # -- vocab: a warm-start policy brings its own (its weights were trained
        # on it); else trace the default policy over the training split.
        if vocab_path is None and warmstart_policy:
            vocab_path = os.path.join(warmstart_policy, "vocab")
        if vocab_path is None:
            vocab_path = os.path.join(root_dir, "vocab")
            if not os.path.isdir(vocab_path):
                _build_vocab(pool, train_mods if not trace_modules else train_mods[:trace_modules],
                             vocab_path, root_dir, task_of, progress)
        header_path = os.path.join(root_dir, "header.json")
        if not os.path.exists(header_path):
            _probe_header(pool, train_mods, header_path, task_of)
        with open(header_path) as f:
            header_json = json.load(f)

        from mlgo_host.trainers.learner import Learner

        learner = Learner(header_json, advisor=advisor, vocab_dir=vocab_path, root_dir=root_dir, seed=seed,
                          clang=clang_path)
        start_iter = 0
        stats = MovingAverageBaseline(decay=moving_average_decay)
        if state:
            learner.restore(state["iteration"])
            start_iter = state["iteration"]
            stats = MovingAverageBaseline.from_state(state["moving_average"])
        elif warmstart_policy:
            learner.warmstart(warmstart_policy)
        summaries = Summaries(root_dir)
        sampler = corpus.sampler(train_mods, seed=seed, strategy=sampling_strategy)
        sampler.skip(start_iter * modules_per_iteration)
        history = state.get("history", [])
        early = EarlyExit(fraction=early_exit_fraction, grace_s=early_exit_grace_s, timeout_s=collection_timeout_s)
        last_eval = state.get("last_eval")
        blob = None  # the current policy's TF-free files, shipped to the workers
        for it in range(start_iter, num_iterations):
            t0 = time.monotonic()
            if blob is None:
                blob = learner.policy_blob()
            pool.broadcast("set_policy", blob)
            mods = sampler.take(modules_per_iteration)
            tasks = [(task_of(m), seed * 1_000_003 + it * 10_007 + i, False, True) for i, m in enumerate(mods)]
            bar = tqdm(total=len(tasks), desc=f"iteration {it + 1}/{num_iterations}", unit="module",
                       disable=not progress, leave=False, file=sys.stderr)
            outcomes = pool.map_unordered("collect", tasks, early, on_result=lambda r: bar.update(1))
            bar.close()
            t_collect = time.monotonic() - t0
            episodes, rewards, failures, decisions, ok_rewards = [], [], [], 0, []
            # task order, not completion order: the batches depend only on what was collected
            for o in sorted(outcomes, key=lambda o: o.index):
                r = o.value
                if not o.ok or r is None or r["status"] != "ok" or r["episode"] is None:
                    reason = o.error if not o.ok else (r or {}).get("reason", "no episode")
                    failures.append({"module": tasks[o.index][0]["name"], "reason": reason})
                    continue
                # training reward: against the moving average (or the default
                # size); reported reward: always against the default size.
                if use_moving_average_baseline:
                    rew = stats.reward(r["name"], r["policy_size"], r["baseline_size"])
                else:
                    rew = reward(r["policy_size"], r["baseline_size"])
                ok_rewards.append(reward(r["policy_size"], r["baseline_size"]))
                if r["observations"] == 0:
                    continue
                from mlgo_host.episode import Episode

                episodes.append(Episode.from_state(r["episode"]))
                rewards.append(rew)
                decisions += r["observations"]
            for f in failures:
                log.warning("iteration %d: module %s failed: %s", it + 1, f["module"], f["reason"])
            t1 = time.monotonic()
            train_metrics = learner.train(episodes, rewards, it) if episodes else {}
            t_train = time.monotonic() - t1
            iteration = it + 1
            evaluating = bool(heldout_mods and eval_every and (iteration % eval_every == 0
                                                                or iteration == num_iterations))
            # -- persist: policy/<iteration> (the workers' next policy is read
            # from it), checkpoint; state.json last, atomically.  The SavedModel
            # (seconds of TF work) only where someone will look at it.
            t2 = time.monotonic()
            policy_dir = os.path.join(root_dir, "policy", str(iteration))
            learner.save_policy(policy_dir, step=iteration,
                                saved_model=saved_model_every_iteration or evaluating or iteration == num_iterations)
            learner.checkpoint(iteration)
            blob = policy_blob_from_dir(policy_dir)
            t_save = time.monotonic() - t2
            # -- held-out evaluation with the greedy policy
            eval_row = None
            if evaluating:
                t3 = time.monotonic()
                pool.broadcast("set_policy", blob)
                eval_row = evaluate_heldout(pool, heldout_mods, task_of, progress, f"held-out eval {iteration}")
                eval_row["eval_s"] = round(time.monotonic() - t3, 3)
                last_eval = eval_row
            dist = percentile_summary(ok_rewards)
            row = {
                "iteration": iteration, "modules": len(tasks), "ok": len(ok_rewards), "failures": len(failures),
                "reward_mean": dist.get("mean"), "decisions": decisions,
                "collect_s": round(t_collect, 3), "train_s": round(t_train, 3), "save_s": round(t_save, 3),
                "modules_per_minute": round(60.0 * len(ok_rewards) / max(t_collect, 1e-9), 2),
                "decisions_per_second": round(decisions / max(t_collect, 1e-9), 1),
                **{k: v for k, v in train_metrics.items() if isinstance(v, (int, float))},
            }
            if eval_row is not None:
                row["heldout_size_change_pct"] = eval_row["size_change_pct"]
            history.append(row)
            summaries.write_iteration(iteration, dist, row, eval_row)
            atomic_write_json(state_path, {
                "iteration": iteration, "moving_average": stats.state(), "history": history,
                "last_eval": last_eval, "failures_last_iteration": failures,
                "config": {"advisor": advisor, "corpus_dir": os.path.abspath(corpus_dir), "seed": seed},
            })
            print(_summary_line(row, num_iterations), file=sys.stderr, flush=True)
        learner.save_policy(os.path.join(root_dir, "saved_policy"), step=max(num_iterations, start_iter))
        summaries.close()
        return {"history": history, "last_eval": last_eval}
    finally:
        pool.close()


def _summary_line(row: dict, total: int) -> str:
    parts = [f"iteration {row['iteration']}/{total}:",
             f"reward mean {row['reward_mean']:+.4f}" if row.get("reward_mean") is not None else "reward n/a",
             f"{row['ok']}/{row['modules']} modules", f"{row['failures']} failed",
             f"{row['decisions_per_second']:.0f} decisions/s",
             f"collect {row['collect_s']:.1f}s", f"train {row['train_s']:.1f}s", f"save {row['save_s']:.1f}s"]
    if "heldout_size_change_pct" in row:
        parts.append(f"held-out size {row['heldout_size_change_pct']:+.3f}% vs -Oz")
    return " ".join(parts)


def evaluate_heldout(pool, modules, task_of, progress: bool, desc: str) -> dict[str, Any]:
    """Greedy policy over held-out modules; total size change vs the default."""
    from tqdm import tqdm

    tasks = [(task_of(m), 0, True, False) for m in modules]
    bar = tqdm(total=len(tasks), desc=desc, unit="module", disable=not progress, leave=False, file=sys.stderr)
    outcomes = pool.map_unordered("collect", tasks, None, on_result=lambda r: bar.update(1))
    bar.close()
    rows = []
    for o in outcomes:
        r = o.value
        if o.ok and r and r["status"] == "ok":
            rows.append((r["name"], r["baseline_size"], r["policy_size"]))
    base = sum(b for _, b, _ in rows)
    pol = sum(p for _, _, p in rows)
    worst = max(rows, key=lambda t: (t[2] - t[1]) / max(t[1], 1), default=None)
    return {
        "modules": len(tasks), "ok": len(rows), "baseline_total": base, "policy_total": pol,
        "size_change_pct": 100.0 * (pol - base) / base if base else 0.0,
        "smaller": sum(p < b for _, b, p in rows), "equal": sum(p == b for _, b, p in rows),
        "bigger": sum(p > b for _, b, p in rows),
        "worst_module": None if worst is None else {"module": worst[0], "baseline": worst[1], "policy": worst[2],
                                                    "change_pct": 100.0 * (worst[2] - worst[1]) / max(worst[1], 1)},
    }


def _probe_header(pool, modules, header_path: str, task_of) -> None:
    """Compile modules with the default policy until one yields a header."""
    pool.broadcast("set_policy", {"heuristic": "default"})
    for m in modules[:20]:
        out = pool.map_unordered("collect", [(task_of(m), 0, True, True)])
        r = out[0].value
        if out[0].ok and r and r["episode"] is not None:
            atomic_write_json(header_path, r["episode"]["header"])
            return
    raise ConfigError("no training module produced a channel header (are they all failing?)")


def _build_vocab(pool, modules, vocab_dir: str, root_dir: str, task_of, progress: bool) -> None:
    """Trace the default policy over ``modules`` and compute quantile vocabularies."""
    from tqdm import tqdm

    from mlgo_host.episode import Episode
    from mlgo_host.policies.vocab import VocabBuilder

    pool.broadcast("set_policy", {"heuristic": "default"})
    tasks = [(task_of(m), 0, True, True) for m in modules]
    bar = tqdm(total=len(tasks), desc="tracing the default policy for the vocab", unit="module",
               disable=not progress, leave=False, file=sys.stderr)
    outcomes = pool.map_unordered("collect", tasks, None, on_result=lambda r: bar.update(1))
    bar.close()
    builder = VocabBuilder()
    header = None
    for o in outcomes:
        if o.ok and o.value and o.value["episode"] is not None:
            ep = Episode.from_state(o.value["episode"])
            header = header or ep.header
            builder.add(ep.features())
    if not builder.observations:
        raise ConfigError("tracing produced no observations; cannot build a vocab")
    atomic_write_json(os.path.join(root_dir, "header.json"), header.to_json())
    builder.build().save(vocab_dir)
