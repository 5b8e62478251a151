"""The TF-free collection worker: compiles modules with the current policy and returns episodes.  The policy
comes as a blob (``{"heuristic": name}`` or ``{"files": {relpath: bytes}}``) and a task may carry the module's
bitcode: no shared filesystem is needed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import tempfile
from typing import Any, NamedTuple

from mlgo_host.corpus.corpus import Module
from mlgo_host.errors import ConfigError
from mlgo_host.fsutil import atomic_path, dir_built_aside
from mlgo_host.measure.compile import baseline_size, compile_module
from mlgo_host.policies import load_policy
from mlgo_host.policies.base import Policy


def policy_blob_from_dir(path: str) -> dict:
    """Pack the TF-free files of a saved policy directory (not the SavedModel)."""
    if not os.path.isfile(os.path.join(path, "metadata.json")):  # os.walk would pack nothing, silently
        raise ConfigError(f"{path}: not a saved policy directory (no metadata.json)")
    files = {}
    for root, dirs, names in os.walk(path):
        dirs[:] = [d for d in dirs if d != "saved_model"]
        for n in names:
            full = os.path.join(root, n)
            with open(full, "rb") as f:
                files[os.path.relpath(full, path)] = f.read()
    return {"files": files}


def _materialize(blob: dict, root: str) -> str:
    digest = hashlib.sha1()
    for k in sorted(blob["files"]):
        digest.update(k.encode())
        digest.update(blob["files"][k])
    d = os.path.join(root, "policy-" + digest.hexdigest()[:16])
    if not os.path.isdir(d):
        with dir_built_aside(d) as tmp:
            for rel, data in blob["files"].items():
                p = os.path.join(tmp, rel)
                os.makedirs(os.path.dirname(p), exist_ok=True)
                with open(p, "wb") as f:
                    f.write(data)
    return d


@dataclasses.dataclass
class WorkerConfig:
    clang: str = "clang-19"
    llvm_size: str | None = None
    advisor: str = "inline"
    module_timeout: float = 300.0
    baseline_cache: str | None = None
    copies: bool = True  # the batched search measures flips of one function in copies of it
    #: the inline thresholds a batched search may start from besides -Oz (mlgo_host.search.starts); () for none
    thresholds: tuple[int, ...] = ()
    #: a shipped policy whose decisions a batched search may start from (mlgo_host.search.driver)
    start_policy: str | None = None
    #: (language, starts it tries) pairs: mlgo_host.search.starts.Starts.by_language
    starts_by_language: tuple = ()


class CollectTask(NamedTuple):
    """The arguments of :meth:`CollectWorker.collect`, in order (a pool task)."""

    task: dict  # Module.to_task()
    seed: int
    greedy: bool = False
    record: bool = True


class CollectWorker:

    def __init__(self, **config: Any):
        self.config = WorkerConfig(**config)
        self.tmp = tempfile.mkdtemp(prefix="mlgo-worker-")
        self.policy_dir: str | None = None
        self.heuristic: str | None = None

    def set_policy(self, blob: dict) -> bool:
        self.heuristic = blob.get("heuristic")
        self.policy_dir = None if "heuristic" in blob else _materialize(blob, self.tmp)
        return True

    def _policy(self, greedy: bool, seed: int) -> Policy:
        if self.heuristic is not None:
            return load_policy(self.heuristic, seed=seed)
        if self.policy_dir is None:
            raise RuntimeError("set_policy was not called")
        return load_policy(self.policy_dir, seed=seed, greedy=greedy)

    def _module(self, task: dict) -> Module:
        mod = Module.from_task(task)
        if task.get("bc_bytes") is not None:
            p = os.path.join(self.tmp, "bc", hashlib.sha1(task["bc_bytes"]).hexdigest() + ".bc")
            if not os.path.exists(p):
                with atomic_path(p) as tmp, open(tmp, "wb") as f:
                    f.write(task["bc_bytes"])
            mod = dataclasses.replace(mod, bc_path=p)
        return mod

    def collect(self, task: dict, seed: int, greedy: bool = False, record: bool = True) -> dict:
        mod = self._module(task)
        c = self.config
        base = baseline_size(mod, clang=c.clang, llvm_size=c.llvm_size, cache_dir=c.baseline_cache,
                             timeout=c.module_timeout)
        res = compile_module(mod, self._policy(greedy, seed), advisor=c.advisor, clang=c.clang,
                             llvm_size=c.llvm_size, timeout=c.module_timeout, record=record)
        episode = res.episode.to_state() if record and res.episode is not None else None
        return {"name": task["name"], "status": res.status, "reason": res.reason,
                "policy_size": res.text_size, "baseline_size": base, "observations": res.observations,
                "wall_s": res.wall_s, "episode": episode}

    def ping(self) -> int:
        return os.getpid()

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
