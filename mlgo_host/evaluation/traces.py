"""Traces: a policy's observations and decisions over a corpus, on disk (written by ``mlgo-host trace``, read by
``vocab`` and behavioural cloning; the format is in docs/formats.md).  A trace directory is built next to its
destination and renamed into place."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from mlgo_host.channel import codec
from mlgo_host.channel.codec import Header, Observation
from mlgo_host.channel.problems import PROBLEMS, get_problem
from mlgo_host.corpus.corpus import Module, load_corpus
from mlgo_host.errors import ConfigError, CorpusError, ProtocolError
from mlgo_host.fsutil import atomic_write_json, check_replaceable, dir_built_aside
from mlgo_host.measure.compile import compile_module
from mlgo_host.measure.sizes import compiler_version
from mlgo_host.policies import load_policy, check_meanings
from mlgo_host.policies.vocab import BUCKETS_SUFFIX, VocabBuilder
from mlgo_host.workers.pool import make_pool, map_with_progress

FORMAT = "mlgo_host.trace/1"
INDEX = "trace.json"
LOGS = "logs"


@dataclasses.dataclass
class TraceLog:
    """One module's decoded training log."""
    header: Header | None  # None: an empty log
    records: np.ndarray  # structured, one record per decision (fields = the header's features)
    advice_name: str

    @property
    def n(self) -> int:
        return int(self.records.shape[0])

    @property
    def actions(self) -> np.ndarray:
        return np.asarray(self.records[self.advice_name]).reshape(self.n)


def read_log(path: str, advice_name: str) -> TraceLog:
    """Decode one module's training log."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read trace log {path}: {e}") from None
    try:
        recs = codec.decode(data)
    except ProtocolError as e:
        raise ConfigError(f"trace log {path} is malformed: {e}") from None
    if not recs:
        return TraceLog(None, np.zeros(0), advice_name)
    header = recs[0]
    assert isinstance(header, Header)
    if header.feature(advice_name) is None:
        raise ConfigError(f"trace log {path}: no {advice_name!r} feature (not a log of this advisor?)")
    obs = [r for r in recs if isinstance(r, Observation)]
    records = np.frombuffer(b"".join(o.raw for o in obs), dtype=header.record_dtype, count=len(obs))
    return TraceLog(header, records, advice_name)


class Trace:
    """A trace directory: its index and lazily read logs."""

    def __init__(self, path: str):
        self.path = path
        ip = os.path.join(path, INDEX)
        try:
            self.index = json.loads(Path(ip).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{path!r} is not a trace directory (no {INDEX}; "
                              "make one with `mlgo-host trace`)") from None
        except (OSError, ValueError) as e:
            raise ConfigError(f"{ip}: unreadable: {e}") from None
        if not isinstance(self.index, dict) or self.index.get("format") != FORMAT:
            raise ConfigError(f"{ip}: not a {FORMAT} index")
        mods = self.index.get("modules", [])
        if not isinstance(mods, list) or not all(isinstance(m, dict) and isinstance(m.get("log") or "", str)
                                                 for m in mods):
            raise ConfigError(f"{ip}: 'modules' must be a list of module records (with their 'log' paths)")
        self.advisor: str = self.index.get("advisor", "inline")
        self.advice_name = PROBLEMS[self.advisor].advice_name if self.advisor in PROBLEMS else ""

    def logs(self) -> Iterator[TraceLog]:
        """Every non-empty module log, in index order."""
        for m in self.index.get("modules", []):
            if m.get("status") != "ok" or not m.get("log"):
                continue
            lg = read_log(os.path.join(self.path, m["log"]), self.advice_name)
            if lg.n:
                yield lg


class TraceWorker:
    """Pool worker of :func:`record_trace`.  Logs come back as bytes, so the recording process alone
    writes the trace directory (no shared filesystem needed)."""

    def __init__(self, *, policy: str, seed: int, advisor: str, clang: str, llvm_size: str | None,
                 timeout: float):
        self.policy = load_policy(policy, seed=seed)
        self.advisor, self.clang, self.llvm_size, self.timeout = advisor, clang, llvm_size, timeout
        self.tmp = tempfile.mkdtemp(prefix="mlgo-trace-")

    def trace(self, task: dict) -> dict:
        """One module's row of the index, with its log as ``log_bytes`` when it compiled."""
        mod = Module.from_task(task)
        log_path = os.path.join(self.tmp, "module.log")
        try:
            res = compile_module(mod, self.policy, advisor=self.advisor, clang=self.clang, llvm_size=self.llvm_size,
                                 timeout=self.timeout, log_path=log_path)
            # a compile that opened no channel (nothing for the advisor) writes no log: an empty one
            log_bytes = (Path(log_path).read_bytes() if os.path.exists(log_path) else b"") if res.ok else None
        finally:
            Path(log_path).unlink(missing_ok=True)
        return {"name": mod.name, "status": res.status, "reason": res.reason, "observations": res.observations,
                "text_size": res.text_size, "decisions": dict(res.decisions), "wall_s": round(res.wall_s, 3),
                "log_bytes": log_bytes}

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def _log_rel(name: str) -> str:
    safe = name.replace("\\", "/").lstrip("/")
    if not safe or any(p in ("..", "") for p in safe.split("/")):
        raise CorpusError(f"module name {name!r} cannot be a log path")
    return os.path.join(LOGS, safe + ".log")


def record_trace(corpus_dir: str, output_dir: str, *, policy: str = "default", advisor: str = "inline", jobs: int = 1,
                 clang: str = "clang-19", llvm_size: str | None = None, timeout: float = 300.0,
                 max_modules: int | None = None, names: Sequence[str] | None = None, seed: int = 0,
                 progress: bool = True, worker_backend: str = "local", pool_options: dict | None = None) -> dict:
    """Compile the corpus's modules (or ``names``) with ``policy`` serving ``advisor`` on ``jobs`` pool
    workers, keeping each one's training log and object size; the index written as ``trace.json``."""
    problem = get_problem(advisor)
    if jobs < 1:
        raise ConfigError("--jobs must be at least 1")
    check_replaceable(output_dir, INDEX, "trace directory")  # (replaced as a whole at the end)
    corpus = load_corpus(corpus_dir)
    mods = (list(corpus) if names is None else [corpus[n] for n in names])[:max_modules]
    if not mods:
        raise CorpusError(f"corpus {corpus_dir} has no modules")
    rels = [_log_rel(m.name) for m in mods]
    pol = load_policy(policy, seed=seed)  # a bad policy fails here, before any worker starts
    slot = problem.default_slot(clang, timeout)
    check_meanings(pol, slot, advisor)
    worker = {"policy": policy, "seed": seed, "advisor": advisor, "clang": clang, "llvm_size": llvm_size,
              "timeout": timeout}
    with make_pool(worker_backend, min(jobs, len(mods)), "mlgo_host.evaluation.traces:TraceWorker", worker,
                   **(pool_options or {})) as pool:
        outcomes = map_with_progress(pool, "trace", [(m.to_task(),) for m in mods], desc=f"tracing {policy}",
                                     progress=progress, leave=True)
    rows: list[dict] = [{}] * len(mods)
    for o in outcomes:  # a worker that raised fails its module, not the trace
        rows[o.index] = o.value if o.ok else {"name": mods[o.index].name, "status": "failed",
                                              "reason": o.error, "observations": 0, "text_size": None,
                                              "decisions": {}}
    try:
        compiler = compiler_version(clang).splitlines()[0]
    except Exception:  # noqa: BLE001 - only informative
        compiler = None
    index = {"format": FORMAT, "advisor": advisor, "policy": policy, "compiler": compiler, "default_slot": slot}
    _write_trace(output_dir, index, rows, rels)
    return index


def _write_trace(output_dir: str, index: dict, rows: list[dict], rels: list[str]) -> None:
    """Logs, then ``trace.json`` (``index`` with the rows and totals), renamed into place."""
    with dir_built_aside(output_dir, replaces=(INDEX, "trace directory")) as tmp:
        for row, rel in zip(rows, rels):
            log_bytes = row.pop("log_bytes", None)
            row["log"] = rel if row["status"] == "ok" else None
            if row["log"]:
                path = os.path.join(tmp, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                Path(path).write_bytes(log_bytes or b"")
        ok = [r for r in rows if r["status"] == "ok"]
        index["modules"] = rows
        index["totals"] = {"modules": len(rows), "ok": len(ok), "failed": len(rows) - len(ok),
                           "observations": sum(r["observations"] for r in ok),
                           "text_size": sum(r["text_size"] or 0 for r in ok)}
        atomic_write_json(os.path.join(tmp, INDEX), index)


def vocab_from_trace(trace_dir: str, output_dir: str | None = None, *, num_buckets: int = 1000,
                     sampling_fraction: float = 1.0, seed: int = 0):
    """Quantile vocab of every feature of a trace but the advice, written to ``output_dir`` if given."""
    if output_dir is not None:
        check_replaceable(output_dir, "*" + BUCKETS_SUFFIX, "vocab directory")  # (replaced as a whole)
    tr = Trace(trace_dir)
    b = VocabBuilder(sampling_fraction=sampling_fraction, seed=seed, exclude=(tr.advice_name,))
    n = 0
    for lg in tr.logs():
        b.add(lg.records)
        n += lg.n
    if n == 0:
        raise ConfigError(f"trace {trace_dir} has no observations")
    vocab = b.build(num_buckets)
    if output_dir is not None:
        vocab.save(output_dir)
    return vocab
