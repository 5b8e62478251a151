"""Compute per-feature quantile vocabularies from a trace.

Writes one <feature>.buckets file per feature of the trace's logs into
--output (replaced as a whole, so only a new or empty directory or a vocab
written before; another is refused): the --num-buckets quantiles of its
observed values, one per line, as ml-compiler-opt's generate_vocab does.

example: mlgo-host vocab --trace out/trace --output out/vocab
"""

from __future__ import annotations

import argparse
import json

from mlgo_host.commands.help import add_aliased, seed


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", required=True, metavar="DIR", help="trace directory (with trace.json)")
    p.add_argument("--output", required=True, metavar="DIR", help="vocab directory to write")
    add_aliased(p, "--sampling-fraction", type=float, default=1.0, metavar="F",
                help="fraction of the observations to use, in (0, 1]")
    add_aliased(p, "--num-buckets", type=int, default=1000, metavar="N", help="quantiles per feature, 1..1000")
    p.add_argument("--seed", type=seed, default=0, help="seed of the sampling (with --sampling-fraction < 1)")


def run(args: argparse.Namespace) -> int:
    from mlgo_host.evaluation.traces import vocab_from_trace

    vocab = vocab_from_trace(args.trace, args.output, num_buckets=args.num_buckets,
                             sampling_fraction=args.sampling_fraction, seed=args.seed)
    print(json.dumps({"output": args.output, "features": len(vocab), "num_buckets": args.num_buckets}))
    return 0
