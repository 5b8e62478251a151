"""Which trainer a gin configuration selects (``run.algorithm``), or
training from collected episodes (``run_online``)."""

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
    elif algorithm == "search":
        from mlgo_host.trainers.search_loop import train_search

        result = train_search(root_dir, corpus_dir, progress=progress)
    else:
        raise ConfigError(f"unknown run.algorithm {algorithm!r} (ppo, bc or search)")
    _write_operative_config(root_dir)
    return result


def run_online(root_dir: str, collected_dir: str, baseline_stats: str, progress: bool = True):
    """One iteration on collected episodes (``train --collected``); the
    warm start, vocab, compiler, seed and advisor come from the same gin
    macros as corpus training unless ``online.train_from_collected.*`` binds
    them."""
    from mlgo_host.trainers import online

    try:
        algorithm = gin.query_parameter("run.algorithm")
    except ValueError:
        algorithm = "ppo"
    if algorithm != "ppo":
        raise ConfigError(f"--collected trains PPO, this configuration selects run.algorithm {algorithm!r} "
                          f"(use configs/inlining/ppo.gin)")
    online.bind_common_macros()
    result = online.train_from_collected(root_dir, collected_dir, baseline_stats, progress=progress)
    _write_operative_config(root_dir)
    return result


def _write_operative_config(root_dir: str) -> None:
    # The operative config, as ml-compiler-opt writes it, for reproducibility.
    atomic_write_bytes(os.path.join(root_dir, "operative_config.gin"), gin.operative_config_str().encode())
