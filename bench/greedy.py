"""The plain greedy pass over the channel: the baseline bench/tune.py measures `tune` against.

Every decision of a module once, in order, one flip per compile: force the
other action at decision i (the compiler's default deciding everywhere
else), keep the flip when llvm-size .text shrinks, go on from the new best
trajectory (whose decisions may differ from there on).  Deterministic: the
same modules and compiler give the same figures.

Built from the package's public pieces (a replay policy over the default,
`compile_module`, the worker pool); the pool imports this module by name, so
its directory must be on sys.path (it is for a script run from it).
"""

from __future__ import annotations

import os
import sys
import time

from mlgo_host.measure.compile import baseline_size, compile_module
from mlgo_host.policies import load_policy
from mlgo_host.policies.replay import Replay, ReplayPolicy
from mlgo_host.workers.pool import make_pool, map_with_progress
from mlgo_host.workers.worker import CollectWorker


class GreedyWorker(CollectWorker):
    """A pool worker: :meth:`greedy` makes the greedy pass over one module."""

    def _compile(self, mod, forced: dict[int, int]):
        """(.text bytes or None when the compile failed, the trajectory) of the default with ``forced`` flips."""
        c = self.config
        default = load_policy("default")
        policy = ReplayPolicy(Replay(forced=dict(forced), base="default"), default) if forced else default
        res = compile_module(mod, policy, advisor="inline", clang=c.clang, llvm_size=c.llvm_size,
                             timeout=c.module_timeout, record=True)
        return (int(res.text_size), res.episode) if res.status == "ok" else (None, None)

    def greedy(self, task: dict) -> dict:
        mod = self._module(task)
        c = self.config
        t0 = time.monotonic()
        default_size = baseline_size(mod, clang=c.clang, llvm_size=c.llvm_size, cache_dir=c.baseline_cache,
                                     timeout=c.module_timeout)
        size, episode = self._compile(mod, {})
        forced: dict[int, int] = {}
        compiles = 1
        i = 0
        while episode is not None and i < episode.n:
            flipped = {**forced, i: 1 - int(episode.actions[i])}
            got, ep = self._compile(mod, flipped)
            compiles += 1
            if got is not None and got < size:
                size, episode, forced = got, ep, flipped
            i += 1
        return {"name": mod.name, "status": "ok" if episode is not None else "failed",
                "default_size": int(default_size), "best_size": size, "compiles": compiles,
                "decisions": episode.n if episode is not None else 0, "forced": len(forced),
                "wall_s": time.monotonic() - t0}


def greedy_pass(mods, jobs: int, work: str, clang: str) -> list[dict]:
    """The greedy pass over every module of ``mods``: the results of those
    whose start compiled."""
    pool = make_pool("local", jobs, "greedy:GreedyWorker",
                     {"clang": clang, "advisor": "inline", "baseline_cache": os.path.join(work, "baselines")})
    try:
        outs = map_with_progress(pool, "greedy", [(m.to_task(),) for m in mods], desc="greedy pass",
                                 progress=sys.stderr.isatty())
    finally:
        pool.close()
    for o in outs:
        if not o.ok:
            print(f"greedy pass: {mods[o.index].name} failed: {o.error}", file=sys.stderr)
    return [o.value for o in sorted(outs, key=lambda o: o.index) if o.ok and o.value["status"] == "ok"]
