"""Record a policy's observations and decisions over a corpus.

Compiles every module of --corpus with --policy answering the --advisor's
decisions and writes --output, atomically (a new or empty directory, or a
trace written before, which it replaces; another directory is refused):

  trace.json         index: advisor, policy, compiler version, the feature
                     carrying the compiler's default decision, per module
                     status, reason, observations, decisions and text size,
                     plus totals
  logs/<module>.log  each module's decisions in clang's training-log format
                     (the advice taken is the header's last feature)

A module that fails is listed with its reason; the others are still traced.
`mlgo-host vocab` and behavioural cloning read the default's trace.

example: mlgo-host trace --corpus corpus/ --output out/trace --jobs 2
"""

from __future__ import annotations

import argparse
import json
import sys

from mlgo_host.channel.problems import LEARNABLE
from mlgo_host.commands.help import LLVM_SIZE_HELP, add_aliased, at_least_one, seconds, seed


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", required=True, metavar="DIR", help="corpus directory (corpus_description.json)")
    p.add_argument("--output", required=True, metavar="DIR", help="trace directory to write")
    p.add_argument("--policy", default="default",
                   help="who answers: a heuristic (default, never, always, random; spill-weight for regalloc-priority) "
                        "or a saved policy directory")
    p.add_argument("--advisor", choices=LEARNABLE, default="inline",
                   help="which of the compiler's decisions to trace")
    p.add_argument("--jobs", "-j", type=int, default=1, metavar="N", help="modules compiled in parallel")
    add_aliased(p, "--worker-backend", choices=("local", "ray"), default="local",
                help="where the worker processes run: this machine, or a Ray cluster")
    add_aliased(p, "--ray-address", default=None, metavar="ADDRESS",
                help="with --worker-backend ray: the cluster to join (default: start a local Ray)")
    p.add_argument("--clang", default="clang-19", metavar="PATH", help="the clang driver to compile with")
    add_aliased(p, "--llvm-size", default=None, metavar="PATH", help=LLVM_SIZE_HELP)
    p.add_argument("--timeout", type=seconds, default=300.0, metavar="SECONDS",
                   help="time one module's compile may take")
    p.add_argument("--modules", type=at_least_one, default=None, metavar="N",
                   help="trace only the first N modules (default: all)")
    p.add_argument("--seed", type=seed, default=0, help="seed of stochastic policies")
    add_aliased(p, "--no-progress", action="store_true", help="no progress bar on stderr")


def run(args: argparse.Namespace) -> int:
    from mlgo_host.channel.fifo import install_signal_cleanup
    from mlgo_host.evaluation.traces import record_trace

    install_signal_cleanup()
    index = record_trace(args.corpus, args.output, policy=args.policy, advisor=args.advisor, jobs=args.jobs,
                         clang=args.clang, llvm_size=args.llvm_size, timeout=args.timeout, max_modules=args.modules,
                         seed=args.seed, progress=not args.no_progress, worker_backend=args.worker_backend,
                         pool_options={"ray_address": args.ray_address})
    failed = [m for m in index["modules"] if m["status"] != "ok"]
    for m in failed[:20]:
        print(f"failed: {m['name']}: {m['reason']}", file=sys.stderr)
    print(json.dumps({"output": args.output, **index["totals"]}))
    return 0 if index["totals"]["ok"] else 1
