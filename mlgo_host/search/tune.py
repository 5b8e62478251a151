"""``mlgo-host tune``: the best inlining decisions found for each module of your corpus, kept as the compiler's
replay files a build applies; every result is written to ``T`` as it arrives (:mod:`.tunedir`)."""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from typing import Any, Sequence

from mlgo_host.channel.default_slot import default_slot
from mlgo_host.corpus.corpus import Module, load_corpus
from mlgo_host.errors import ConfigError, CorpusError
from mlgo_host.measure.sizes import find_llvm_size
from mlgo_host.policies import check_meanings, load_policy
from mlgo_host.search.passes import Passes
from mlgo_host.search.starts import START_THRESHOLDS, Starts
from mlgo_host.search.tunedir import TuneStore
from mlgo_host.shipped import resolve_policy
from mlgo_host.workers.pool import make_pool

log = logging.getLogger("mlgo_host.tune")

DEFAULT_COMPILES_PER_MODULE = 30


def tune(corpus_dir: str, output: str, *, policy: str | None = None, budget_minutes: float | None = None,
         compiles_per_module: float | None = None, jobs: int = 2, backend: str = "local",
         ray_address: str | None = None, clang: str = "clang-19", llvm_size: str | None = None,
         module_timeout: float = 300.0, modules: Sequence[str] | None = None, progress: bool = True,
         prior: str | None = None, copies: bool = True, thresholds: bool = True,
         start_policy: str | None = None) -> dict[str, Any]:
    """Tune every module of ``corpus_dir`` (or the named ``modules``) into ``output``; returns the summary (also in
    ``output/summary.json``).  ``prior``: a shipped policy whose P(inline) orders the flips; ``copies``: measure
    flips in copies (:mod:`.copies`); ``thresholds``, ``start_policy``: the other starts a search from the
    compiler's own decisions may take (:mod:`.starts`), per language as :data:`.starts.STARTS_BY_LANGUAGE` says."""
    t0 = time.monotonic()
    budget = _budget(budget_minutes, compiles_per_module)
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    _check_positive("--timeout", module_timeout)
    mods = _select(load_corpus(corpus_dir), modules, corpus_dir)
    # the tools every search needs, found before any: a missing one would fail each module as it came
    find_llvm_size(llvm_size, clang)
    _check_meanings(policy, (prior, start_policy), clang, module_timeout)
    store = TuneStore.open(output, corpus_dir, policy, clang, mods)
    deadline = time.time() + 60.0 * budget_minutes if budget_minutes is not None else None
    from_default = store.manifest["base"] == "default"
    starts = Starts(START_THRESHOLDS if thresholds and from_default else (), start_policy if from_default else None)
    pool = make_pool(backend, jobs, "mlgo_host.search.worker:SearchWorker",
                     {"clang": clang, "llvm_size": llvm_size, "advisor": "inline", "module_timeout": module_timeout,
                      "baseline_cache": os.path.join(store.path, "baselines"), "copies": copies,
                      "thresholds": starts.thresholds, "start_policy": starts.policy,
                      "starts_by_language": starts.by_language},
                     **({"ray_address": ray_address} if backend == "ray" else {}))
    try:
        pool.broadcast("set_policy", store.policy_blob())
        passes = Passes(pool, store, mods, budget, deadline, progress, prior=prior, starts=starts)
        spent0 = passes.compiles()
        passes.run()
    finally:
        pool.close()
    minutes = (time.monotonic() - t0) / 60.0
    return store.report(mods, run_minutes=minutes, run_compiles=passes.compiles() - spent0, spent=passes.spent)


def _budget(minutes: float | None, per_module: float | None) -> dict:
    if minutes is not None and per_module is not None:
        raise ConfigError("give --budget-minutes or --compiles-per-module, not both")
    if minutes is not None:
        _check_positive("--budget-minutes", minutes)
    if per_module is not None and not (math.isfinite(per_module) and per_module >= 2):
        raise ConfigError(f"--compiles-per-module must be at least 2 (a start and a flip), got {per_module:g}")
    if minutes is None and per_module is None:
        per_module = DEFAULT_COMPILES_PER_MODULE
    return {"minutes": minutes, "per_module": per_module}


def _check_positive(option: str, value: float) -> None:
    """ConfigError unless ``value`` is a positive finite number (nan passes ``<= 0``, inf overflows later)."""
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{option} must be positive and finite, got {value:g}")


def _select(corpus, names: Sequence[str] | None, corpus_dir: str) -> list[Module]:
    mods = list(corpus.modules)
    if names is not None:
        have = {m.name: m for m in mods}
        missing = [n for n in names if n not in have]
        if missing:
            raise CorpusError(f"{corpus_dir}: no module {missing[0]!r}")
        mods = [have[n] for n in names]
    if not mods:
        raise CorpusError(f"{corpus_dir}: no module to tune")
    return mods


def _check_meanings(policy: str | None, shipped: Sequence[str | None], clang: str, timeout: float) -> None:
    """The search's policy and the ``shipped`` ones it uses bound by meaning on ``clang`` before
    any compile: an input one cannot supply is one error here, not one per worker."""
    slot = default_slot(clang, timeout)
    check_meanings(load_policy(policy or "default"), slot)
    for name in {n for n in shipped if n is not None}:
        check_meanings(load_policy(resolve_policy(name)), slot)


def summary_line(s: dict, output: str) -> str:
    return (f"{output}: {s['tuned']} modules tuned ({s['improved']} smaller), .text {s['best_text']} vs "
            f"{s['default_text']} at -Oz: {s['gain_pct']:.2f}% smaller ({s['gain_bytes']} bytes); "
            f"{s['compiles_per_module']:.1f} compiles/module, this run {s['run_compiles']} compiles in "
            f"{s['run_minutes']:.1f} min" + (f"; {s['failed']} failed" if s["failed"] else "")
            + _time_line(s))


def _time_line(s: dict) -> str:
    """Where this run's time went: each stage's minutes and compiles, and the modules searched."""
    stages = s.get("time_spent") or {}
    if not stages:
        return ""
    parts = ", ".join(f"{k} {v['seconds'] / 60:.1f} min ({v['compiles']} compiles)" for k, v in stages.items())
    return (f"\ntime: {parts}; {s['searched_past_start']} of {s['modules']} modules searched past their start, "
            f"{s['exhausted']} of them to exhaustion")


def progress_default() -> bool:
    return sys.stderr.isatty()
