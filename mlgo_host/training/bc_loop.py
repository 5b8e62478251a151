"""Behavioural cloning from a corpus (``run.algorithm = 'bc'``, docs/training.md): the trace is of PPO's
training split, so held-out modules stay unseen; ``trace/`` and ``vocab/`` are reused when run again.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import gin

from mlgo_host.corpus.corpus import load_corpus
from mlgo_host.errors import ConfigError
from mlgo_host.fsutil import atomic_write_json
from mlgo_host.learning.bc import train_bc
from mlgo_host.evaluation.traces import INDEX, record_trace, vocab_from_trace
from mlgo_host.training.checks import check_counts, claim_root, make_root
from mlgo_host.training.workers import Workers


@gin.configurable(module="bc_loop")
def train_bc_from_corpus(
    root_dir: str,
    corpus_dir: str,
    *,
    workers: Workers | None = None,
    advisor: str = "inline",
    heldout_fraction: float = 0.2,
    split_by: str = "project",
    seed: int = 0,
    max_trace_modules: int | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Trace → vocab → behavioural cloning → ``root_dir/saved_policy``; returns the BC result."""
    check_counts("bc_loop.train_bc_from_corpus", 0, seed=seed)  # a negative seed fails every trace
    check_counts("bc_loop.train_bc_from_corpus", 1, max_trace_modules=max_trace_modules)
    workers = workers or Workers()
    make_root(root_dir)
    corpus = load_corpus(corpus_dir)
    train_mods, _ = corpus.split(heldout_fraction, seed=seed, by=split_by)
    if not train_mods:
        raise ConfigError(f"corpus {corpus_dir} has no training modules")
    claim_root(root_dir, "bc", corpus_dir, dict(heldout_fraction=heldout_fraction, split_by=split_by, seed=seed))
    trace_dir = os.path.join(root_dir, "trace")
    if not os.path.exists(os.path.join(trace_dir, INDEX)):
        index = record_trace(corpus_dir, trace_dir, policy="default", advisor=advisor,
                             jobs=max(1, workers.num_workers), clang=workers.clang_path,
                             llvm_size=workers.llvm_size_path, timeout=workers.module_timeout,
                             names=[m.name for m in train_mods], max_modules=max_trace_modules, seed=seed,
                             progress=progress, worker_backend=workers.worker_backend,
                             pool_options={"ray_address": workers.ray_address})
        if index["totals"]["ok"] == 0:
            raise ConfigError(f"tracing the default policy failed on every training module of {corpus_dir}")
    vocab_dir = os.path.join(root_dir, "vocab")
    if not os.path.isdir(vocab_dir):
        vocab_from_trace(trace_dir, vocab_dir, seed=seed)
    result = train_bc(trace_dir, os.path.join(root_dir, "saved_policy"), vocab_dir=vocab_dir, seed=seed,
                      progress=progress)
    out = dataclasses.asdict(result)
    atomic_write_json(os.path.join(root_dir, "bc_result.json"), out)
    return out
