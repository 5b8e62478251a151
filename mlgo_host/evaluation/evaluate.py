"""Evaluate a policy over a corpus against the compiler's default heuristic, on pool workers (numpy policies: no
TensorFlow; default sizes cached).  A module that fails in any way is a ``failed`` row with its reason.  With the
guard (:func:`apply_guard`) a module is never bigger than the default."""

from __future__ import annotations

import csv
import dataclasses
import io
import os
from typing import Any, Sequence

from mlgo_host.channel.problems import get_problem
from mlgo_host.corpus.corpus import Module, load_corpus, project_of, split_names
from mlgo_host.search.tunedir import TunedDir, TunedPolicies
from mlgo_host.errors import ConfigError, CorpusError, MlgoHostError
from mlgo_host.evaluation.plots import pyplot, save_figure
from mlgo_host.fsutil import atomic_write_bytes
from mlgo_host.measure.compile import baseline_size_info, compile_module, compile_plain
from mlgo_host.measure.reward import reward
from mlgo_host.measure.sizes import find_llvm_size
from mlgo_host.policies import load_policy, check_meanings
from mlgo_host.workers.pool import make_pool, map_with_progress
from mlgo_host.workers.worker import CollectTask

CSV_FIELDS = ("module", "baseline_text", "policy_text", "reward", "observations", "status", "reason")
#: with --guard: the policy's own size and which object was kept
GUARD_FIELDS = ("unguarded_text", "kept")
SPLITS = ("all", "train", "heldout")


@dataclasses.dataclass
class EvalRow:
    module: str
    baseline_text: int | None
    policy_text: int | None
    reward: float | None
    observations: int
    status: str
    reason: str = ""
    baseline_cpu_s: float | None = None  #: None: the size was cached
    policy_cpu_s: float | None = None
    #: with the guard: the policy's own size (None if its compile failed) and "policy" | "default"
    unguarded_text: int | None = None
    kept: str = ""
    tuned: str = ""  #: with eval --replay T: "tuned" | "stale" | "default"

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def csv_row(self) -> dict[str, Any]:
        row = {f: "" if getattr(self, f) is None else getattr(self, f) for f in CSV_FIELDS + GUARD_FIELDS}
        if self.reward is not None:
            row["reward"] = f"{self.reward:.6f}"
        return row


@dataclasses.dataclass
class EvalSummary:
    modules: int
    ok: int
    failed: int
    baseline_total: int
    policy_total: int
    smaller: int
    equal: int
    bigger: int
    mean_reward: float | None
    guard: dict | None = None  #: :func:`guard_summary`

    @property
    def change_percent(self) -> float | None:
        """Total policy size against the total baseline, in % (negative = smaller)."""
        if self.baseline_total <= 0:
            return None
        return 100.0 * (self.policy_total - self.baseline_total) / self.baseline_total

    def text(self, policy: str = "policy") -> str:
        lines = [f"{self.modules} modules evaluated with {policy}: {self.ok} ok, {self.failed} failed"]
        if self.ok:
            ch = self.change_percent
            lines.append(f"total .text: {self.policy_total} vs {self.baseline_total} default "
                         f"({'n/a' if ch is None else f'{ch:+.3f}%'})")
            lines.append(f"modules smaller: {self.smaller}, equal: {self.equal}, bigger: {self.bigger}; "
                         f"mean reward {self.mean_reward:+.5f}")
        g = self.guard
        if g is not None:
            gain = "n/a" if g["gain_percent"] is None else f"{g['gain_percent']:.3f}%"
            lines.append(f"guard: kept the policy's object on {g['kept_policy']} modules, the default's on "
                         f"{g['kept_default']} ({g['rescued']} failed policy compiles); gain {g['gain_bytes']} bytes "
                         f"({gain}) vs the unguarded policy; cost {g['default_compiles']} default compiles, "
                         f"{g['default_cpu_s']:.2f} CPU s this run (cached sizes are free; policy compiles: "
                         f"{g['policy_cpu_s']:.2f} CPU s)")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "change_percent": self.change_percent}


@dataclasses.dataclass
class EvalReport:
    policy: str
    rows: list[EvalRow]
    guard: bool = False  #: the rows went through :func:`apply_guard`

    def summary(self) -> EvalSummary:
        ok = [r for r in self.rows if r.ok]
        base = sum(r.baseline_text or 0 for r in ok)
        pol = sum(r.policy_text or 0 for r in ok)
        return EvalSummary(
            modules=len(self.rows), ok=len(ok), failed=len(self.rows) - len(ok), baseline_total=base, policy_total=pol,
            smaller=sum(1 for r in ok if (r.policy_text or 0) < (r.baseline_text or 0)),
            equal=sum(1 for r in ok if r.policy_text == r.baseline_text),
            bigger=sum(1 for r in ok if (r.policy_text or 0) > (r.baseline_text or 0)),
            mean_reward=(sum(r.reward or 0.0 for r in ok) / len(ok)) if ok else None,
            guard=guard_summary(self.rows) if self.guard else None,
        )

    def write_csv(self, path: str | os.PathLike) -> None:
        buf = io.StringIO()
        fields = CSV_FIELDS + GUARD_FIELDS if self.guard else CSV_FIELDS
        w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n", extrasaction="ignore")
        w.writeheader()
        w.writerows(r.csv_row() for r in self.rows)
        atomic_write_bytes(str(path), buf.getvalue().encode("utf-8"))

    def plot(self, path: str | os.PathLike) -> None:
        """Scatter of per-module size change (%) against baseline size."""
        plt = pyplot()
        ok = [r for r in self.rows if r.ok and r.baseline_text]
        fig, ax = plt.subplots(figsize=(8, 5))
        xs = [r.baseline_text for r in ok]
        ys = [100.0 * (r.policy_text - r.baseline_text) / r.baseline_text for r in ok]  # type: ignore[operator]
        colors = ["tab:green" if y < 0 else "tab:red" if y > 0 else "tab:gray" for y in ys]
        ax.scatter(xs, ys, s=14, c=colors, alpha=0.8)
        ax.axhline(0.0, color="black", linewidth=0.8)
        if xs and min(xs) > 0:
            ax.set_xscale("log")
        ax.set_xlabel("module .text with the default heuristic (bytes)")
        ax.set_ylabel("size change under the policy (%)")
        s = self.summary()
        ch = s.change_percent
        ax.set_title(f"{self.policy}: total {'n/a' if ch is None else f'{ch:+.2f}%'} over {s.ok} modules "
                     f"({s.smaller} smaller, {s.equal} equal, {s.bigger} bigger, {s.failed} failed)", fontsize=9)
        ax.grid(True, alpha=0.3)
        save_figure(plt, fig, path)


def apply_guard(row: EvalRow) -> EvalRow:
    """The row of a guarded compile: the smaller valid object of the policy's and the default's (the
    policy's on a tie; the default's when the policy's compile failed)."""
    if row.baseline_text is None:
        return row
    if row.ok and row.policy_text is not None and row.policy_text <= row.baseline_text:
        return dataclasses.replace(row, unguarded_text=row.policy_text, kept="policy")
    reason = "" if row.ok else f"guard: kept the default; the policy's compile failed: {row.reason}"
    return dataclasses.replace(row, policy_text=row.baseline_text, reward=reward(row.baseline_text, row.baseline_text),
                               status="ok", reason=reason, unguarded_text=row.policy_text if row.ok else None,
                               kept="default")


def guard_summary(rows: Sequence[EvalRow]) -> dict[str, Any]:
    """What the guard kept, gained against the unguarded policy, and cost: the default compiles this run
    made (cached sizes cost nothing here, while a guarded build pays one plain compile per module), with
    the policy compiles' CPU for scale."""
    g = [r for r in rows if r.kept]
    both = [r for r in g if r.unguarded_text is not None]
    unguarded = sum(r.unguarded_text for r in both)  # type: ignore[misc]
    guarded = sum(r.policy_text or 0 for r in both)
    compiled = [r.baseline_cpu_s for r in rows if r.baseline_cpu_s is not None]
    pol_cpu = [r.policy_cpu_s for r in rows if r.policy_cpu_s is not None]
    return {
        "kept_policy": sum(1 for r in g if r.kept == "policy"),
        "kept_default": sum(1 for r in g if r.kept == "default"),
        "rescued": sum(1 for r in g if r.unguarded_text is None),
        "unguarded_total": unguarded, "guarded_total": guarded, "gain_bytes": unguarded - guarded,
        "gain_percent": 100.0 * (unguarded - guarded) / unguarded if unguarded else None,
        "default_compiles": len(compiled), "default_cpu_s": round(sum(compiled), 3),
        "policy_compiles": len(pol_cpu), "policy_cpu_s": round(sum(pol_cpu), 3),
    }


def by_project(rows: Sequence[EvalRow]) -> dict[str, dict[str, Any]]:
    """Per project: modules, both ``.text`` totals, the change and the modules more than 1 % bigger."""
    acc: dict[str, list[int]] = {}
    for r in rows:
        if not r.ok:
            continue
        a = acc.setdefault(project_of(r.module), [0, 0, 0, 0])
        a[0] += r.baseline_text
        a[1] += r.policy_text
        a[2] += r.policy_text > r.baseline_text * 1.01
        a[3] += 1
    return {p: {"modules": n, "oz_text": b, "policy_text": t, "change_pct": round(100.0 * (t - b) / b, 3) if b else 0.0,
                "bigger_1pct": big} for p, (b, t, big, n) in sorted(acc.items())}


def select_modules(corpus, modules: int | None = None, split: str = "all", heldout_fraction: float = 0.1,
                   seed: int = 0, split_by: str = "project") -> list:
    """The modules to evaluate, broken ones included (to be reported): the ``split`` part, then
    ``modules`` of them evenly spread over the size order."""
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    cands = sorted(list(corpus.modules) + list(corpus.broken), key=lambda m: m.name)
    if split != "all":
        part = split_names([m.name for m in cands], heldout_fraction, 0.0, seed, split_by)
        cands = [m for m in cands if (part[m.name] == "heldout") == (split == "heldout")]
    if modules is not None:
        if modules < 1:
            raise ConfigError(f"--modules must be >= 1, got {modules}")
        if modules < len(cands):
            by_size = sorted(cands, key=lambda m: (m.size, m.name))
            step = len(by_size) / modules
            cands = sorted((by_size[int(i * step + step / 2)] for i in range(modules)), key=lambda m: m.name)
    return cands


class EvalWorker:
    """Pool worker of :func:`evaluate`: compiles modules with the greedy policy and without it."""

    def __init__(self, *, policy: str, seed: int, advisor: str, clang: str, llvm_size: str | None, timeout: float,
                 cache_dir: str | None, replay_dir: str | None = None):
        self.policy = load_policy(policy, seed=seed, greedy=True)
        self.tuned = TunedPolicies(TunedDir(replay_dir), self.policy, seed) if replay_dir else None
        self.advisor, self.clang, self.llvm_size, self.timeout = advisor, clang, llvm_size, timeout
        self.cache_dir = cache_dir

    def evaluate(self, task: dict) -> EvalRow:
        """Baseline and policy compile of one module; never raises."""
        mod = Module.from_task(task)
        if mod.error is not None:
            return EvalRow(mod.name, None, None, None, 0, "failed", mod.error)
        try:
            base, base_cpu = baseline_size_info(mod, clang=self.clang, llvm_size=self.llvm_size,
                                                cache_dir=self.cache_dir, timeout=self.timeout, advisor=self.advisor)
        except Exception as e:  # noqa: BLE001 - a report row, not a crash
            why = e if isinstance(e, MlgoHostError) else f"{type(e).__name__}: {e}"
            return EvalRow(mod.name, None, None, None, 0, "failed", f"baseline: {why}")
        try:
            flags = self.tuned.tuned.flags_for(mod.name) if self.tuned is not None else []
            if flags:  # a compiler replay (tune's batched search): no channel
                pol, tuned = None, mod.name
                res = compile_plain(mod, clang=self.clang, llvm_size=self.llvm_size, timeout=self.timeout,
                                    extra_args=flags)
            else:
                pol, tuned = self.tuned.for_module(mod.name) if self.tuned is not None else (self.policy, None)
                res = compile_module(mod, pol, advisor=self.advisor, clang=self.clang, llvm_size=self.llvm_size,
                                     timeout=self.timeout)
        except Exception as e:  # noqa: BLE001 - e.g. a policy that raises
            return EvalRow(mod.name, base, None, None, 0, "failed", f"{type(e).__name__}: {e}")
        if res.ok:
            row = EvalRow(mod.name, base, res.text_size, reward(res.text_size, base), res.observations, "ok",
                          baseline_cpu_s=base_cpu, policy_cpu_s=res.compiler_cpu_s)
        else:
            row = EvalRow(mod.name, base, None, None, res.observations, "failed", res.reason, baseline_cpu_s=base_cpu)
        if self.tuned is not None:
            row.tuned = "tuned" if flags else self.tuned.outcome(pol, tuned)["tuned"]
        return row


def evaluate(corpus_dir: str | os.PathLike, policy: str, *, modules: int | None = None, split: str = "all",
             heldout_fraction: float = 0.1, split_by: str = "project", jobs: int = 1, advisor: str = "inline",
             clang: str = "clang-19", llvm_size: str | None = None, timeout: float = 300.0,
             cache_dir: str | os.PathLike | None = None, seed: int = 0, progress: bool = True,
             selected: Sequence | None = None, guard: bool = False, replay_dir: str | None = None,
             worker_backend: str = "local", pool_options: dict | None = None) -> EvalReport:
    """Evaluate ``policy`` (a heuristic name, a policy directory or a replay file) on the selected modules
    of ``corpus_dir``; ``replay_dir``: a tune directory whose modules are compiled with their replays."""
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    # fail fast on a bad policy, in this process
    pol = load_policy(policy, seed=seed, greedy=True)
    find_llvm_size(llvm_size, clang)
    check_meanings(pol, get_problem(advisor).default_slot(clang, timeout), advisor)
    if selected is None:
        selected = select_modules(load_corpus(corpus_dir), modules, split, heldout_fraction, seed, split_by)
    if not selected:
        raise CorpusError(f"{corpus_dir}: no module selected (split {split!r})")
    worker = {"policy": policy, "seed": seed, "advisor": advisor, "clang": clang, "llvm_size": llvm_size,
              "timeout": timeout, "cache_dir": None if cache_dir is None else str(cache_dir),
              "replay_dir": None if replay_dir is None else os.path.abspath(replay_dir)}
    if replay_dir is not None:  # fail fast on a bad directory or replay file, in this process
        tuned = TunedDir(os.path.abspath(replay_dir))
        for m in selected:
            tuned.flags_for(m.name)
    # big modules first, so that a slow one does not finish last alone
    order = sorted(selected, key=lambda m: -m.size)
    with make_pool(worker_backend, min(jobs, len(order)), "mlgo_host.evaluation.evaluate:EvalWorker", worker,
                   **(pool_options or {})) as pool:
        outcomes = map_with_progress(pool, "evaluate", [(m.to_task(),) for m in order],
                                     desc=f"eval {os.path.basename(str(policy).rstrip('/'))}", progress=progress,
                                     leave=True)
    report = _report(str(policy), selected, order, outcomes, lambda name, row: row)
    if guard:
        return EvalReport(policy=report.policy, rows=[apply_guard(r) for r in report.rows], guard=True)
    return report


def evaluate_on_pool(pool, modules: Sequence[Module], *, desc: str, progress: bool = True,
                     task_of=None) -> EvalReport:
    """The greedy policy the collection workers of ``pool`` (the training loops') hold on ``modules``, as
    :func:`evaluate` reports it."""
    task_of = task_of or Module.to_task
    tasks = [CollectTask(task_of(m), 0, greedy=True, record=False) for m in modules]
    outcomes = map_with_progress(pool, "collect", tasks, desc=desc, progress=progress)
    return _report("policy", modules, modules, outcomes, _collected_row)


def _collected_row(name: str, r: dict | None) -> EvalRow:
    if r is None or r["status"] != "ok":
        return EvalRow(name, (r or {}).get("baseline_size"), None, None, 0, "failed",
                       (r or {}).get("reason") or "no answer")
    return EvalRow(name, r["baseline_size"], r["policy_size"], reward(r["policy_size"], r["baseline_size"]),
                   r["observations"], "ok")


def _report(policy: str, modules: Sequence[Module], order: Sequence[Module], outcomes, row_of) -> EvalReport:
    """The report of ``modules`` from the ``outcomes`` of their tasks in ``order``
    (``row_of(name, value)``: a worker's answer as a row)."""
    rows: dict[str, EvalRow] = {}
    for o in outcomes:
        name = order[o.index].name
        rows[name] = row_of(name, o.value) if o.ok else EvalRow(name, None, None, None, 0, "failed",
                                                                 f"worker: {o.error}")
    return EvalReport(policy=policy, rows=[rows[m.name] for m in modules])
