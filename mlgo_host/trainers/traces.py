"""Traces: a policy's observations and decisions over a corpus, on disk.

A trace directory (written by ``mlgo-host trace``, read by ``vocab`` and
behavioural cloning)::

    <trace>/
      trace.json           index (below)
      logs/<module>.log    one per module that compiled, in clang's
                           training-log format

Each ``.log`` is what LLVM's development-mode logger writes and what
:mod:`mlgo_host.channel.codec` decodes: a JSON header line listing the
features, with the advice taken (``inlining_decision`` /
``index_to_evict``) appended as the last feature; then
``{"context": ...}`` lines and, per decision, ``{"observation": i}``, the
raw little-endian tensor bytes in header order (advice last), and ``\\n``.

``trace.json``::

    {"format": "mlgo_host.trace/1", "advisor": "inline", "policy": "default",
     "compiler": "<clang --version, first line>", "default_slot": "<feature
     carrying the compiler's default decision, inliner only>",
     "modules": [{"name", "status": "ok"|"failed", "reason", "log",
                  "observations", "text_size", "decisions": {advice: count}}],
     "totals": {"modules", "ok", "failed", "observations", "text_size"}}

``text_size`` is the ``llvm-size`` text of the module's object compiled with
the traced policy.  The directory is built next to its destination and
renamed into place at the end.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
from typing import Any, Iterator, Sequence

import numpy as np

from mlgo_host.channel import codec
from mlgo_host.channel.codec import Header, Observation
from mlgo_host.errors import ConfigError, CorpusError, ProtocolError
from mlgo_host.fsutil import atomic_write_json, replace_dir

FORMAT = "mlgo_host.trace/1"
INDEX = "trace.json"
LOGS = "logs"
ADVICE_NAMES = {"inline": "inlining_decision", "regalloc-evict": "index_to_evict", "regalloc-priority": "priority"}


@dataclasses.dataclass
class TraceLog:
    """One module's decoded training log."""

    name: str
    header: Header | None  # the log's header (advice = last feature); None: empty log
    records: np.ndarray  # structured, one record per decision (fields = the header's features)
    contexts: list[str]
    advice_name: str

    @property
    def n(self) -> int:
        return int(self.records.shape[0])

    @property
    def actions(self) -> np.ndarray:
        return np.asarray(self.records[self.advice_name]).reshape(self.n)

    def features(self) -> np.ndarray:
        """The records without the advice field."""
        names = [n for n in self.records.dtype.names or () if n != self.advice_name]
        return self.records[names] if names else self.records


def read_log(path: str, advice_name: str, name: str | None = None) -> TraceLog:
    """Decode a training log written by a session (one module)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read trace log {path}: {e}") from None
    try:
        recs = codec.decode(data)
    except ProtocolError as e:
        raise ConfigError(f"trace log {path} is malformed: {e}") from None
    name = name or os.path.basename(path)
    if not recs:
        return TraceLog(name, None, np.zeros(0), [], advice_name)
    header = recs[0]
    assert isinstance(header, Header)
    if header.feature(advice_name) is None:
        raise ConfigError(f"trace log {path}: no {advice_name!r} feature (not a log of this advisor?)")
    obs = [r for r in recs if isinstance(r, Observation)]
    raw = b"".join(o.raw for o in obs)
    records = np.frombuffer(raw, dtype=header.record_dtype, count=len(obs))
    return TraceLog(name, header, records, [o.context for o in obs], advice_name)


class Trace:
    """A trace directory: its index and lazily read logs."""

    def __init__(self, path: str):
        self.path = path
        ip = os.path.join(path, INDEX)
        try:
            with open(ip, encoding="utf-8") as f:
                self.index = json.load(f)
        except FileNotFoundError:
            raise ConfigError(f"{path!r} is not a trace directory (no {INDEX}; make one with `mlgo-host trace`)") from None
        except (OSError, ValueError) as e:
            raise ConfigError(f"{ip}: unreadable: {e}") from None
        if not isinstance(self.index, dict) or self.index.get("format") != FORMAT:
            raise ConfigError(f"{ip}: not a {FORMAT} index")
        self.advisor: str = self.index.get("advisor", "inline")
        self.advice_name = ADVICE_NAMES.get(self.advisor, "")

    @property
    def default_slot(self) -> str | None:
        return self.index.get("default_slot")

    @property
    def modules(self) -> list[dict]:
        return [m for m in self.index.get("modules", []) if m.get("status") == "ok" and m.get("log")]

    def logs(self) -> Iterator[TraceLog]:
        """Every non-empty module log, in index order."""
        for m in self.modules:
            lg = read_log(os.path.join(self.path, m["log"]), self.advice_name, m["name"])
            if lg.n:
                yield lg


def load_trace(path: str) -> Trace:
    return Trace(path)


# -- recording ---------------------------------------------------------------
_W: dict[str, Any] = {}


def _init_worker(policy: str, seed: int) -> None:
    from mlgo_host.policies import load_policy

    _W["policy"] = load_policy(policy, seed=seed)


def _trace_one(task: dict, cfg: dict, log_path: str) -> dict:
    from mlgo_host.corpus.corpus import Module
    from mlgo_host.corpus.compile import compile_module

    if "policy" not in _W:
        _init_worker(cfg["policy"], cfg["seed"])
    mod = Module.from_task(task)
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    res = compile_module(mod, _W["policy"], advisor=cfg["advisor"], clang=cfg["clang"], llvm_size=cfg["llvm_size"],
                         timeout=cfg["timeout"], log_path=log_path)
    row = {"name": mod.name, "status": res.status, "reason": res.reason, "observations": res.observations,
           "text_size": res.text_size, "decisions": dict(res.decisions), "wall_s": round(res.wall_s, 3)}
    if not res.ok and os.path.exists(log_path):
        os.unlink(log_path)
    return row


def _log_rel(name: str) -> str:
    safe = name.replace("\\", "/").lstrip("/")
    if not safe or any(p in ("..", "") for p in safe.split("/")):
        raise CorpusError(f"module name {name!r} cannot be a log path")
    return os.path.join(LOGS, safe + ".log")


def record_trace(
    corpus_dir: str,
    output_dir: str,
    *,
    policy: str = "default",
    advisor: str = "inline",
    jobs: int = 1,
    clang: str = "clang-19",
    llvm_size: str | None = None,
    timeout: float = 300.0,
    max_modules: int | None = None,
    names: Sequence[str] | None = None,
    seed: int = 0,
    progress: bool = True,
) -> dict:
    """Compile every module of the corpus with ``policy`` serving
    ``advisor`` (only the modules ``names`` when given), keep each module's
    training log and object size; returns
    the index (also written as ``trace.json``)."""
    from tqdm import tqdm

    from mlgo_host.corpus.corpus import load_corpus
    from mlgo_host.corpus.compile import compiler_version

    if advisor not in ADVICE_NAMES:
        raise ConfigError(f"unknown advisor {advisor!r}; choose from {', '.join(ADVICE_NAMES)}")
    if jobs < 1:
        raise ConfigError("--jobs must be at least 1")
    corpus = load_corpus(corpus_dir)
    mods = list(corpus) if names is None else [corpus[n] for n in names]
    if max_modules is not None:
        mods = mods[:max_modules]
    if not mods:
        raise CorpusError(f"corpus {corpus_dir} has no modules")
    # Validate the policy here, in the parent, for a clear error before any work.
    from mlgo_host.policies import load_policy

    load_policy(policy, seed=seed)
    default_slot = None
    if advisor == "inline":
        from mlgo_host.channel.default_probe import default_slot as probe_slot

        default_slot = probe_slot(clang)
    version = None
    try:
        version = compiler_version(clang).splitlines()[0]
    except Exception:  # noqa: BLE001 - only informative
        version = None
    dest = os.path.abspath(output_dir)
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="." + os.path.basename(dest) + ".", dir=parent)
    cfg = {"policy": policy, "seed": seed, "advisor": advisor, "clang": clang, "llvm_size": llvm_size,
           "timeout": timeout}
    rows: list[dict | None] = [None] * len(mods)
    try:
        rels = [_log_rel(m.name) for m in mods]
        bar = tqdm(total=len(mods), desc=f"tracing {policy}", unit="module", disable=not progress, file=sys.stderr)
        try:
            if jobs == 1:
                _init_worker(policy, seed)
                for i, m in enumerate(mods):
                    rows[i] = _trace_one(m.to_task(), cfg, os.path.join(tmp, rels[i]))
                    bar.update(1)
            else:
                ctx = mp.get_context("spawn")
                with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init_worker,
                                            initargs=(policy, seed)) as ex:
                    futs = {ex.submit(_trace_one, m.to_task(), cfg, os.path.join(tmp, rels[i])): i
                            for i, m in enumerate(mods)}
                    for fut in cf.as_completed(futs):
                        i = futs[fut]
                        try:
                            rows[i] = fut.result()
                        except Exception as e:  # noqa: BLE001 - a broken worker fails the module, not the trace
                            rows[i] = {"name": mods[i].name, "status": "failed", "reason": f"{type(e).__name__}: {e}",
                                       "observations": 0, "text_size": None, "decisions": {}}
                        bar.update(1)
        finally:
            bar.close()
        for i, r in enumerate(rows):
            assert r is not None
            r["log"] = rels[i] if r["status"] == "ok" else None
        ok = [r for r in rows if r and r["status"] == "ok"]
        index = {
            "format": FORMAT, "advisor": advisor, "policy": policy, "compiler": version, "default_slot": default_slot,
            "modules": rows,
            "totals": {"modules": len(rows), "ok": len(ok), "failed": len(rows) - len(ok),
                       "observations": sum(r["observations"] for r in ok),
                       "text_size": sum(r["text_size"] or 0 for r in ok)},
        }
        atomic_write_json(os.path.join(tmp, INDEX), index)
        replace_dir(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return index


def vocab_from_trace(trace_dir: str, output_dir: str | None = None, *, num_buckets: int = 1000,
                     sampling_fraction: float = 1.0, seed: int = 0):
    """Quantile vocab of every feature of a trace (the advice excluded);
    written to ``output_dir`` when given.  Returns the Vocab."""
    from mlgo_host.policies.vocab import VocabBuilder

    tr = load_trace(trace_dir)
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
