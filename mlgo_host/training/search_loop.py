"""Search, then imitate (``run.algorithm = 'search'``): each round searches the training modules around the
current policy, imitates every best trajectory and flip so far (:mod:`mlgo_host.learning.imitate`), chooses
the gate on validation and publishes the best on validation as ``saved_policy/``; held-out is only reported.
A killed run resumes after its last completed round.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import pickle
import sys
import time
from typing import Any, Sequence

import gin
import numpy as np

from mlgo_host.corpus.corpus import Module, load_corpus, split_three
from mlgo_host.errors import ConfigError
from mlgo_host.evaluation.evaluate import EvalReport, evaluate_on_pool
from mlgo_host.fsutil import atomic_path, atomic_write_json
from mlgo_host.learning.imitate import GateRule, choose_gate, examples_from_search, train_imitation
from mlgo_host.learning.summaries import Summaries
from mlgo_host.measure.sizes import compiler_version
from mlgo_host.policies.bounds import MAX_USERS_KEY, MIN_FUNCTIONS_KEY, bound_of, set_inlining_bound
from mlgo_host.policies.saved import METADATA, set_gate
from mlgo_host.search.passes import Passes, RoundResults
from mlgo_host.search.tunedir import load_tune_results
from mlgo_host.training.checks import check_at_least_zero, check_counts, check_positive, claim_root, make_root
from mlgo_host.training.iteration import STATE, publish_policy, read_state
from mlgo_host.training.workers import Workers
from mlgo_host.workers.worker import policy_blob_from_dir

log = logging.getLogger("mlgo_host.search")

GATE_THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
#: a round's row key -> its TensorBoard tag
SCALARS = {"headroom_pct": "search/headroom_pct", "round_search_pct": "search/round_pct",
           "flips_tried": "search/flips_tried", "flips_accepted": "search/flips_accepted",
           "compiles_per_minute": "perf/compiles_per_minute", "flips_per_compile": "search/flips_per_compile",
           "compiles": "search/compiles", "search_minutes": "search/minutes",
           "train_policy_pct": "policy/train_size_change_pct", "validation_pct": "policy/validation_size_change_pct",
           "heldout_pct": "heldout/size_change_pct", "gate": "policy/gate_threshold",
           "imitation_loss": "loss/imitation"}


@gin.configurable(module="search_loop")
def train_search(
    root_dir: str,
    corpus_dir: str,
    *,
    workers: Workers | None = None,
    time_budget_minutes: float = 60.0,
    max_rounds: int = 100,
    compiles_per_round: int = 3000,
    round_search_minutes: float | None = None,
    heldout_fraction: float = 0.2,
    validation_fraction: float = 0.2,
    split_by: str = "project",
    max_module_growth_pct: float = 1.0,
    min_validation_gain_pct: float = 0.1,
    extra_inlining_max_users: int | None = 3,
    extra_inlining_min_functions: int | None = 150,
    gate_thresholds: tuple = GATE_THRESHOLDS,
    evaluate_heldout: bool = True,
    seed: int = 0,
    progress: bool = True,
    search_data: str | None = None,
) -> dict[str, Any]:
    """Run rounds of search and imitation; returns the state.  ``search_data``: a tune directory imitated too
    (as round 0); ``round_search_minutes`` None: a round searches until the time is up."""
    # before any work (0 rounds would publish nothing, and say nothing)
    check_positive("search_loop.train_search", time_budget_minutes=time_budget_minutes,
                   round_search_minutes=round_search_minutes)
    check_counts("search_loop.train_search", 1, max_rounds=max_rounds, compiles_per_round=compiles_per_round)
    check_counts("search_loop.train_search", 0, seed=seed)
    check_at_least_zero("search_loop.train_search", max_module_growth_pct=max_module_growth_pct,
                        min_validation_gain_pct=min_validation_gain_pct)
    rule = GateRule(max_module_growth_pct, min_validation_gain_pct)
    bound = bound_of({MAX_USERS_KEY: extra_inlining_max_users, MIN_FUNCTIONS_KEY: extra_inlining_min_functions},
                     "search_loop.train_search")
    workers = workers or Workers()
    t_start = time.monotonic()
    # wall clock: the searches' deadline is checked in the workers (processes, or other machines with Ray)
    run_end = time.time() + 60.0 * time_budget_minutes
    root_dir = os.path.abspath(root_dir)
    corpus = load_corpus(corpus_dir)
    train_mods, val_mods, held_mods = split_three(corpus.modules, heldout_fraction, validation_fraction, seed,
                                                   split_by)
    if not train_mods or not val_mods:
        raise ConfigError(f"corpus {corpus_dir}: {len(train_mods)} training and {len(val_mods)} validation modules "
                          "(need at least one of each; lower the fractions or add modules)")
    make_root(root_dir)
    split = dict(heldout_fraction=heldout_fraction, validation_fraction=validation_fraction, split_by=split_by,
                 seed=seed)
    claim_root(root_dir, "search", corpus_dir, split)  # before search/: a refused root stays as it was
    os.makedirs(os.path.join(root_dir, "search"), exist_ok=True)
    state = read_state(root_dir, required=("round", "history"))
    if state:
        log.info("resuming %s after round %d", root_dir, state["round"])
    else:
        state = {"format": "mlgo_host.search_state/1", "round": 0, "history": [], "best_val": None,
                 "best_round": None, "best_policy": None, "default_slot": None, "searched": {}}
    if search_data:
        _merge_round(root_dir, 0, _tune_results(search_data, val_mods, held_mods))
    pool = workers.pool("mlgo_host.search.worker:SearchWorker", advisor="inline",
                        baseline_cache=os.path.join(root_dir, "baselines"))
    with pool, contextlib.closing(Summaries(root_dir)) as summaries:
        while state["round"] < max_rounds and _time_left(state, t_start, time_budget_minutes):
            t0 = time.monotonic()
            r = state["round"] + 1
            deadline = search_deadline(state, run_end, time.time(), round_search_minutes)
            row = _one_round(pool, r, state, root_dir, train_mods, val_mods, held_mods, workers, compiles_per_round,
                             gate_thresholds, rule, bound, evaluate_heldout, seed, progress, deadline)
            row["round_s"] = round(time.monotonic() - t0, 1)
            state["history"].append(row)
            state["round"] = r
            summaries.scalars(r, {tag: row.get(k) for k, tag in SCALARS.items()})
            atomic_write_json(os.path.join(root_dir, STATE), state)
            print(_summary_line(row), file=sys.stderr, flush=True)
        if state.get("best_policy") and not os.path.isdir(os.path.join(root_dir, "saved_policy")):
            publish_policy(state["best_policy"], os.path.join(root_dir, "saved_policy"))
        return state


def _one_round(pool, r, state, root_dir, train_mods, val_mods, held_mods, workers, compiles, thresholds,
               rule, bound, heldout, seed, progress, deadline=None) -> dict[str, Any]:
    base_dir = state.get("best_policy")
    data = _read_data(root_dir)  # the search's prior learns from it, then this round joins it
    t0 = time.monotonic()
    results = _search_round(root_dir, pool, r, base_dir, train_mods, state, compiles, progress, deadline,
                            earlier=_seen(data))
    t_search = time.monotonic() - t0
    _note_modules(state, results, r)
    data = _merge_round(root_dir, r, results, data)
    seen = _seen(data)
    if not seen:
        raise ConfigError(f"round {r}: the time was up before the search measured any module "
                          "(raise time_budget_minutes or round_search_minutes)")
    t1 = time.monotonic()
    policy_dir = os.path.join(root_dir, "policy", str(r))
    fit = train_imitation(examples_from_search(seen), policy_dir, default_slot=state["default_slot"],
                          compiler=compiler_version(workers.clang_path).splitlines()[0], seed=seed + r,
                          extra={"round": r})
    if bound:  # before the gate: it is chosen for the policy as it will run
        set_inlining_bound(policy_dir, bound)
    t2 = time.monotonic()
    gate, table, val = _choose_gate(pool, policy_dir, val_mods, thresholds, rule, progress, r)
    set_gate(policy_dir, gate, chosen_on="validation", round=r, rule=dataclasses.asdict(rule),
             table={str(k): v for k, v in table.items()})
    row = _round_row(r, results, data, fit, gate, val, t_search, t2 - t1, time.monotonic() - t2, compiles)
    if state.get("best_val") is None or val["size_change_pct"] < state["best_val"]:
        state.update(best_val=val["size_change_pct"], best_round=r, best_policy=policy_dir)
        publish_policy(policy_dir, os.path.join(root_dir, "saved_policy"))
    if heldout and held_mods:
        report = _report(pool, policy_dir, None, held_mods, progress, f"round {r}: held-out")
        row["heldout_pct"] = report.summary().change_percent or 0.0
        # modules more than 1 % bigger than -Oz
        row["heldout_bigger_1pct"] = sum(x.policy_text > 1.01 * x.baseline_text for x in report.rows if x.ok)
    return row


def _search_round(root_dir, pool, r, base_dir, mods: list[Module], state, compiles, progress,
                  deadline: float | None = None, earlier: Sequence[dict] = ()) -> list[dict]:
    """Search every module around the current policy, those searched longest ago first; the prior learns from
    ``earlier`` rounds' flips too; no compile starts after ``deadline`` (a ``time.time()``).  The results
    are kept so a run killed after the search resumes with them."""
    path = os.path.join(root_dir, "search", f"round-{r}.pkl")
    if os.path.exists(path):
        return _load_pickle(path)
    pool.broadcast("set_policy", policy_blob_from_dir(base_dir) if base_dir else {"heuristic": "default"})
    searched = state.get("searched") or {}
    order = list(mods)  # the results' order (what the imitation reads), whatever order they ran in
    mods = sorted(mods, key=lambda m: searched.get(m.name, 0))  # stable: the corpus order among equals
    store = RoundResults()
    Passes(pool, store, mods, {"per_module": compiles / max(1, len(mods))}, deadline, progress,
           earlier=earlier, label=f"round {r}: search").run()
    results = [store.results[m.name] for m in order if m.name in store.results]
    _dump_pickle(path, results)
    return results


def _load_pickle(path: str):
    with open(path, "rb") as f:
        return pickle.load(f)


def _dump_pickle(path: str, obj) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)


def search_deadline(state: dict, run_end: float, now: float, round_search_minutes: float | None) -> float:
    """When the next round's search stops dispatching compiles: the run's end less what the last round needed
    after its search, and at most ``round_search_minutes`` from ``now``."""
    last = state["history"][-1] if state["history"] else None
    reserve = max(0.0, float(last["round_s"]) - float(last["search_s"])) if last else 0.0
    end = run_end - reserve
    return end if round_search_minutes is None else min(end, now + 60.0 * round_search_minutes)


def _note_modules(state: dict, results: list[dict], r: int) -> None:
    """What the next rounds' order and the imitation need to know."""
    searched = state.setdefault("searched", {})  # module -> the last round that searched it
    for res in [x for x in results if x["status"] == "ok"]:
        searched[res["name"]] = r
        state["default_slot"] = state.get("default_slot") or res.get("default_slot")


def _read_data(root_dir: str) -> dict:
    """What the rounds so far merged (:func:`_merge_round`)."""
    path = os.path.join(root_dir, "search", "data.pkl")
    return _load_pickle(path) if os.path.exists(path) else {"best": {}, "flip_only": [], "merged": []}


def _seen(data: dict) -> list[dict]:
    """Every best trajectory and every flip the merged rounds measured."""
    return list(data["best"].values()) + data["flip_only"]


def _merge_round(root_dir: str, r: int, results: list[dict], data: dict | None = None) -> dict:
    """Each module's best trajectory over all rounds and every flip tried, kept under ``search/``;
    ``data``: what :func:`_read_data` gave, if read."""
    data = _read_data(root_dir) if data is None else data
    if r in data["merged"]:  # a resumed run: this round is in already
        return data
    data["merged"].append(r)
    for res in [x for x in results if x["status"] == "ok"]:
        old = data["best"].get(res["name"])
        best, other = (res, old) if old is None or res["best_size"] < old["best_size"] else (old, res)
        data["best"][res["name"]] = best
        if other is not None:  # its flips stay examples
            data["flip_only"].append(dict(other, raw=b"", actions=np.zeros(0, np.int64)))
    _dump_pickle(os.path.join(root_dir, "search", "data.pkl"), data)
    return data


def _tune_results(path: str, val_mods: list[Module], held_mods: list[Module]) -> list[dict]:
    """A tune directory's search results but for the validation and held-out modules (no choice may read them)."""
    keep_out = {m.name for m in val_mods} | {m.name for m in held_mods}
    res = [r for r in load_tune_results(path) if r["name"] not in keep_out]
    if not res:
        raise ConfigError(f"search_data {path}: no tuned module outside the validation and held-out splits")
    log.info("search_data %s: %d tuned modules, %d flips", path, len(res), sum(len(r["flips"]) for r in res))
    return res


def _choose_gate(pool, policy_dir, val_mods, thresholds, rule, progress, r):
    """The best gate threshold on the validation split, its table and validation row."""
    sizes: dict[float, dict[str, int]] = {}
    defaults: dict[str, int] = {}
    for thr in thresholds:
        report = _report(pool, policy_dir, thr, val_mods, progress, f"round {r}: validation gate {thr}")
        ok = [x for x in report.rows if x.ok]
        sizes[thr] = {x.module: x.policy_text for x in ok}
        defaults.update({x.module: x.baseline_text for x in ok})
    gate, table = choose_gate(sizes, defaults, rule)
    row = table.get(gate, {"size_change_pct": 0.0, "worst_module_pct": 0.0})
    return gate, table, {k: row[k] for k in ("size_change_pct", "worst_module_pct")}


def _report(pool, policy_dir, threshold, mods, progress, desc) -> EvalReport:
    """The greedy policy of ``policy_dir`` on ``mods``, gated at ``threshold`` (None: as saved)."""
    blob = policy_blob_from_dir(policy_dir)
    if threshold is not None:
        md = json.loads(blob["files"][METADATA])
        md["gate"] = {"threshold": float(threshold)}
        blob["files"][METADATA] = json.dumps(md).encode()
    pool.broadcast("set_policy", blob)
    return evaluate_on_pool(pool, mods, desc=desc, progress=progress)


def _time_left(state: dict, t_start: float, budget_min: float) -> bool:
    """Would another round, as long as the last, fit the budget?"""
    spent = time.monotonic() - t_start
    last = state["history"][-1]["round_s"] if state["history"] else 0.0
    return spent + last <= 60.0 * budget_min


def _change_pct(results: Sequence[dict], key: str, empty: float | None = math.nan) -> float | None:
    """The ``key`` sizes (``policy_size``: the round's starting policy) of ``results`` against -Oz, in % of
    -Oz's total; ``empty`` when nothing was measured."""
    ok = [r for r in results if r.get("status") == "ok" and r.get(key) is not None]
    d = sum(r["default_size"] for r in ok)
    return 100.0 * (sum(r[key] for r in ok) - d) / d if d else empty


def _round_row(r, results, data, fit, gate, val, t_search, t_train, t_gate, planned) -> dict[str, Any]:
    flips = [f for x in results for f in x.get("flips", ())]
    compiles = sum(x["compiles"] for x in results)
    return {
        "round": r, "modules": sum(x["status"] == "ok" for x in results), "compiles": compiles,
        "compiles_planned": planned,
        "modules_skipped": sum(x["status"] == "skipped" for x in results),
        "modules_stopped_by_time": sum(x.get("stopped") == "time" for x in results),
        "flips_tried": len(flips), "flips_accepted": sum(f["accepted"] for f in flips),
        "round_search_pct": _change_pct(results, "best_size"),
        "train_policy_pct": _change_pct(results, "policy_size", empty=None),
        "headroom_pct": _change_pct(list(data["best"].values()), "best_size"),
        "compiles_per_minute": round(60.0 * compiles / max(t_search, 1e-9), 1),
        # every compile counted (probes, references, splits), as bench/tune.py counts them
        "flips_per_compile": round(len(flips) / max(compiles, 1), 2),
        "search_minutes": round(t_search / 60.0, 2),
        "examples": fit["examples"], "imitation_loss": fit["loss"], "weighted_accuracy": fit["weighted_accuracy"],
        "gate": gate, "validation_pct": val["size_change_pct"], "validation_worst_pct": val["worst_module_pct"],
        "search_s": round(t_search, 1), "train_s": round(t_train, 1), "gate_s": round(t_gate, 1),
    }


def _summary_line(row: dict) -> str:
    def pct(v):
        return "n/a" if v is None else f"{v:+.3f}%"

    parts = [f"round {row['round']}:", f"search {pct(row['round_search_pct'])} (headroom {pct(row['headroom_pct'])})",
             f"{row['flips_accepted']}/{row['flips_tried']} flips kept",
             f"{row['flips_per_compile']:g} flips/compile", f"{row['compiles_per_minute']:.0f} compiles/min",
             f"policy train {pct(row['train_policy_pct'])}", f"validation {pct(row['validation_pct'])} "
             f"(gate {row['gate']:g})"]
    if "heldout_pct" in row:
        parts.append(f"held-out {pct(row['heldout_pct'])}")
    if row["modules_skipped"] or row["modules_stopped_by_time"]:
        parts.append(f"(time up: search stopped in {row['modules_stopped_by_time']} modules, "
                     f"{row['modules_skipped']} not started)")
    parts.append(f"{row['round_s']:.0f}s")
    return " ".join(parts)
