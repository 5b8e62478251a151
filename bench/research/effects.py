"""The flip-effect table: each decision's measured effect, alone, from the default.

For each sampled decision of each module (training and validation splits
only): its call-site key, the features the channel sent, the default
action, and the ``.text`` change of flipping it alone from the compiler's
default decisions.  Unlike the search (:mod:`.batched`), no winner is ever
applied: every flip is measured against the same reference (the default's
decision set, replayed), so an entry is the effect of that flip in the
default's context, the quantity an effect model
(``effect_models.py`` beside this file) learns.

Measuring reuses :class:`~mlgo_host.search.driver.BatchedSearch` as it is
(the probe, the replay, the packing of flips with disjoint footprints into
one compile, the checked attribution and the splitting of failed batches)
through :meth:`~mlgo_host.search.driver.BatchedSearch.sweep`.

All decisions of the training corpus would cost tens of thousands of
compiles, so each module measures a seeded sample of at most ``cap`` of its
decisions (with a key the compiler matches).

Cache: one pickle per module under ``<root>/modules/``, written atomically
by the worker that measured it; a run that was killed goes on with the
modules that have no file yet (a module is the unit of work: one killed
mid-way is measured again).  ``<root>/manifest.json`` fixes the cap and the
seed: a resumed run with other ones is refused rather than mixing samples.

Run as a script, it builds the table on the training and validation splits
of a corpus and reports its size and cost (``bench/results/effects.json``);
a second run measures only the modules that have no entry yet.

usage: .venv/bin/python bench/research/effects.py --corpus pretrain_out/training_corpus [--root effects_out]
       [--cap 100]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import pickle
import sys
import time
from typing import Iterable, Iterator, Sequence

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, os.path.dirname(BENCH))

from mlgo_host.corpus.corpus import Module, load_corpus, split_three  # noqa: E402
from mlgo_host.errors import ConfigError, MlgoHostError  # noqa: E402
from mlgo_host.formats import read_format_json  # noqa: E402
from mlgo_host.fsutil import atomic_path, atomic_write_json  # noqa: E402
from mlgo_host.search.driver import BatchedSearch, search_of  # noqa: E402
from mlgo_host.search.probe import Probe, probe_module  # noqa: E402
from mlgo_host.search.sites import unique_decisions  # noqa: E402
from mlgo_host.search.state import Outcome  # noqa: E402
from mlgo_host.workers.pool import make_pool, map_with_progress  # noqa: E402

log = logging.getLogger("bench.effects")

FORMAT = "mlgo_host.effect_table/1"
MANIFEST = "manifest.json"
MODULES_DIR = "modules"
#: decisions measured per module at most (a seeded sample beyond it)
MAX_DECISIONS = 100
#: the splits a table may hold: the held-out split is never measured (no choice may read it)
TABLE_SPLITS = ("train", "validation")


# -- which modules ------------------------------------------------------------


def table_modules(modules: Sequence[Module], heldout_fraction: float = 0.2, validation_fraction: float = 0.2,
                  seed: int = 0) -> list[tuple[Module, str]]:
    """(module, split) of the training and validation splits, by the same
    split the search loop uses (:func:`split_three`): never a held-out one."""
    train, val, _ = split_three(modules, heldout_fraction, validation_fraction, seed)
    return [(m, "train") for m in train] + [(m, "validation") for m in val]


def entry_path(root: str, name: str) -> str:
    """The cache file of module ``name`` (names hold slashes: hashed)."""
    h = hashlib.sha256(name.encode()).hexdigest()[:20]
    return os.path.join(root, MODULES_DIR, h + ".pkl")


# -- one module -----------------------------------------------------------------


def sample_indices(probe: Probe, broken: Iterable[str], cap: int, seed: int, name: str) -> list[int]:
    """Decision indices to measure: the first decision of each key the
    compiler matches, a sample of ``cap`` of them seeded by ``seed`` and the
    module's name (the same sample whatever order modules run in)."""
    broken = set(broken)
    idx = [d.index for d in unique_decisions(probe.decisions) if d.site.key not in broken]
    if len(idx) <= cap:
        return idx
    salt = int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "big")
    pick = np.random.default_rng(salt).choice(len(idx), size=cap, replace=False)
    return sorted(idx[i] for i in pick)


def measure_effects(module: Module, cfg: dict, *, cap: int = MAX_DECISIONS, seed: int = 0,
                    split: str = "train", policy=None) -> dict:
    """One module's table entry: probe it with the compiler's default (or
    ``policy``), compile the default's decision set once (the reference)
    and measure the sampled flips by batches, none applied."""
    if split not in TABLE_SPLITS:
        raise ConfigError(f"effect table: split {split!r} is not one of {', '.join(TABLE_SPLITS)}")
    t0 = time.monotonic()
    head = {"format": FORMAT, "name": module.name, "module_key": module.key, "split": split, "cap": cap,
            "seed": seed}
    if policy is None:
        from mlgo_host.policies import load_policy

        policy = load_policy("default")
    try:
        probe = probe_module(module, policy, clang=cfg["clang"], llvm_size=cfg.get("llvm_size"),
                             timeout=cfg.get("module_timeout", 300.0))
    except MlgoHostError as e:
        return dict(head, status="failed", reason=str(e), compiles=2, wall_s=time.monotonic() - t0, flips=[])
    s = search_of(module, probe, cfg, budget=10**9)
    ev = s.ev
    outs, reason = [], ""
    try:
        if probe.episode.n:
            s.begin()
            chosen = set(sample_indices(probe, s.broken, cap, seed, module.name))
            outs = s.sweep([c for c in s.candidates() if c.index in chosen])
    except MlgoHostError as e:  # what was measured before stays
        log.warning("%s: effect table stopped: %s", module.name, e)
        outs, reason = s.outcomes, str(e)
    return dict(head, **_entry_body(s, outs), status="ok", reason=reason, compiles=ev.compiles,
                wall_s=time.monotonic() - t0)


def _entry_body(s: BatchedSearch, outs: list[Outcome]) -> dict:
    """What a table entry keeps of a sweep: per flip its key, decision
    index, raw feature record, default action, change, whether the compiler
    applied it and how many flips shared its compile."""
    ep = s.probe.episode
    nb = ep.header.observation_nbytes
    shared: dict[int, int] = {}
    for o in outs:
        shared[id(o.measured)] = shared.get(id(o.measured), 0) + 1
    flips = [{"key": o.candidate.key, "index": o.candidate.index,
              "raw": ep.raw[o.candidate.index * nb:(o.candidate.index + 1) * nb],
              "from": 0 if o.candidate.inline else 1, "delta": int(o.delta), "applied": bool(o.applied),
              "batch": shared[id(o.measured)]} for o in outs]
    return {"header": ep.header.to_json(), "decisions": ep.n, "unique_keys": len(s.sites),
            "broken_keys": len(s.broken), "probe_text": int(s.probe.text),
            "reference_text": int(s.base.text) if s.base is not None else None,
            "batches": s.batches, "splits": dict(s.splits), "flips": flips}


def write_entry(root: str, entry: dict) -> str:
    """Atomically: a reader sees a whole entry or none."""
    path = entry_path(root, entry["name"])
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        pickle.dump(entry, f, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def measure_and_store(module: Module, root: str, cfg: dict, *, cap: int, seed: int, split: str) -> dict:
    """:func:`measure_effects`, written to the cache; returns the entry's
    summary (what the driver reports, not the flips)."""
    entry = measure_effects(module, cfg, cap=cap, seed=seed, split=split)
    write_entry(root, entry)
    return summary_of(entry)


def summary_of(entry: dict) -> dict:
    return {k: entry.get(k) for k in ("name", "split", "status", "reason", "compiles", "wall_s", "decisions")} | {
        "flips": len(entry["flips"])}


# -- the table ------------------------------------------------------------------


def open_table(root: str, cap: int, seed: int, corpus: str) -> None:
    """Create ``root``'s manifest, or check a resumed table's cap and seed."""
    path = os.path.join(root, MANIFEST)
    want = {"format": FORMAT, "cap": int(cap), "seed": int(seed), "corpus": os.path.basename(os.path.normpath(corpus))}
    if os.path.exists(path):
        have = read_format_json(path, FORMAT, "effect table manifest")
        if (have.get("cap"), have.get("seed")) != (want["cap"], want["seed"]):
            raise ConfigError(f"{path}: this table samples cap={have.get('cap')} seed={have.get('seed')}, "
                              f"not cap={cap} seed={seed} (use another root)")
        return
    os.makedirs(os.path.join(root, MODULES_DIR), exist_ok=True)
    atomic_write_json(path, want)


def pending(root: str, mods: Sequence[tuple[Module, str]], smallest_first: bool = False) -> list[tuple[Module, str]]:
    """The modules without an entry yet: the training split first (what a
    model learns from, should a run be cut short), each split largest first
    (the long compiles start early, so the pool does not wait on one at the
    end) or, for a run that will be cut by time, smallest first (compile
    time grows with the module: the most measured decisions per minute)."""
    todo = [(m, sp) for m, sp in mods if not os.path.exists(entry_path(root, m.name))]
    return sorted(todo, key=lambda x: (TABLE_SPLITS.index(x[1]), x[0].size if smallest_first else -x[0].size))


def build_table(root: str, mods: Sequence[tuple[Module, str]], cfg: dict, *, cap: int = MAX_DECISIONS,
                seed: int = 0, corpus: str = "", pool=None, progress: bool = True,
                smallest_first: bool = False) -> list[dict]:
    """Measure every module of ``mods`` that has no entry yet: on ``pool``
    (a ``research_worker.ResearchWorker`` pool, each worker writing its
    module's file) or in this process.  Returns the summaries of
    the modules measured now."""
    if any(sp not in TABLE_SPLITS for _, sp in mods):
        raise ConfigError("the effect table measures training and validation modules only")
    open_table(root, cap, seed, corpus)
    todo = pending(root, mods, smallest_first)
    if pool is None:
        return [measure_and_store(m, root, cfg, cap=cap, seed=seed, split=sp) for m, sp in todo]
    tasks = [(m.to_task(), root, cap, seed, sp) for m, sp in todo]
    outs = map_with_progress(pool, "effects", tasks, desc="effect table", progress=progress)
    for o in outs:
        if not o.ok:
            log.warning("effect table: a module failed in its worker: %s", o.error)
    return [o.value for o in outs if o.ok and o.value]


def entries(root: str) -> Iterator[dict]:
    """Every cached entry of the table (any order)."""
    d = os.path.join(root, MODULES_DIR)
    for fn in sorted(os.listdir(d)) if os.path.isdir(d) else ():
        if fn.endswith(".pkl") and not fn.startswith("."):
            with open(os.path.join(d, fn), "rb") as f:
                yield pickle.load(f)


def table_report(root: str) -> dict:
    """The table's size: modules, decisions measured, compiles, minutes of
    compile time, bytes on disk, and how the flips came out."""
    ok = failed = compiles = 0
    wall = 0.0
    by_split: dict[str, int] = {}
    deltas: list[int] = []
    applied = batched = 0
    for e in entries(root):
        compiles += e["compiles"]
        wall += e["wall_s"]
        if e["status"] != "ok":
            failed += 1
            continue
        ok += 1
        by_split[e["split"]] = by_split.get(e["split"], 0) + len(e["flips"])
        for f in e["flips"]:
            applied += f["applied"]
            batched += f["batch"] > 1
            if f["applied"]:
                deltas.append(f["delta"])
    d = np.asarray(deltas, dtype=np.int64)
    return {"modules": ok, "failed_modules": failed, "decisions": sum(by_split.values()), "by_split": by_split,
            "applied": applied, "measured_in_shared_compiles": batched, "compiles": compiles,
            "worker_minutes": round(wall / 60.0, 2), "bytes_on_disk": _disk_bytes(root),
            "wins": int((d < 0).sum()), "losses": int((d > 0).sum()), "zero": int((d == 0).sum()),
            "win_bytes": int(-d[d < 0].sum()), "loss_bytes": int(d[d > 0].sum())}


def _disk_bytes(root: str) -> int:
    total = 0
    for dp, _, fns in os.walk(root):
        total += sum(os.path.getsize(os.path.join(dp, fn)) for fn in fns)
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--root", default="effects_out")
    ap.add_argument("--cap", type=int, default=MAX_DECISIONS, help="decisions measured per module at most")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--splits", default="train,validation", help="which splits to measure (never heldout)")
    ap.add_argument("--smallest-first", action="store_true",
                    help="for a run cut by time: the most decisions per minute first")
    ap.add_argument("--report-only", action="store_true", help="measure nothing: report the table as it is")
    ap.add_argument("--output", default=os.path.join(BENCH, "results", "effects.json"))
    args = ap.parse_args()
    t0 = time.monotonic()
    corpus = load_corpus(args.corpus)
    mods = [(m, sp) for m, sp in table_modules(corpus.modules, 0.2, 0.2, args.seed) if sp in args.splits.split(",")]
    root = os.path.abspath(args.root)
    cfg = {"clang": "clang-19", "module_timeout": 300.0}
    done = []
    pool = None if args.report_only else make_pool("local", args.workers, "research_worker:ResearchWorker",
                                                   {"clang": cfg["clang"], "module_timeout": cfg["module_timeout"]})
    if pool is not None:
        try:
            done = build_table(root, mods, cfg, cap=args.cap, seed=args.seed, corpus=args.corpus, pool=pool,
                               smallest_first=args.smallest_first)
        finally:
            pool.close()
    rep = table_report(root)
    rep.update({"cap": args.cap, "seed": args.seed, "modules_in_splits": len(mods),
                "measured_this_run": len(done), "this_run_minutes": round((time.monotonic() - t0) / 60.0, 2),
                "splits": args.splits,
                "command": "bench/research/effects.py --cap %d --workers %d --splits %s%s" % (
                    args.cap, args.workers, args.splits, " --smallest-first" if args.smallest_first else "")})
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(rep, f, indent=1, sort_keys=True)
    print(json.dumps(rep, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
