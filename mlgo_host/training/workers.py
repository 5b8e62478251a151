"""How every trainer compiles: the gin configurable ``workers`` (bound in ``configs/inlining/common.gin``)."""

from __future__ import annotations

import dataclasses

import gin

from mlgo_host.workers.pool import make_pool


@gin.configurable("workers")
@dataclasses.dataclass(frozen=True)
class Workers:
    clang_path: str = "clang-19"
    #: None: the llvm-size of clang_path's LLVM
    llvm_size_path: str | None = None
    num_workers: int = 2
    #: 'local' (processes on this machine) or 'ray'
    worker_backend: str = "local"
    #: with 'ray': the cluster to join (None: a local Ray instance)
    ray_address: str | None = None
    #: seconds one module's compile may take
    module_timeout: float = 300.0

    def pool(self, factory: str, **worker_kwargs):
        """A pool of ``factory`` workers (``"module:Class"``) that compile with these settings."""
        kwargs = {"clang": self.clang_path, "llvm_size": self.llvm_size_path, "module_timeout": self.module_timeout,
                  **worker_kwargs}
        return make_pool(self.worker_backend, self.num_workers, factory, kwargs, ray_address=self.ray_address)
