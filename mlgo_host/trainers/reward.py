"""Object sizes and rewards of modules compiled with a policy.

* :func:`text_size`: the ``text`` column of ``llvm-size`` (Berkeley format;
  it includes read-only data), as ml-compiler-opt measures inlining for size.
* :func:`reward`: ``1 - (policy + δ) / (baseline + δ)`` with δ = 0.01.
* :func:`baseline_size`: the module compiled without the channel (the
  compiler's default heuristic), cached on disk by :class:`BaselineCache`
  under a key of module name, command, bitcode digest and compiler version.
* :func:`compile_module`: one compile served by a policy over the channel
  into a temp directory that is always removed; any failure (compiler error,
  timeout, host error) is a ``failed`` :class:`ModuleResult` with its reason,
  never a size.
* :class:`MovingAverageBaseline`: per-module moving average of past policy
  sizes, the training baseline (reports stay against the default size).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlgo_host.errors import CompilerError, ConfigError, MlgoHostError
from mlgo_host.fsutil import atomic_write_bytes

if TYPE_CHECKING:  # pragma: no cover
    from mlgo_host.episode import Episode
    from mlgo_host.policies.base import Policy
    from mlgo_host.trainers.corpus import Module

DELTA = 0.01
LLVM_SIZE_CANDIDATES = ("llvm-size-19", "llvm-size")


def reward(policy_size: float, baseline_size: float, delta: float = DELTA) -> float:
    """ml-compiler-opt's size reward: positive when the policy's object is
    smaller than the baseline, 0 when equal."""
    return 1.0 - (float(policy_size) + delta) / (float(baseline_size) + delta)


@functools.lru_cache(maxsize=None)
def find_llvm_size(llvm_size: str | None = None) -> str:
    """The llvm-size binary: ``llvm_size`` if given, else ``llvm-size-19``,
    else ``llvm-size`` on PATH."""
    cands = (llvm_size,) if llvm_size else LLVM_SIZE_CANDIDATES
    for c in cands:
        p = shutil.which(c)
        if p:
            return p
    raise ConfigError(f"llvm-size not found (tried {', '.join(cands)}); install llvm-19 or pass --llvm-size")


def text_size(obj_path: str | os.PathLike, llvm_size: str | None = None, timeout: float = 60.0) -> int:
    """The ``text`` column of ``llvm-size`` (Berkeley format) for one object."""
    tool = find_llvm_size(llvm_size)
    try:
        r = subprocess.run([tool, "--format=berkeley", str(obj_path)], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CompilerError(f"llvm-size did not finish on {obj_path} within {timeout:g} s") from None
    if r.returncode != 0:
        raise CompilerError(f"llvm-size failed on {obj_path}", r.returncode, r.stderr)
    lines = [ln.split() for ln in r.stdout.strip().splitlines() if ln.strip()]
    if len(lines) < 2 or not lines[0] or lines[0][0] != "text":
        raise CompilerError(f"llvm-size printed no Berkeley table for {obj_path}: {r.stdout.strip()[:200]!r}")
    try:
        return int(lines[1][0])
    except (ValueError, IndexError):
        raise CompilerError(f"llvm-size: cannot read the text column for {obj_path}: {lines[1]!r}") from None


@functools.lru_cache(maxsize=None)
def compiler_version(clang: str) -> str:
    """``clang --version`` (cached per process); part of the baseline key."""
    try:
        r = subprocess.run([clang, "--version"], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise ConfigError(f"compiler {clang!r} not found") from None
    except subprocess.TimeoutExpired:
        raise CompilerError(f"{clang} --version did not answer within 60 s") from None
    if r.returncode != 0:
        raise CompilerError(f"{clang} --version failed", r.returncode, r.stderr)
    return r.stdout.strip()


def default_cache_dir() -> Path:
    """``$MLGO_HOST_CACHE`` or ``$XDG_CACHE_HOME/mlgo_host`` (``~/.cache/mlgo_host``)."""
    env = os.environ.get("MLGO_HOST_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mlgo_host"


class BaselineCache:
    """Default-heuristic sizes on disk, one small JSON file per key (so that
    concurrent workers never lose each other's entries), written atomically."""

    def __init__(self, directory: str | os.PathLike | None = None):
        self.dir = Path(directory) if directory is not None else default_cache_dir() / "baselines"

    @staticmethod
    def key(module: "Module", clang: str, advisor: str = "inline") -> str:
        h = hashlib.sha256()
        for part in (module.key, compiler_version(clang), advisor):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def _path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.json"

    def get(self, module: "Module", clang: str, advisor: str = "inline") -> int | None:
        p = self._path(self.key(module, clang, advisor))
        try:
            d = json.loads(p.read_text())
            return int(d["text"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None

    def put(self, module: "Module", clang: str, text: int, advisor: str = "inline") -> None:
        k = self.key(module, clang, advisor)
        rec = {"module": module.name, "text": int(text), "compiler": compiler_version(clang).splitlines()[0],
               "advisor": advisor}
        atomic_write_bytes(str(self._path(k)), (json.dumps(rec) + "\n").encode())


@dataclasses.dataclass
class ModuleResult:
    """The outcome of one module compile. ``text_size`` is None unless
    ``status == "ok"``."""

    name: str
    status: str  #: "ok" or "failed"
    reason: str = ""
    text_size: int | None = None
    observations: int = 0
    decisions: dict[str, int] = dataclasses.field(default_factory=dict)
    wall_s: float = 0.0
    episode: "Episode | None" = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _failed(name: str, reason: str, t0: float, observations: int = 0) -> ModuleResult:
    return ModuleResult(name, "failed", reason=reason, observations=observations, wall_s=time.monotonic() - t0)


def _one_line(text: str, n: int = 500) -> str:
    return " | ".join(ln.strip() for ln in text.strip().splitlines() if ln.strip())[-n:]


def compile_module(
    module: "Module",
    policy: "Policy",
    advisor: str = "inline",
    clang: str = "clang-19",
    llvm_size: str | None = None,
    timeout: float = 300.0,
    record: bool = False,
    log_path: str | None = None,
) -> ModuleResult:
    """Compile ``module`` with ``policy`` answering ``advisor``'s decisions."""
    from mlgo_host.channel.session import run_session

    t0 = time.monotonic()
    if module.error is not None:
        return _failed(module.name, module.error, t0)
    tmp = tempfile.mkdtemp(prefix="mlgo-mod-")
    try:
        out = os.path.join(tmp, "module.o")
        try:
            cmd = module.compile_command(clang, out)
            res = run_session(cmd, advisor, policy, timeout=timeout, record=record, log_path=log_path, tmpdir=tmp)
        except MlgoHostError as e:
            return _failed(module.name, f"{type(e).__name__}: {e}", t0)
        if res.returncode != 0:
            return _failed(module.name, f"compiler exited with status {res.returncode}: {_one_line(res.stderr_tail)}",
                           t0, res.observations)
        if not os.path.exists(out):
            return _failed(module.name, "the compiler exited 0 but wrote no object", t0, res.observations)
        try:
            size = text_size(out, llvm_size)
        except MlgoHostError as e:
            return _failed(module.name, str(e), t0, res.observations)
        return ModuleResult(module.name, "ok", text_size=size, observations=res.observations,
                            decisions=dict(res.decisions), wall_s=time.monotonic() - t0, episode=res.episode)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def plain_size(module: "Module", clang: str = "clang-19", llvm_size: str | None = None,
               timeout: float = 300.0) -> int:
    """Compile ``module`` without the channel (the default heuristic) and
    return its text size; CompilerError/ChannelTimeout on failure."""
    from mlgo_host.channel.session import plain_compile

    tmp = tempfile.mkdtemp(prefix="mlgo-base-")
    try:
        out = os.path.join(tmp, "module.o")
        rc, tail = plain_compile(module.compile_command(clang, out), timeout=timeout)
        if rc != 0:
            raise CompilerError(f"module {module.name!r}: the default compile failed", rc, tail)
        if not os.path.exists(out):
            raise CompilerError(f"module {module.name!r}: the default compile wrote no object")
        return text_size(out, llvm_size)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def baseline_size(
    module: "Module",
    clang: str = "clang-19",
    llvm_size: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    timeout: float = 300.0,
    advisor: str = "inline",
) -> int:
    """The default-heuristic text size of ``module``, from the on-disk cache
    when present, else compiled once and cached."""
    cache = BaselineCache(cache_dir)
    got = cache.get(module, clang, advisor)
    if got is not None:
        return got
    size = plain_size(module, clang, llvm_size, timeout)
    cache.put(module, clang, size, advisor)
    return size


@dataclasses.dataclass
class MovingAverageBaseline:
    """Per-module exponential moving average of policy sizes:
    ``avg <- decay * avg + (1 - decay) * size``, starting from the default
    size. Used as the training baseline when enabled."""

    decay: float = 0.8
    averages: dict[str, float] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.decay < 1.0:
            raise ConfigError(f"moving-average decay must be in [0, 1), got {self.decay}")

    def baseline(self, name: str, default_size: float) -> float:
        return self.averages.get(name, float(default_size))

    def update(self, name: str, size: float, default_size: float) -> float:
        prev = self.averages.get(name, float(default_size))
        self.averages[name] = self.decay * prev + (1.0 - self.decay) * float(size)
        return self.averages[name]

    def reward(self, name: str, size: float, default_size: float) -> float:
        """The reward against the current average, then the average updated."""
        r = reward(size, self.baseline(name, default_size))
        self.update(name, size, default_size)
        return r

    def state(self) -> dict[str, Any]:
        return {"decay": self.decay, "averages": dict(self.averages)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "MovingAverageBaseline":
        return cls(decay=float(state["decay"]), averages={k: float(v) for k, v in state["averages"].items()})
