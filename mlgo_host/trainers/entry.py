"""Which trainer a gin configuration selects (``run.algorithm``)."""

from __future__ import annotations

import os

import gin

from mlgo_host.errors import ConfigError
from mlgo_host.fsutil import atomic_write_bytes


@gin.configurable(module="run")
def run(root_dir: str, corpus_dir: str, algorithm: str = "ppo", progress: bool = True):
    os.makedirs(root_dir, exist_ok=True)
    if algorithm == "ppo":
        from mlgo_host.trainers.train_loop import train

        result = train(root_dir, corpus_dir, progress=progress)
    elif algorithm == "bc":
        from mlgo_host.trainers.bc_loop import train_bc_from_corpus

        result = train_bc_from_corpus(root_dir, corpus_dir, progress=progress)
    else:
        raise ConfigError(f"unknown run.algorithm {algorithm!r} (ppo or bc)")
    # The operative config, as ml-compiler-opt writes it, for reproducibility.
    atomic_write_bytes(os.path.join(root_dir, "operative_config.gin"), gin.operative_config_str().encode())
    return result
