"""The PPO training loop over a corpus (``run.algorithm = 'ppo'``); re-running resumes after the last
completed iteration.  The validation split chooses ``saved_policy/`` by :class:`GateRule` (:func:`_better`).
A warm start's gate stays on every saved policy, but collection samples the raw actor: PPO's importance
ratios need each decision's probability under the policy that made it, which a gated policy would not give.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import sys
import time
from typing import Any, Callable

import gin

from mlgo_host.corpus.corpus import Module, load_corpus, split_three
from mlgo_host.episode import Episode
from mlgo_host.errors import ConfigError
from mlgo_host.evaluation.compare import significantly_smaller
from mlgo_host.evaluation.evaluate import evaluate_on_pool
from mlgo_host.fsutil import atomic_write_json, dir_built_aside
from mlgo_host.learning.imitate import GateRule
from mlgo_host.learning.summaries import Summaries
from mlgo_host.measure.reward import MovingAverageBaseline, reward
from mlgo_host.policies.saved import set_gate
from mlgo_host.training.checks import (check_at_least_zero, check_counts, check_fraction, check_positive, claim_root,
                                      make_root)
from mlgo_host.training.iteration import (STATE, build_vocab, numeric_metrics, open_learner,
                                          percentile_summary, publish_policy, read_header, read_state,
                                          resolve_warmstart, train_and_save)
from mlgo_host.training.workers import Workers
from mlgo_host.workers.pool import EarlyExit, map_with_progress
from mlgo_host.workers.worker import CollectTask, policy_blob_from_dir

log = logging.getLogger("mlgo_host.train")

COLLECT_WORKER = "mlgo_host.workers.worker:CollectWorker"


@gin.configurable(module="train")
def train(
    root_dir: str,
    corpus_dir: str,
    *,
    workers: Workers | None = None,
    advisor: str = "inline",
    num_iterations: int = 10,
    modules_per_iteration: int = 32,
    ship_bitcode: bool = False,
    vocab_path: str | None = None,
    warmstart_policy: str | None = None,
    eval_every: int = 5,
    heldout_fraction: float = 0.2,
    validation_fraction: float = 0.0,
    split_by: str = "project",
    heldout_modules: int = 0,
    seed: int = 0,
    use_moving_average_baseline: bool = True,
    moving_average_decay: float = 0.8,
    early_exit_fraction: float = 0.9,
    min_validation_gain_pct: float = 0.1,
    max_module_growth_pct: float = 1.0,
    early_exit_grace_s: float = 60.0,
    collection_timeout_s: float = 1800.0,
    trace_modules: int = 0,
    sampling_strategy: str = "round_robin",
    saved_model_every_iteration: bool = False,
    report_heldout: bool = True,
    progress: bool = True,
) -> dict[str, Any]:
    """Train a policy; returns its history and last held-out evaluation.
    ``report_heldout=False`` leaves the held-out split to ``mlgo-host eval``."""
    # before any work (0 iterations would still publish an untrained policy)
    check_counts("train", 1, num_iterations=num_iterations, modules_per_iteration=modules_per_iteration)
    check_counts("train", 0, eval_every=eval_every, seed=seed, heldout_modules=heldout_modules,
                 trace_modules=trace_modules)
    check_fraction("train", False, True, moving_average_decay=moving_average_decay)
    check_fraction("train", True, False, early_exit_fraction=early_exit_fraction)
    check_positive("train", early_exit_grace_s=early_exit_grace_s, collection_timeout_s=collection_timeout_s)
    check_at_least_zero("train", min_validation_gain_pct=min_validation_gain_pct,
                        max_module_growth_pct=max_module_growth_pct)
    workers = workers or Workers()
    warmstart_policy = resolve_warmstart(warmstart_policy)  # a bad name fails before any compile
    # absolute: workers (Ray actors too) may run in another directory
    root_dir = os.path.abspath(root_dir)
    make_root(root_dir)
    corpus = load_corpus(corpus_dir)
    train_mods, val_mods, heldout_mods = _claim_split(root_dir, corpus, corpus_dir, heldout_fraction,
                                                      validation_fraction, seed, split_by, heldout_modules)
    state, moving_average = _resume(root_dir, moving_average_decay)
    done = int(state.get("iteration", 0))
    task_of = functools.partial(Module.to_task, ship_bitcode=ship_bitcode)
    rule = GateRule(max_module_growth_pct, min_validation_gain_pct)
    with workers.pool(COLLECT_WORKER, advisor=advisor, baseline_cache=os.path.join(root_dir, "baselines")) as pool:
        learner = _open_run_learner(pool, root_dir, train_mods, task_of, workers=workers, advisor=advisor,
                                    vocab_path=vocab_path, warmstart_policy=warmstart_policy,
                                    trace_modules=trace_modules, seed=seed, done=done, progress=progress)
        run_config = {"advisor": advisor, "corpus_dir": os.path.abspath(corpus_dir), "seed": seed,
                      "warmstart_policy": warmstart_policy}
        if warmstart_policy and val_mods and eval_every and not done and state.get("best") is None:
            state = _validate_warmstart(learner, pool, root_dir, val_mods, task_of, progress, moving_average,
                                        run_config, rule)
        sampler = corpus.sampler(train_mods, seed=seed, strategy=sampling_strategy)
        sampler.skip(done * modules_per_iteration)
        loop = _Loop(
            root_dir=root_dir, pool=pool, learner=learner, task_of=task_of, sampler=sampler,
            moving_average=moving_average, use_moving_average=use_moving_average_baseline,
            early=EarlyExit(fraction=early_exit_fraction, grace_s=early_exit_grace_s, timeout_s=collection_timeout_s),
            state=state, summaries=Summaries(root_dir), run_config=run_config, val_mods=val_mods,
            reported=heldout_mods if report_heldout else [], num_iterations=num_iterations,
            modules_per_iteration=modules_per_iteration, eval_every=eval_every, rule=rule,
            saved_model_every_iteration=saved_model_every_iteration, seed=seed, progress=progress)
        # the current policy's TF-free files, shipped to the workers
        blob = learner.policy_blob() if done < num_iterations else None
        for iteration in range(done + 1, num_iterations + 1):
            blob = loop.iteration(iteration, blob)
        loop.finish(advisor, max(num_iterations, done))
    return {"history": loop.state.get("history", []), "last_eval": loop.state.get("last_eval")}


def _resume(root_dir: str, decay: float) -> tuple[dict, MovingAverageBaseline]:
    """The run's state and moving averages (``state.json``'s, else new ones); a damaged one fails here,
    before any work."""
    state = read_state(root_dir, required=("iteration", "moving_average"))
    if not state:
        return state, MovingAverageBaseline(decay=decay)
    log.info("resuming %s after iteration %d", root_dir, int(state["iteration"]))
    try:
        return state, MovingAverageBaseline.from_state(state["moving_average"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ConfigError(f"{os.path.join(root_dir, STATE)}: unreadable state (moving_average: {e!r}); "
                          f"move it away to start over") from None


def _open_run_learner(pool, root_dir: str, train_mods: list[Module], task_of, *, workers: Workers, advisor: str,
                      vocab_path: str | None, warmstart_policy: str | None, trace_modules: int, seed: int,
                      done: int, progress: bool):
    """The learner after ``done`` iterations; its vocab: ``vocab_path``, else the warm start's (its weights
    were trained on it), else ``root_dir/vocab``, traced the first time."""
    if vocab_path is None and warmstart_policy:
        vocab_path = os.path.join(warmstart_policy, "vocab")
    elif vocab_path is None:
        vocab_path = os.path.join(root_dir, "vocab")
        if not os.path.isdir(vocab_path):
            traced = train_mods[:trace_modules] if trace_modules else train_mods
            _build_vocab(pool, traced, vocab_path, root_dir, task_of, progress)
    header_json = _ensure_header(pool, root_dir, train_mods, task_of)
    return open_learner(root_dir, header_json, advisor=advisor, vocab_dir=vocab_path, seed=seed,
                        clang=workers.clang_path, done=done, warmstart_policy=warmstart_policy)


def _claim_split(root_dir: str, corpus, corpus_dir: str, heldout_fraction: float, validation_fraction: float,
                 seed: int, split_by: str, heldout_modules: int) -> tuple[list, list, list]:
    """The run's training, validation and held-out modules (:func:`split_three`); ``root_dir`` is claimed
    for them."""
    train_mods, val_mods, heldout_mods = split_three(corpus.modules, heldout_fraction, validation_fraction, seed,
                                                     split_by)
    if not train_mods:
        raise ConfigError(f"corpus {corpus_dir} has no training modules")
    claim_root(root_dir, "ppo", corpus_dir, split=dict(heldout_fraction=heldout_fraction,
                                                        validation_fraction=validation_fraction,
                                                        split_by=split_by, seed=seed))
    return train_mods, val_mods, heldout_mods[:heldout_modules] if heldout_modules else heldout_mods


@dataclasses.dataclass
class _Loop:
    """The iterations of a run and the state they add to."""

    root_dir: str
    pool: Any
    learner: Any
    task_of: Callable[[Module], dict]
    sampler: Any
    moving_average: MovingAverageBaseline
    use_moving_average: bool
    early: EarlyExit
    state: dict[str, Any]  # as state.json has it after the last iteration
    summaries: Summaries
    run_config: dict
    val_mods: list[Module]
    reported: list[Module]  # the held-out modules evaluated in the loop
    num_iterations: int
    modules_per_iteration: int
    eval_every: int
    rule: GateRule  # what a policy does on validation to become saved_policy
    saved_model_every_iteration: bool
    seed: int
    progress: bool

    def iteration(self, iteration: int, blob: dict) -> dict:
        """Iteration ``iteration`` (from 1) with the policy ``blob``; returns the new policy's blob."""
        tasks = [CollectTask(self.task_of(m), self.seed * 1_000_003 + (iteration - 1) * 10_007 + i, greedy=False,
                             record=True) for i, m in enumerate(self.sampler.take(self.modules_per_iteration))]
        batch, t_collect = _collect(self.pool, blob, tasks, self.moving_average, self.use_moving_average, self.early,
                                    f"iteration {iteration}/{self.num_iterations}", self.progress)
        evaluating = bool((self.reported or self.val_mods) and self.eval_every
                          and (iteration % self.eval_every == 0 or iteration == self.num_iterations))
        # the SavedModel (seconds of TF work) only where someone will look at it
        update = train_and_save(self.learner, self.root_dir, iteration, batch.episodes, batch.rewards,
                                saved_model=self.saved_model_every_iteration or evaluating
                                or iteration == self.num_iterations)
        blob = policy_blob_from_dir(update.policy_dir)
        eval_row = (_evaluate(self.pool, blob, self.reported, self.task_of, self.progress,
                              f"held-out eval {iteration}") if evaluating and self.reported else None)
        row = _history_row(len(tasks), batch, t_collect, update, eval_row)
        if evaluating and self.val_mods:
            val_row = _evaluate(self.pool, blob, self.val_mods, self.task_of, self.progress, f"validation {iteration}")
            self._choose_saved_policy(iteration, update.policy_dir, val_row, row)
        prior = self.state
        self.state = {
            "iteration": iteration, "moving_average": self.moving_average.state(),
            "history": prior.get("history", []) + [row], "last_eval": eval_row or prior.get("last_eval"),
            "failures_last_iteration": batch.failures, "best": prior.get("best"),
            "warmstart_validation": prior.get("warmstart_validation"), "config": self.run_config,
        }
        self.summaries.write_iteration(iteration, percentile_summary(batch.ok_rewards), row, eval_row)
        atomic_write_json(os.path.join(self.root_dir, STATE), self.state)  # last: the iteration is done
        print(_summary_line(row, self.num_iterations), file=sys.stderr, flush=True)
        return blob

    def finish(self, advisor: str, last: int) -> None:
        """Publish ``saved_policy`` when no iteration did (:func:`_publish_fallback`) and close the summaries."""
        if self.val_mods and self.eval_every and self.state.get("best") is None:
            _publish_fallback(self.learner, self.root_dir, last, advisor, self.rule, self.state.get("history", []))
        elif self.state.get("best") is None:  # nothing to choose by: the last policy
            self.learner.save_policy(os.path.join(self.root_dir, "saved_policy"), step=last)
        self.summaries.close()

    def _choose_saved_policy(self, iteration: int, policy_dir: str, val_row: dict, row: dict) -> None:
        """Publish the policy as ``saved_policy`` when the rule lets it replace the one there (:func:`_better`)."""
        row.update(validation_size_change_pct=val_row["size_change_pct"], validation_bigger=val_row["bigger"],
                   validation_worst_pct=_worst_pct(val_row))
        best = self.state.get("best")
        # the policy to beat: the warm start while it is saved_policy, else -Oz's decisions
        baseline = (self.state["warmstart_validation"] if best is not None and best["iteration"] == 0
                    else {"policy_sizes": val_row["baseline_sizes"]})
        if _better(val_row, best, baseline, self.rule):
            self.state["best"] = {"iteration": iteration, "size_change_pct": val_row["size_change_pct"]}
            publish_policy(policy_dir, os.path.join(self.root_dir, "saved_policy"))
        row["saved_policy_iteration"] = (self.state.get("best") or {}).get("iteration")


def _better(val_row: dict, best: dict | None, baseline: dict | None = None, rule: GateRule = GateRule()) -> bool:
    """May this policy replace ``best`` (None: nothing published yet)?  Within ``rule``'s growth, and against
    the baseline (a warm start at iteration 0, else ``-Oz``) a saving of ``rule.min_gain_pct`` that is
    significant over ``baseline["policy_sizes"]`` (the best of many iterations is smaller by chance alone);
    against a policy that passed that, smaller or equal (ties: the later policy)."""
    if not rule.admits(_worst_pct(val_row), val_row.get("ok", 0) >= val_row.get("modules", 0)):
        return False
    if best is not None and best["iteration"] > 0:
        return val_row["size_change_pct"] <= best["size_change_pct"]
    saving = (best["size_change_pct"] if best is not None else 0.0) - val_row["size_change_pct"]
    return rule.saves(saving) and (baseline is None or "policy_sizes" not in baseline
                                   or significantly_smaller(val_row.get("policy_sizes", {}), baseline["policy_sizes"]))


def _warm_start_kept(val_row: dict, rule: GateRule) -> bool:
    """Is the warm start the first ``saved_policy``?  Within ``rule``'s growth and no bigger than ``-Oz``."""
    return rule.admits(_worst_pct(val_row), val_row["ok"] == val_row["modules"]) and val_row["size_change_pct"] <= 0.0


def _worst_pct(val_row: dict) -> float:
    """The largest growth of a validation module against -Oz, in % (0 when none grew)."""
    worst = val_row.get("worst_module") or {}
    return max(0.0, worst.get("change_pct", 0.0))


def _publish_fallback(learner, root_dir: str, step: int, advisor: str, rule: GateRule, history: list) -> None:
    """No policy met ``rule`` on validation: the inliner's ``saved_policy`` is the last policy gated at 1.0
    (``-Oz``'s decisions); another advisor's, the evaluated policy with the smallest validation total."""
    dest = os.path.join(root_dir, "saved_policy")
    if advisor == "inline":
        with dir_built_aside(dest) as tmp:
            learner.save_policy(tmp, step=step)
            set_gate(tmp, 1.0, chosen_on="validation", rule=dataclasses.asdict(rule), met_by_no_iteration=True)
        what = "the last policy gated at 1.0, which keeps -Oz's decisions"
    else:
        rows = [r for r in history if r.get("validation_size_change_pct") is not None]
        smallest = min(rows, key=lambda r: (r["validation_size_change_pct"], -r["iteration"]), default=None)
        pick = step if smallest is None else smallest["iteration"]
        publish_policy(os.path.join(root_dir, "policy", str(pick)), dest)
        what = (f"iteration {pick}, the smallest on validation (this advisor has no default decision to keep; "
                "use it knowing it did not meet the rule)")
    print(f"no policy's validation met the rule (no module more than {rule.max_module_growth_pct:g} % bigger, "
          f"at least {rule.min_gain_pct:g} % smaller than -Oz): saved_policy is {what}", file=sys.stderr, flush=True)


def _validate_warmstart(learner, pool, root_dir: str, val_mods: list[Module], task_of, progress: bool,
                        moving_average: MovingAverageBaseline, run_config: dict, rule: GateRule) -> dict[str, Any]:
    """The warm start, ``policy/0/``, evaluated on validation and published if :func:`_warm_start_kept`;
    returns (and writes) ``state.json`` at iteration 0."""
    policy_dir = os.path.join(root_dir, "policy", "0")
    learner.save_policy(policy_dir, step=0, saved_model=True)
    val_row = _evaluate(pool, policy_blob_from_dir(policy_dir), val_mods, task_of, progress, "validation 0 (warm start)")
    kept = _warm_start_kept(val_row, rule)
    if kept:
        publish_policy(policy_dir, os.path.join(root_dir, "saved_policy"))
    state = {"iteration": 0, "moving_average": moving_average.state(), "history": [], "last_eval": None,
             "failures_last_iteration": [],
             "best": {"iteration": 0, "size_change_pct": val_row["size_change_pct"]} if kept else None,
             "warmstart_validation": val_row, "config": run_config}
    atomic_write_json(os.path.join(root_dir, STATE), state)
    verdict = "saved_policy" if kept else (
        f"not published (bigger than -Oz in total, a module more than {rule.max_module_growth_pct:g} % bigger, "
        "or one that failed); the policy to beat is -Oz's decisions")
    print(f"iteration 0 (warm start): validation size {val_row['size_change_pct']:+.3f}% vs -Oz "
          f"({val_row['ok']}/{val_row['modules']} modules, {val_row['bigger']} bigger, worst "
          f"{_worst_pct(val_row):+.2f}%): {verdict}", file=sys.stderr, flush=True)
    return state


@dataclasses.dataclass
class Batch:
    """One iteration's collection, scored."""

    episodes: list = dataclasses.field(default_factory=list)  # with decisions, in task order
    rewards: list[float] = dataclasses.field(default_factory=list)  # training rewards of ``episodes``
    ok_rewards: list[float] = dataclasses.field(default_factory=list)  # every compiled module, against -Oz
    failures: list[dict] = dataclasses.field(default_factory=list)
    decisions: int = 0


def _collect(pool, blob: dict, tasks: list[tuple], moving_average: MovingAverageBaseline,
             use_moving_average: bool, early: EarlyExit, desc: str, progress: bool) -> tuple[Batch, float]:
    """The tasks' episodes with the stochastic policy ``blob`` and the seconds taken; the training reward
    against the moving average (or the default size), the reported one against the default size."""
    t0 = time.monotonic()
    pool.broadcast("set_policy", blob)
    outcomes = map_with_progress(pool, "collect", tasks, desc=desc, progress=progress, early_exit=early)
    t_collect = time.monotonic() - t0
    batch = Batch()
    # task order, not completion order: the batches depend only on what was collected
    for o in sorted(outcomes, key=lambda o: o.index):
        r = o.value
        if not o.ok or r is None or r["status"] != "ok" or r["episode"] is None:
            reason = o.error if not o.ok else (r or {}).get("reason", "no episode")
            batch.failures.append({"module": tasks[o.index][0]["name"], "reason": reason})
            log.warning("%s: module %s failed: %s", desc.split("/")[0], tasks[o.index][0]["name"], reason)
            continue
        ok_reward = reward(r["policy_size"], r["baseline_size"])
        batch.ok_rewards.append(ok_reward)
        train_reward = (moving_average.reward(r["name"], r["policy_size"], r["baseline_size"]) if use_moving_average
                        else ok_reward)
        if r["observations"] == 0:
            continue
        batch.episodes.append(Episode.from_state(r["episode"]))
        batch.rewards.append(train_reward)
        batch.decisions += r["observations"]
    return batch, t_collect


def _history_row(modules: int, batch: Batch, t_collect: float, update, eval_row: dict | None) -> dict[str, Any]:
    row = {
        "iteration": update.iteration, "modules": modules, "ok": len(batch.ok_rewards), "failures": len(batch.failures),
        "reward_mean": percentile_summary(batch.ok_rewards).get("mean"), "decisions": batch.decisions,
        "collect_s": round(t_collect, 3), "train_s": round(update.train_s, 3), "save_s": round(update.save_s, 3),
        "modules_per_minute": round(60.0 * len(batch.ok_rewards) / max(t_collect, 1e-9), 2),
        "decisions_per_second": round(batch.decisions / max(t_collect, 1e-9), 1),
        **numeric_metrics(update),
    }
    if eval_row is not None:
        row["heldout_size_change_pct"] = eval_row["size_change_pct"]
    return row


def _summary_line(row: dict, total: int) -> str:
    parts = [f"iteration {row['iteration']}/{total}:",
             f"reward mean {row['reward_mean']:+.4f}" if row.get("reward_mean") is not None else "reward n/a",
             f"{row['ok']}/{row['modules']} modules", f"{row['failures']} failed",
             f"{row['decisions_per_second']:.0f} decisions/s",
             f"collect {row['collect_s']:.1f}s", f"train {row['train_s']:.1f}s", f"save {row['save_s']:.1f}s"]
    if "validation_size_change_pct" in row:
        saved = row["saved_policy_iteration"]
        parts.append(f"validation size {row['validation_size_change_pct']:+.3f}% vs -Oz, worst module "
                     f"{row['validation_worst_pct']:+.2f}% (saved_policy: "
                     f"{'none meets the rule yet' if saved is None else f'iteration {saved}'})")
    if "heldout_size_change_pct" in row:
        parts.append(f"held-out size {row['heldout_size_change_pct']:+.3f}% vs -Oz")
    return " ".join(parts)


def _evaluate(pool, blob: dict, modules: list[Module], task_of: Callable[[Module], dict], progress: bool,
              desc: str) -> dict[str, Any]:
    """The greedy policy ``blob`` over ``modules``: size change vs the default, counts, the worst module."""
    t0 = time.monotonic()
    pool.broadcast("set_policy", blob)
    report = evaluate_on_pool(pool, modules, desc=desc, progress=progress, task_of=task_of)
    s = report.summary()
    ok = [r for r in report.rows if r.ok]
    worst = max(ok, key=lambda r: (r.policy_text - r.baseline_text) / max(r.baseline_text, 1), default=None)
    return {
        "modules": s.modules, "ok": s.ok, "baseline_total": s.baseline_total, "policy_total": s.policy_total,
        "policy_sizes": {r.module: r.policy_text for r in ok},
        "baseline_sizes": {r.module: r.baseline_text for r in ok},
        "size_change_pct": s.change_percent or 0.0, "smaller": s.smaller, "equal": s.equal, "bigger": s.bigger,
        "worst_module": None if worst is None else {
            "module": worst.module, "baseline": worst.baseline_text, "policy": worst.policy_text,
            "change_pct": 100.0 * (worst.policy_text - worst.baseline_text) / max(worst.baseline_text, 1)},
        "eval_s": round(time.monotonic() - t0, 3),
    }


def _ensure_header(pool, root_dir: str, modules, task_of) -> dict:
    """``root_dir/header.json``, the first time from default-policy compiles of ``modules``."""
    header_path = os.path.join(root_dir, "header.json")
    if not os.path.exists(header_path):
        pool.broadcast("set_policy", {"heuristic": "default"})
        for m in modules[:20]:
            (out,) = pool.map_unordered("collect", [CollectTask(task_of(m), 0, greedy=True, record=True)])
            if out.ok and out.value and out.value["episode"] is not None:
                atomic_write_json(header_path, out.value["episode"]["header"])
                break
        else:
            raise ConfigError("no training module produced a channel header (are they all failing?)")
    return read_header(header_path)


def _build_vocab(pool, modules, vocab_dir: str, root_dir: str, task_of, progress: bool) -> None:
    """Trace the default policy over ``modules`` for the vocab."""
    pool.broadcast("set_policy", {"heuristic": "default"})
    tasks = [CollectTask(task_of(m), 0, greedy=True, record=True) for m in modules]
    outcomes = map_with_progress(pool, "collect", tasks, desc="tracing the default policy for the vocab",
                                 progress=progress)
    episodes = [Episode.from_state(o.value["episode"]) for o in outcomes
                if o.ok and o.value and o.value["episode"] is not None]
    build_vocab(episodes, vocab_dir, "tracing produced")
    atomic_write_json(os.path.join(root_dir, "header.json"), episodes[0].header.to_json())
