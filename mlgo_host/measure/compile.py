"""Compiling one corpus module, with a policy or without the channel, to its object's size.

Every compile goes to a temp directory that is always removed; any failure (compiler error, timeout,
host error) is a ``failed`` :class:`ModuleResult` with its reason, never a size.  Default-heuristic
sizes are cached on disk under a key of module, command, bitcode and compiler version."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import resource
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from mlgo_host.channel.problems import ready_and_run
from mlgo_host.channel.session import run_without_channel
from mlgo_host.corpus.corpus import Module
from mlgo_host.episode import Episode, EpisodeRecorder
from mlgo_host.errors import CompilerError, MlgoHostError
from mlgo_host.fsutil import atomic_write_bytes, scratch_dir
from mlgo_host.measure.objsizes import ObjectSizes, object_sizes
from mlgo_host.measure.sizes import compiler_version, text_size

if TYPE_CHECKING:  # pragma: no cover
    from mlgo_host.policies.base import Policy


def default_cache_dir() -> Path:
    """``$MLGO_HOST_CACHE``, else ``$XDG_CACHE_HOME/mlgo_host``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(os.environ.get("MLGO_HOST_CACHE") or os.path.join(base, "mlgo_host"))


class BaselineCache:
    """Default-heuristic sizes on disk, one JSON file per key so that concurrent workers never lose
    each other's entries."""

    def __init__(self, directory: str | os.PathLike | None = None):
        self.dir = Path(directory) if directory is not None else default_cache_dir() / "baselines"

    @staticmethod
    def key(module: "Module", clang: str, advisor: str = "inline") -> str:
        parts = (module.key, compiler_version(clang), advisor)
        return hashlib.sha256(b"".join(p.encode() + b"\0" for p in parts)).hexdigest()

    def _path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.json"

    def get(self, module: "Module", clang: str, advisor: str = "inline") -> int | None:
        p = self._path(self.key(module, clang, advisor))
        try:
            return int(json.loads(p.read_text())["text"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None

    def put(self, module: "Module", clang: str, text: int, advisor: str = "inline") -> None:
        k = self.key(module, clang, advisor)
        rec = {"module": module.name, "text": int(text), "compiler": compiler_version(clang).splitlines()[0],
               "advisor": advisor}
        atomic_write_bytes(str(self._path(k)), (json.dumps(rec) + "\n").encode())


@dataclasses.dataclass
class ModuleResult:
    """The outcome of one module compile."""
    name: str
    status: str  #: "ok" or "failed"
    reason: str = ""
    text_size: int | None = None  #: None unless ok
    observations: int = 0
    decisions: dict[str, int] = dataclasses.field(default_factory=dict)
    wall_s: float = 0.0
    episode: "Episode | None" = None
    compiler_cpu_s: float | None = None
    #: the object's sizes per function (only when asked for)
    sizes: "ObjectSizes | None" = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _failed(name: str, reason: str, t0: float, observations: int = 0) -> ModuleResult:
    return ModuleResult(name, "failed", reason=reason, observations=observations, wall_s=time.monotonic() - t0)


def _measured(module: "Module", prefix: str, llvm_size: str | None, clang: str,
              run: Callable[[str, str], tuple[int, str, dict]]) -> ModuleResult:
    """Compile ``module`` in a scratch directory with ``run(tmp, out)`` -> (returncode, stderr tail, fields
    of the result), and measure the object ``out``; a failure at any step is a failed result."""
    t0 = time.monotonic()
    if module.error is not None:
        return _failed(module.name, module.error, t0)
    with scratch_dir(prefix) as tmp:
        out = os.path.join(tmp, "module.o")
        try:
            returncode, tail, fields = run(tmp, out)
        except MlgoHostError as e:
            return _failed(module.name, f"{type(e).__name__}: {e}", t0)
        observations = fields.get("observations", 0)
        if returncode != 0:
            tail = " | ".join(ln.strip() for ln in tail.strip().splitlines() if ln.strip())[-500:]
            return _failed(module.name, f"compiler exited with status {returncode}: {tail}", t0, observations)
        if not os.path.exists(out):
            return _failed(module.name, "the compiler exited 0 but wrote no object", t0, observations)
        try:
            size = text_size(out, llvm_size, clang=clang)
        except MlgoHostError as e:
            return _failed(module.name, str(e), t0, observations)
        return ModuleResult(module.name, "ok", text_size=size, wall_s=time.monotonic() - t0, **fields)


def compile_module(module: "Module", policy: "Policy", advisor: str = "inline", clang: str = "clang-19",
                   llvm_size: str | None = None, timeout: float = 300.0, record: bool = False,
                   log_path: str | None = None, extra_args: Sequence[str] = (),
                   sizes: bool = False) -> ModuleResult:
    """Compile ``module`` with ``policy`` answering ``advisor``'s decisions (``extra_args``: more flags;
    ``sizes``: also split the object over its functions)."""
    def run(tmp: str, out: str) -> tuple[int, str, dict]:
        res = ready_and_run(module.compile_command(clang, out) + list(extra_args), advisor, policy,
                            timeout=timeout, recorder=EpisodeRecorder() if record else None, log_path=log_path,
                            tmpdir=tmp)
        fields = dict(observations=res.observations, decisions=dict(res.decisions), episode=res.episode,
                      compiler_cpu_s=res.compiler_cpu_s)
        if sizes and res.returncode == 0 and os.path.exists(out):
            fields["sizes"] = object_sizes(out)
        return res.returncode, res.stderr_tail, fields

    return _measured(module, "mlgo-mod-", llvm_size, clang, run)


def compile_plain(module: "Module", clang: str = "clang-19", llvm_size: str | None = None, timeout: float = 300.0,
                  extra_args: Sequence[str] = ()) -> ModuleResult:
    """Compile ``module`` without the channel (the compiler decides, or a replay in ``extra_args``)."""
    def run(_tmp: str, out: str) -> tuple[int, str, dict]:
        return (*run_without_channel(module.compile_command(clang, out) + list(extra_args), timeout=timeout), {})

    return _measured(module, "mlgo-base-", llvm_size, clang, run)


def baseline_size(module: "Module", clang: str = "clang-19", llvm_size: str | None = None,
                  cache_dir: str | os.PathLike | None = None, timeout: float = 300.0) -> int:
    """The default-heuristic text size of ``module``, compiled once and cached."""
    return baseline_size_info(module, clang, llvm_size, cache_dir, timeout)[0]


def baseline_size_info(module: "Module", clang: str = "clang-19", llvm_size: str | None = None,
                       cache_dir: str | os.PathLike | None = None, timeout: float = 300.0,
                       advisor: str = "inline") -> tuple[int, float | None]:
    """:func:`baseline_size` and the CPU seconds it cost now (None when cached); CompilerError when the
    compile fails.  The CPU is this process's waited-for children's: call it from one thread at a time."""
    cache = BaselineCache(cache_dir)
    got = cache.get(module, clang, advisor)
    if got is not None:
        return got, None
    cpu0 = _children_cpu_s()
    res = compile_plain(module, clang, llvm_size, timeout)
    if not res.ok:
        raise CompilerError(f"module {module.name!r}: the default compile failed: {res.reason}")
    size = int(res.text_size)
    cpu = _children_cpu_s() - cpu0
    cache.put(module, clang, size, advisor)
    return size, cpu


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime
