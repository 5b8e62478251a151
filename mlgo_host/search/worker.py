"""The search's pool worker (one module's search per task, numpy policies only, never TensorFlow), and
:func:`run_searches`."""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from typing import NamedTuple

import numpy as np

from mlgo_host.channel.default_slot import default_slot
from mlgo_host.errors import MlgoHostError
from mlgo_host.measure.compile import BaselineCache, baseline_size
from mlgo_host.policies import load_policy, network_of
from mlgo_host.policies.base import Policy
from mlgo_host.policies.outline import OutlinePolicy
from mlgo_host.progress import progress_bar
from mlgo_host.search.driver import search_module_batched
from mlgo_host.search.flips import FlipGainModel
from mlgo_host.search.starts import Starts, within_deadline
from mlgo_host.shipped import resolve_policy
from mlgo_host.workers.worker import CollectWorker

log = logging.getLogger("mlgo_host.search")


class SearchTask(NamedTuple):
    """The arguments of :meth:`SearchWorker.search_batched`, in order."""

    task: dict  # Module.to_task()
    budget: int  # the module's compiles in all, its earlier ones counted
    model: dict | None = None  # the flip-gain model (FlipGainModel.to_json)
    deadline: float | None = None  # a time.time(): no compile starts after it
    resume: dict | None = None  # the module's stored result to go on from
    prior: str | None = None  # a shipped policy's name, whose P(inline) orders the flips
    starts_only: bool = False  # the probe and starts, no flip


class SearchWorker(CollectWorker):
    """A pool worker searching one module per task from the policy set by :meth:`set_policy`."""

    def search_batched(self, task: dict, budget: int, model: dict | None, deadline: float | None = None,
                       resume: dict | None = None, prior: str | None = None, starts_only: bool = False) -> dict:
        """:func:`~mlgo_host.search.driver.search_module_batched` on one task (arguments: :class:`SearchTask`)."""
        if deadline is not None and time.time() >= deadline:  # a task dispatched after the time was up
            return {"name": task["name"], "status": "skipped", "compiles": 0}
        mod = self._module(task)
        c = self.config
        slot = default_slot(c.clang, c.module_timeout)
        thresholds, start_policy = Starts(tuple(c.thresholds), c.start_policy,
                                          tuple(c.starts_by_language)).of(mod.language)
        cfg = {"clang": c.clang, "llvm_size": c.llvm_size, "module_timeout": c.module_timeout,
               "default_slot": slot, "copies": c.copies, "thresholds": thresholds, "starts_only": starts_only,
               "start_policy": _shipped_policy(start_policy) if start_policy else None}
        # -Oz's object: cached, or (a module not probed yet) its probe's plain compile, the same command
        cache = BaselineCache(c.baseline_cache)
        default = cache.get(mod, c.clang) if resume is None else resume["default_size"]
        fm = FlipGainModel.from_json(model) if model else None
        res = search_module_batched(mod, self._policy(True, 0), cfg, budget=budget, default_size=default, model=fm,
                                    deadline=deadline, resume=resume,
                                    prior=_shipped_prior(prior, slot, mod.language) if prior is not None else None)
        if default is None and res.get("default_size") is not None:
            cache.put(mod, c.clang, int(res["default_size"]))
        elif res.get("default_size") is None and res["status"] == "failed":  # (its report row still says -Oz's)
            timeout = within_deadline(c.module_timeout, deadline)  # (the user's deadline bounds this compile too)
            with contextlib.suppress(MlgoHostError):
                if timeout > 0:
                    res["default_size"] = baseline_size(mod, clang=c.clang, llvm_size=c.llvm_size,
                                                        cache_dir=c.baseline_cache, timeout=timeout)
        return res


@functools.lru_cache(maxsize=None)
def _shipped_policy(name: str) -> Policy:
    """The shipped policy ``name``, loaded once per worker."""
    return load_policy(resolve_policy(name))


@functools.lru_cache(maxsize=None)
def _shipped_prior(name: str, compiler_slot: str, language: str | None = None):
    """The shipped policy ``name``'s P(inline) for a module in ``language`` (:func:`_probs_of`), built once."""
    return _probs_of(_shipped_policy(name), compiler_slot, language)


def _probs_of(policy: Policy, compiler_slot: str | None, language: str | None = None):
    """P(inline) of a numpy policy over a batch of feature records, or None.  A policy whose part for ``language`` is an
    outline rule gives, for the inlinings that rule may refuse, one minus its model's probability that leaving the
    callee out pays (the network elsewhere): the network learned from single flips, and carries little over to C."""
    net = network_of(policy)
    if net is None:
        return None
    actor, binding = net.actor, net.check_meanings(compiler_slot)
    part = policy.for_language(language) if language else net
    outline = part.model if isinstance(part, OutlinePolicy) and compiler_slot else None

    def p1(feats: np.ndarray) -> np.ndarray:
        lg = actor.logits(feats, binding)
        p = 1.0 / (1.0 + np.exp(-(lg[:, 1] - lg[:, 0])))
        if outline is not None:
            refusable = outline.refuses(feats, feats[compiler_slot])
            p = np.where(refusable, 1.0 - outline.probabilities(feats), p)
        return p

    return p1


def run_searches(pool, tasks: list[tuple], desc: str, progress: bool, on_result) -> None:
    """Every task's search over ``pool``, each result to ``on_result`` as it arrives (failures logged)."""
    with progress_bar(total=len(tasks), desc=desc, enabled=progress, leave=False) as bar:
        def got(o) -> None:
            bar.update(1)
            if o.ok and o.value is not None:
                on_result(o.value)

        outcomes = pool.map_unordered("search_batched", tasks, None, on_result=got)
    for o in sorted(outcomes, key=lambda o: o.index):
        if not (o.ok and o.value is not None):
            log.warning("%s: search of %s failed: %s", desc, tasks[o.index][0]["name"], o.error)
