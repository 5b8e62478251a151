"""``mlgo-host tune``: the best inlining decisions found for each module of
your corpus, kept as the compiler's replay files a build applies
(``serve --replay T``, ``MLGO_REPLAY=T``, ``tune --print-flags``).

Each module is searched by batches of flips
(:func:`mlgo_host.search.driver.search_module_batched`) from the base
policy's decisions (the compiler's default unless ``--policy``), after a
probe (its decisions and call-site keys) and its other starts (inline
thresholds, the shipped policy's decisions: :mod:`.starts`).  Passes share
the compiles: by the flips the prior expects to pay, and after the first
pass also by the bytes each module paid per compile (:func:`shares`); each
module goes on from its best.

Budget: ``compiles_per_module`` (the run's target, counting what ``T``
holds already: a second run with the same figure only finishes what a
killed run left, a bigger one improves on it) or ``budget_minutes`` (this
run's wall time; no compile starts after it).  Every module's result is
written to ``T`` as it arrives (atomically), so a killed run loses only
the searches in flight; a second run continues each module from its best
without measuring the same flips again.  See :mod:`mlgo_host.search.tunedir`
for the layout of ``T``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any, Sequence

import numpy as np

from mlgo_host.channel.default_slot import default_slot
from mlgo_host.corpus.corpus import Module, load_corpus
from mlgo_host.errors import ConfigError, CorpusError
from mlgo_host.policies import check_meanings, load_policy
from mlgo_host.search.flips import fit_flip_model
from mlgo_host.search.starts import START_THRESHOLDS, STARTS_BY_LANGUAGE, Starts, starts_pending
from mlgo_host.search.tunedir import TuneStore
from mlgo_host.search.worker import SearchTask, run_searches
from mlgo_host.shipped import resolve_policy
from mlgo_host.workers.pool import make_pool

log = logging.getLogger("mlgo_host.tune")

DEFAULT_COMPILES_PER_MODULE = 30
#: passes over the modules at most (each shares the compiles left again)
MAX_PASSES = 6


def tune(corpus_dir: str, output: str, *, policy: str | None = None, budget_minutes: float | None = None,
         compiles_per_module: float | None = None, jobs: int = 2, backend: str = "local",
         ray_address: str | None = None, clang: str = "clang-19", llvm_size: str | None = None,
         module_timeout: float = 300.0, modules: Sequence[str] | None = None, progress: bool = True,
         prior: str | None = None, copies: bool = True, thresholds: bool = True,
         start_policy: str | None = None,
         starts_by_language: dict[str, Sequence[str]] | None = None) -> dict[str, Any]:
    """Tune every module of ``corpus_dir`` (or the named ``modules``) into
    ``output``; returns the summary (also in ``output/summary.json``).
    ``prior``: a shipped policy whose P(inline) orders each module's flips
    (None: the measured patterns); ``copies``: measure the flips of one
    function in copies of it (:mod:`.copies`);
    ``thresholds``: a search from the compiler's own decisions (no
    ``policy``) may start from another inline threshold (:mod:`.starts`);
    ``start_policy``: ... or from a shipped policy's decisions;
    ``starts_by_language``: which of those a module of each language tries
    (default :data:`~mlgo_host.search.starts.STARTS_BY_LANGUAGE`; each start
    is measured: a module starts from the smallest, -Oz's own included)."""
    t0 = time.monotonic()
    budget = _budget(budget_minutes, compiles_per_module)
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    mods = _select(load_corpus(corpus_dir), modules, corpus_dir)
    _check_meanings(policy, (prior, start_policy), clang, module_timeout)
    store = TuneStore.open(output, corpus_dir, policy, clang, mods)
    deadline = time.time() + 60.0 * budget_minutes if budget_minutes is not None else None
    pool_opts = {"ray_address": ray_address} if backend == "ray" else {}
    from_default = store.manifest["base"] == "default"
    by_language = tuple((k, tuple(v)) for k, v in (starts_by_language or STARTS_BY_LANGUAGE).items())
    starts = Starts(START_THRESHOLDS if thresholds and from_default else (), start_policy if from_default else None,
                    by_language)
    pool = make_pool(backend, jobs, "mlgo_host.search.worker:SearchWorker",
                     {"clang": clang, "llvm_size": llvm_size, "advisor": "inline", "module_timeout": module_timeout,
                      "baseline_cache": os.path.join(store.path, "baselines"), "copies": copies,
                      "thresholds": starts.thresholds, "start_policy": starts.policy,
                      "starts_by_language": by_language},
                     **pool_opts)
    try:
        pool.broadcast("set_policy", store.policy_blob())
        spent0 = store.compiles(mods)
        passes = Passes(pool, store, mods, budget, deadline, progress, prior=prior, starts=starts)
        passes.run()
    finally:
        pool.close()
    minutes = (time.monotonic() - t0) / 60.0
    return store.report(mods, run_minutes=minutes, run_compiles=store.compiles(mods) - spent0, spent=passes.spent)


def _budget(minutes: float | None, per_module: float | None) -> dict:
    if minutes is not None and per_module is not None:
        raise ConfigError("give --budget-minutes or --compiles-per-module, not both")
    if minutes is not None and minutes <= 0:
        raise ConfigError(f"--budget-minutes must be positive, got {minutes:g}")
    if per_module is not None and per_module < 2:
        raise ConfigError(f"--compiles-per-module must be at least 2 (a start and a flip), got {per_module:g}")
    if minutes is None and per_module is None:
        per_module = DEFAULT_COMPILES_PER_MODULE
    return {"minutes": minutes, "per_module": per_module}


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


# -- the passes -------------------------------------------------------------------


class Passes:
    """The search of the modules: a probe of every module not searched yet
    (its decisions and keys: two compiles, one without decisions), its
    threshold starts (:meth:`starts`), then passes, each module going on
    from its best; modules that measured every flip are done.  With a
    compile budget, each pass shares what is left (the first
    :data:`FIRST_SHARE` of it) by :func:`shares`: by the flips the prior
    expects to pay (or the flips left, without a prior), and after the first
    pass also by the bytes each module paid per compile."""

    #: the probe's compiles: the channel compile and the always-inline remarks
    PROBE = 2
    #: of the compiles left after the probe, what the first pass shares
    FIRST_SHARE = 0.5

    def __init__(self, pool, store: "TuneStore", mods: list[Module], budget: dict, deadline: float | None,
                 progress: bool, *, prior: str | None = None, starts: Starts = Starts()):
        self.pool, self.store, self.mods = pool, store, mods
        self.by_name = {m.name: m for m in mods}
        self.per_module = budget["per_module"]
        self.deadline = deadline
        self.progress = progress
        self.prior = prior
        #: stage (probe, starts, passes) -> its wall seconds and compiles, for the summary
        self.spent: dict[str, dict] = {}
        #: what starts each module tries besides -Oz's own
        self.starts_of = starts

    def left(self) -> int:
        """Compiles still to spend (time mode: as many as the time allows)."""
        if self.per_module is None:
            return 10**9 if time.time() < self.deadline else 0
        return int(self.per_module * len(self.mods)) - self.store.compiles(self.mods)

    def _model(self) -> dict | None:
        """The flip-gain model fitted on every flip measured so far (with features)."""
        m = fit_flip_model(self.store.all_results())
        return m.to_json() if m is not None else None

    def _run(self, tasks: list[tuple], desc: str) -> None:
        run_searches(self.pool, tasks, desc, self.progress, on_result=self.store.add)

    def _open(self) -> list[dict]:
        return [r for n, r in self.store.results.items() if n in self.by_name and r["status"] == "ok"
                and r.get("search") == "batched" and r["stopped"] != "exhausted"]

    def run(self) -> None:
        self.t0, self.spent0 = time.time(), self.store.compiles(self.mods)
        new = [m for m in self.mods if m.name not in self.store.results]
        if new and self.per_module is None:
            # a deadline: each module's starts in its probe's task (no stage waits for the slowest module).
            # First the modules that try the start policy (on validation nothing else finds as much per
            # compile), the smallest first: a very big module (one compile
            # can take minutes) does not hold back the others
            order = sorted(new, key=lambda m: (self.starts_of.of(m.language)[1] is None, m.size))
            self._timed("probe and starts", lambda: self._run(
                [SearchTask(m.to_task(), self.PROBE + self.starts_of.cost(m.language), deadline=self.deadline,
                            prior=self.prior, starts_only=True) for m in order], "tune: probe and starts"))
        elif new and self.left() > 0:
            self._timed("probe", lambda: self._run(
                [SearchTask(m.to_task(), self.PROBE, deadline=self.deadline, prior=self.prior) for m in new],
                "tune: probe"))
        self._timed("starts", self.starts)
        for k in range(1, 1 + MAX_PASSES):
            open_, left = self._open(), self.left()
            if not open_ or left <= 0:
                return
            first = not any(_paid(r) for r in open_) and k == 1
            timed = self.per_module is None
            if timed:
                total = self._seconds_for_pass()
            else:
                total = int(np.ceil(self.FIRST_SHARE * left)) if first else left
            budget = shares(open_, total, paid=not first, timed=timed)
            model = self._model()
            before = self.store.compiles(self.mods)
            # the longest shares first: the pass's last task then ends close to the others (its
            # workers wait for it before the next pass shares again); under a deadline the modules not
            # searched yet before them (short tasks: the deadline never finds them still queued)
            tasks = sorted((SearchTask(self.by_name[r["name"]].to_task(), r["compiles"] + int(b), model, self.deadline,
                                       r, self.prior) for r, b in zip(open_, budget) if b > 0),
                           key=lambda t: (not t.resume["tried"] if timed else 0, (t.budget - t.resume["compiles"])
                                          * (seconds_per_compile(t.resume) if timed else 1.0)),
                           reverse=True)
            self._timed("passes", lambda: self._run(tasks, f"tune: pass {k} ({self._past_start()}/{len(self.mods)} "
                                                           f"files searched past their start)"))
            if self.store.compiles(self.mods) == before:
                return

    #: a deadline's passes: each gets this share of the compiles the time left allows, so that later
    #: passes share again by the bytes each module paid per compile; the last one gets all of it
    PASS_SHARE = 0.5
    #: ... once the time left is under this share of the run's whole time
    LAST_PASS = 0.2

    def _seconds_for_pass(self) -> float:
        """With a deadline: the worker-seconds this pass shares: the
        workers' time left, a share of it (:data:`PASS_SHARE`), or all of it
        near the deadline."""
        now = time.time()
        whole = max(1e-3, self.deadline - self.t0)
        share = 1.0 if (self.deadline - now) < self.LAST_PASS * whole else self.PASS_SHARE
        return share * self.pool.num_workers * max(0.0, self.deadline - now)

    def _past_start(self) -> int:
        """Modules whose search measured a flip."""
        return sum(1 for n, r in self.store.results.items() if n in self.by_name and r.get("tried"))

    def _timed(self, stage: str, step) -> None:
        """Run ``step``, adding its wall time and compiles to the run's
        account of where the time went (:attr:`spent`)."""
        t, c = time.time(), self.store.compiles(self.mods)
        step()
        if self.store.compiles(self.mods) == c:
            return  # (a stage with nothing to do)
        got = self.spent.setdefault(stage, {"seconds": 0.0, "compiles": 0})
        got["seconds"] = round(got["seconds"] + time.time() - t, 1)
        got["compiles"] += self.store.compiles(self.mods) - c

    def starts(self) -> None:
        """The other starts (:mod:`.starts`: inline thresholds, the start
        policy's decisions) of every probed module with decisions and
        nothing searched yet, before the passes share the compiles: a few
        compiles each, and no flip finds what they find.  The most decisions
        first, while the compiles left cover them."""
        cost = {n: self.starts_of.cost(m.language) for n, m in self.by_name.items()}
        due = sorted((r for r in self._open() if starts_pending(r) and cost[r["name"]]),
                     key=lambda r: -r.get("decisions", 0))
        if self.per_module is not None:
            spent, left = np.cumsum([cost[r["name"]] for r in due]), self.left()
            due = [r for r, c in zip(due, spent) if c <= left]
        if due:
            self._run([SearchTask(self.by_name[r["name"]].to_task(), r["compiles"] + cost[r["name"]],
                                  deadline=self.deadline, resume=r, prior=self.prior, starts_only=True) for r in due],
                      "tune: starts")


def _flips_left(r: dict) -> int:
    """The flips a module may still measure: its decisions not tried yet,
    or the flips its search queued and did not measure (a second pass's
    retries, the sites winners exposed), whichever is more."""
    return max(1, r.get("decisions", 1) - len(r["tried"]), len(r.get("pending") or ()))


def known_start(r: dict):
    """A stored batched result's compiled reference, or the probe's plain
    compile standing in for it (:meth:`~mlgo_host.search.driver.BatchedSearch.begin`);
    None when the next search must compile its start."""
    return r.get("reference") or getattr(r.get("probe"), "plain", None)


def _paid(r: dict) -> int:
    """The bytes a module's flips found: its best below its start's object
    (the start's own gain, a threshold's or the start policy's, is no
    flip's: it says nothing of what the next compiles will find)."""
    start = min(r["default_size"], r.get("replay_start_size") or r.get("start_size") or r["default_size"])
    return max(0, start - r["best_size"])


def _search_compiles(r: dict) -> int:
    """The compiles a module's flips took (its probe's and starts' not counted)."""
    return max(1, r["compiles"] - (r.get("start_compiles") or 0))


#: the chance every flip not measured yet is given on top of the prior's: when the promising flips
#: are all measured, what is left still goes to the modules with flips left (by their number)
FLOOR_P = 0.001
#: bytes a module is credited before it paid (so one that has not yet still gets a share)
PAID_PRIOR_BYTES = 8.0


def shares(rows: list[dict], total: float, paid: bool, timed: bool = False) -> list[int]:
    """``total`` compiles (``timed``: worker-seconds) shared among the
    modules ``rows``; returns each module's compiles.  The weight of a
    module: the flips the prior expects to pay among those it has not
    measured (its ``promise``, plus :data:`FLOOR_P` per flip left), or
    without a prior its flips left; with ``paid``, times the bytes its flips
    found per compile of theirs (``timed``: per second) so far (plus
    :data:`PAID_PRIOR_BYTES`; :func:`_paid`): where compiles found bytes, the
    next ones are likelier to.  Under ``timed`` a module's compiles are its seconds over
    its own seconds per compile (:func:`seconds_per_compile`): a module
    whose compile takes a minute gets a share of the time, not of the
    compiles.  The heaviest modules are served first (``timed``: after the
    ones not searched yet, heaviest first too), each at least the
    compiles one batch needs (its reference first when it has none), so a
    small ``total`` goes where it pays instead of a compile to everyone; none
    gets more than two compiles per flip left."""
    w = np.array([r["promise"] + FLOOR_P * _flips_left(r) if r.get("promise") is not None else _flips_left(r)
                  for r in rows], dtype=np.float64)
    cost = np.array([seconds_per_compile(r) if timed else 1.0 for r in rows])
    if paid:
        w *= np.array([(_paid(r) + PAID_PRIOR_BYTES) / _search_compiles(r) for r in rows]) / cost
    out = [0] * len(rows)
    rest, w_rest = float(total), float(w.sum())
    # (under a deadline the modules no flip was measured in yet come first: none is left at its start
    # while another is searched to exhaustion)
    order = np.lexsort((-w, [bool(r["tried"]) for r in rows])) if timed else np.argsort(-w, kind="stable")
    for i in order:
        r, c = rows[i], cost[i]
        need = 2 if known_start(r) is not None else 3  # (a batch and the final compile, and the start's)
        if w_rest <= 0:
            break
        if w[i] <= 0 or rest < need * c:  # (a cheaper module may still afford its batch)
            w_rest -= w[i]
            continue
        cap = 2 * _flips_left(r) + need
        out[i] = int(min(max(need, np.floor(rest * w[i] / w_rest / c)), cap, np.floor(rest / c)))
        if rest - out[i] * c < 2 * float(np.min(cost)):  # too little for anyone else's batch: this module's
            out[i] = int(min(cap, np.floor(rest / c)))
        rest -= out[i] * c
        w_rest -= w[i]
    return out


def seconds_per_compile(r: dict) -> float:
    """A stored result's wall seconds per compile so far (its tasks' time
    over its compiles; a result without it counts one second)."""
    return max(0.05, float(r.get("seconds") or r["compiles"]) / max(1, r["compiles"]))


def _check_meanings(policy: str | None, shipped: Sequence[str | None], clang: str, timeout: float) -> None:
    """The search's policy and the ``shipped`` policies it uses (the prior,
    the start policy) bound by meaning on ``clang`` before any compile: an
    input one cannot supply is one error here, not one per worker."""
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
    """Where this run's time went: each stage's minutes and compiles, and
    how many modules were searched past their start (how many to exhaustion)."""
    stages = s.get("time_spent") or {}
    if not stages:
        return ""
    parts = ", ".join(f"{k} {v['seconds'] / 60:.1f} min ({v['compiles']} compiles)" for k, v in stages.items())
    return (f"\ntime: {parts}; {s['searched_past_start']} of {s['modules']} modules searched past their start, "
            f"{s['exhausted']} of them to exhaustion")


def progress_default() -> bool:
    return sys.stderr.isatty()
