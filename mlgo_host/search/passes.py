"""How a search's compiles (or its time) are shared among the modules, for ``tune`` and each round of search-then-
imitate (docs/search.md).  Results go to a store as they arrive: a ``TuneStore``, or :class:`RoundResults`."""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from mlgo_host.corpus.corpus import Module
from mlgo_host.search.flips import fit_flip_model
from mlgo_host.search.starts import Starts, starts_pending
from mlgo_host.search.worker import SearchTask, run_searches

#: passes over the modules at most (each shares the compiles left again)
MAX_PASSES = 6


class RoundResults:
    """Search results in memory: each module's latest, or ``skipped`` for one the deadline left unstarted."""

    def __init__(self):
        self.results: dict[str, dict] = {}

    def add(self, res: dict) -> None:
        if res["status"] == "skipped" and res["name"] in self.results:
            return  # (a pass the deadline cut: the module keeps what it found)
        self.results[res["name"]] = res


class Passes:
    """A probe of every module not searched yet, its other starts, then passes, each sharing what is left
    (:func:`shares`).  ``earlier``: results whose flips the flip model also learns from; ``label`` begins every
    progress line."""

    #: the probe's compiles: the channel compile and the always-inline remarks
    PROBE = 2
    #: of the compiles left after the probe, what the first pass shares
    FIRST_SHARE = 0.5

    def __init__(self, pool, store, mods: list[Module], budget: dict, deadline: float | None,
                 progress: bool, *, prior: str | None = None, starts: Starts = Starts(),
                 earlier: Sequence[dict] = (), label: str = "tune"):
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
        self.earlier = list(earlier)
        self.label = label

    def left(self) -> int:
        """Compiles still to spend (time mode: as many as the time allows)."""
        if self.per_module is None:
            return 10**9 if time.time() < self.deadline else 0
        return int(self.per_module * len(self.mods)) - self.compiles()

    def compiles(self) -> int:
        """The compiles the store's results of the modules took."""
        return sum(self.store.results[m.name]["compiles"] for m in self.mods if m.name in self.store.results)

    def _model(self) -> dict | None:
        """The flip-gain model fitted on every flip measured so far (with features)."""
        m = fit_flip_model(self.earlier + [r for r in self.store.results.values() if r["status"] == "ok"])
        return m.to_json() if m is not None else None

    def _open(self) -> list[dict]:
        return [r for n, r in self.store.results.items() if n in self.by_name and r["status"] == "ok"
                and r.get("search") == "batched" and r["stopped"] != "exhausted"]

    def run(self) -> None:
        self.t0 = time.time()
        new = [m for m in self.mods if m.name not in self.store.results]
        if new and self.per_module is None:
            # a deadline: each module's starts in its probe's task (no stage waits for the slowest module);
            # first those trying the start policy (it finds the most per compile), the smallest first
            order = sorted(new, key=lambda m: (self.starts_of.of(m.language)[1] is None, m.size))
            self._stage("probe and starts", [SearchTask(m.to_task(), self.PROBE + self.starts_of.cost(m.language),
                                                        deadline=self.deadline, prior=self.prior, starts_only=True)
                                             for m in order])
        elif new and self.left() > 0:
            # compiles and a deadline (a round of search-then-imitate): each probe goes on with its part of
            # the compiles (by module size), so a deadline that ends the round early finds flips measured
            budgets = self._first_budgets(new) if self.deadline is not None else [self.PROBE] * len(new)
            model = self._model() if self.deadline is not None else None
            self._stage("probe", [SearchTask(m.to_task(), b, model, self.deadline, prior=self.prior)
                                  for m, b in zip(new, budgets)])
        self._stage("starts", self._starts())
        for k in range(1, 1 + MAX_PASSES):
            open_, left = self._open(), self.left()
            if not open_ or left <= 0:
                return
            first = not any(_paid(r) for r in open_) and k == 1
            timed = self.per_module is None
            if timed:
                budget = first_batches_then_shares(open_, self._seconds_for_pass(), paid=not first)
            else:
                total = int(np.ceil(self.FIRST_SHARE * left)) if first else left
                budget = shares(open_, total, paid=not first)
            model = self._model()
            before = self.compiles()
            # the longest shares first, so the pass's last task ends close to the others; under a
            # deadline the modules not searched yet before them (short tasks)
            tasks = sorted((SearchTask(self.by_name[r["name"]].to_task(), r["compiles"] + int(b), model, self.deadline,
                                       r, self.prior) for r, b in zip(open_, budget) if b > 0),
                           key=lambda t: (not t.resume["tried"] if timed else 0, (t.budget - t.resume["compiles"])
                                          * (seconds_per_compile(t.resume) if timed else 1.0)),
                           reverse=True)
            past = sum(1 for n, r in self.store.results.items() if n in self.by_name and r.get("tried"))
            self._stage("passes", tasks, f"pass {k} ({past}/{len(self.mods)} files searched past their start)")
            if self.compiles() == before:
                return

    #: the fewest compiles of a module's first task: its probe, a reference, one batch and the final compile
    FIRST_TASK = PROBE + 3

    def _first_budgets(self, new: list[Module]) -> list[int]:
        """The compiles left shared by the square root of bitcode size, at least :data:`FIRST_TASK` each."""
        w = np.sqrt(np.maximum([float(m.size) for m in new], 1.0))
        return [max(self.FIRST_TASK, int(x)) for x in self.left() * w / w.sum()]

    #: a deadline's pass shares this part of the time left (later passes share again by the bytes paid) ...
    PASS_SHARE = 0.5
    #: ... or all of it once the time left is under this share of the run's whole time
    LAST_PASS = 0.2

    def _seconds_for_pass(self) -> float:
        """The worker-seconds a deadline's pass shares (:data:`PASS_SHARE`, :data:`LAST_PASS`)."""
        now = time.time()
        whole = max(1e-3, self.deadline - self.t0)
        share = 1.0 if (self.deadline - now) < self.LAST_PASS * whole else self.PASS_SHARE
        return share * self.pool.num_workers * max(0.0, self.deadline - now)

    def _stage(self, stage: str, tasks: list[SearchTask], desc: str | None = None) -> None:
        """Run ``tasks``, adding their wall time and compiles to :attr:`spent` (progress: ``desc`` or ``stage``)."""
        t, c = time.time(), self.compiles()
        if tasks:
            run_searches(self.pool, tasks, f"{self.label}: {desc or stage}", self.progress, on_result=self.store.add)
        if self.compiles() == c:
            return  # (a stage with nothing to do)
        got = self.spent.setdefault(stage, {"seconds": 0.0, "compiles": 0})
        got["seconds"] = round(got["seconds"] + time.time() - t, 1)
        got["compiles"] += self.compiles() - c

    def _starts(self) -> list[SearchTask]:
        """The tasks measuring the other starts (:mod:`.starts`) of every probed module with decisions and
        nothing searched yet, before the passes: the most decisions first, while the compiles cover them."""
        cost = {n: self.starts_of.cost(m.language) for n, m in self.by_name.items()}
        due = sorted((r for r in self._open() if starts_pending(r) and cost[r["name"]]),
                     key=lambda r: -r.get("decisions", 0))
        if self.per_module is not None:
            spent, left = np.cumsum([cost[r["name"]] for r in due]), self.left()
            due = [r for r, c in zip(due, spent) if c <= left]
        return [SearchTask(self.by_name[r["name"]].to_task(), r["compiles"] + cost[r["name"]], deadline=self.deadline,
                           resume=r, prior=self.prior, starts_only=True) for r in due]


def _flips_left(r: dict) -> int:
    """The flips a module may still measure: its decisions not tried yet, or the flips queued, whichever is more."""
    return max(1, r.get("decisions", 1) - len(r["tried"]), len(r.get("pending") or ()))


def known_start(r: dict):
    """A stored result's compiled reference, or the probe's plain compile standing in for it;
    None when the next search must compile its start."""
    return r.get("reference") or getattr(r.get("probe"), "plain", None)


def _paid(r: dict) -> int:
    """The bytes a module's flips found: its best below its start's object (the start's own
    gain is no flip's: it says nothing of what the next compiles will find)."""
    start = min(r["default_size"], r.get("replay_start_size") or r.get("start_size") or r["default_size"])
    return max(0, start - r["best_size"])


def _search_compiles(r: dict) -> int:
    """The compiles a module's flips took (its probe's and starts' not counted)."""
    return max(1, r["compiles"] - (r.get("start_compiles") or 0))


#: the chance every flip not measured yet gets on top of the prior's (modules with flips left still get some)
FLOOR_P = 0.001
#: bytes a module is credited before it paid (so one that has not yet still gets a share)
PAID_PRIOR_BYTES = 8.0


def shares(rows: list[dict], total: float, paid: bool, timed: bool = False) -> list[int]:
    """``total`` compiles (``timed``: worker-seconds, each module's at its :func:`seconds_per_compile`) shared among
    ``rows`` by weight, heaviest first; returns each module's compiles (weights and order: docs/search.md)."""
    w = np.array([r["promise"] + FLOOR_P * _flips_left(r) if r.get("promise") is not None else _flips_left(r)
                  for r in rows], dtype=np.float64)
    cost = np.array([seconds_per_compile(r) if timed else 1.0 for r in rows])
    if paid:
        w *= np.array([(_paid(r) + PAID_PRIOR_BYTES) / _search_compiles(r) for r in rows]) / cost
    out = [0] * len(rows)
    rest, w_rest = float(total), float(w.sum())
    # (under a deadline the modules no flip was measured in yet come first)
    order = np.lexsort((-w, [bool(r["tried"]) for r in rows])) if timed else np.argsort(-w, kind="stable")
    for i in order:
        r, c = rows[i], cost[i]
        need = batch_compiles(r)
        if w_rest <= 0:
            break
        if w[i] <= 0 or rest < need * c:  # (a cheaper module may still afford its batch)
            w_rest -= w[i]
            continue
        cap = _most(r)
        out[i] = int(min(max(need, np.floor(rest * w[i] / w_rest / c)), cap, np.floor(rest / c)))
        if rest - out[i] * c < 2 * float(np.min(cost)):  # too little for anyone else's batch: this module's
            out[i] = int(min(cap, np.floor(rest / c)))
        rest -= out[i] * c
        w_rest -= w[i]
    return out


def first_batches_then_shares(rows: list[dict], seconds: float, paid: bool) -> list[int]:
    """A deadline's pass: each module no flip was measured in yet gets its first batch (:func:`batch_compiles`) and
    nothing more; the others share what those leave of ``seconds`` (:data:`SPREAD` evenly, the rest by weight)."""
    out = [0 if r["tried"] else batch_compiles(r) for r in rows]
    rest = seconds - sum(n * seconds_per_compile(r) for r, n in zip(rows, out))
    searched = [r for r in rows if r["tried"]]
    if searched and rest > 0:
        spread = evenly(searched, SPREAD * rest)
        rest -= sum(n * seconds_per_compile(r) for r, n in zip(searched, spread))
        got = iter([min(a + b, _most(r)) for r, a, b in zip(searched, spread, shares(searched, rest, paid, True))])
        out = [next(got) if r["tried"] else n for r, n in zip(rows, out)]
    return out


#: of what a deadline's pass shares among the searched modules, the part each gets the same seconds of,
#: whatever it found: C files, whose flips find fewer bytes a second than C++ ones, would otherwise get
#: little more than a batch (chosen on validation projects short of time for C: docs/results.md)
SPREAD = 0.9


def evenly(rows: list[dict], seconds: float) -> list[int]:
    """``seconds`` shared evenly among ``rows``, in compiles of each (none below one batch's)."""
    n = [int(seconds / len(rows) / seconds_per_compile(r)) for r in rows]
    return [min(k, _most(r)) if k >= batch_compiles(r) else 0 for r, k in zip(rows, n)]


def _most(r: dict) -> int:
    """The compiles a pass gives a module at most: two per flip left and a batch."""
    return 2 * _flips_left(r) + batch_compiles(r)


def batch_compiles(r: dict) -> int:
    """The compiles of one batch: the batch and the final compile, the start's when it has no
    compiled one, and the halves' when its last batch could not be read (``batch_cap``)."""
    return (2 if known_start(r) is not None else 3) + (2 if r.get("batch_cap") else 0)


def seconds_per_compile(r: dict) -> float:
    """A stored result's wall seconds per compile so far (one without ``seconds``: one second)."""
    return max(0.05, float(r.get("seconds") or r["compiles"]) / max(1, r["compiles"]))
