"""Evaluate a policy over a corpus against the compiler's default heuristic.

Every selected module is compiled without the channel (the default; its size
cached on disk, keyed by module, command and compiler version) and with the
policy answering it, in parallel workers that never import TensorFlow.
Size = the `text` column of llvm-size; reward = 1 - (policy + 0.01) /
(baseline + 0.01).  A module that fails is a `failed` row with its reason.
--output writes one CSV row per module (module, baseline_text, policy_text,
reward, observations, status, reason).  Exit status 0, or 1 when no module
could be evaluated.

--guard: each module keeps the smaller valid object of the policy's and the
default's, as `serve --guard` does.  The summary adds the guard's gain in
bytes and its cost (default compiles made in this run, their CPU seconds);
the CSV adds unguarded_text and kept (policy | default).

example: mlgo-host eval --corpus corpus/ --policy never --jobs 2 --output never.csv --plot never.png
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from mlgo_host.channel.problems import PROBLEMS
from mlgo_host.corpus.corpus import SPLIT_UNITS
from mlgo_host.commands.help import LLVM_SIZE_HELP, add_aliased, seconds, seed
from mlgo_host.errors import ConfigError
from mlgo_host.fsutil import check_file_target


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", required=True, metavar="DIR", help="corpus directory (corpus_description.json)")
    p.add_argument("--policy", default="default",
                   help="who answers: a heuristic (default, never, always, random; spill-weight for regalloc-priority) "
                        "or a saved policy (greedy)")
    p.add_argument("--advisor", choices=sorted(PROBLEMS), default="inline",
                   help="which of the compiler's decisions the policy makes")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--modules", type=int, metavar="N",
                       help="evaluate only N modules, spread evenly over the module sizes")
    which.add_argument("--split", choices=("all", "train", "heldout"), default="all",
                       help="evaluate one side of the deterministic train/held-out split")
    p.add_argument("--heldout-fraction", type=float, default=0.1, metavar="F",
                   help="share of modules held out by --split (training's is 0.2)")
    p.add_argument("--split-by", choices=SPLIT_UNITS, default="project",
                   help="what --split keeps whole on one side: a project (a module's first path "
                        "component, as training splits) or a module (default: %(default)s)")
    p.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1, metavar="N",
                   help="worker processes (default: the number of CPUs)")
    add_aliased(p, "--worker-backend", choices=("local", "ray"), default="local",
                help="where the worker processes run: this machine, or a Ray cluster")
    add_aliased(p, "--ray-address", default=None, metavar="ADDRESS",
                help="with --worker-backend ray: the cluster to join (default: start a local Ray)")
    p.add_argument("--clang", default="clang-19", metavar="PATH", help="clang binary compiling the modules")
    p.add_argument("--llvm-size", default=None, metavar="PATH", help=LLVM_SIZE_HELP)
    p.add_argument("--timeout", type=seconds, default=300.0, metavar="SECONDS", help="time one module compile may take")
    p.add_argument("--baseline-cache", metavar="DIR", default=None,
                   help="where default-heuristic sizes are cached (default: $MLGO_HOST_CACHE/baselines, "
                        "else $XDG_CACHE_HOME/mlgo_host/baselines, i.e. ~/.cache/mlgo_host/baselines)")
    p.add_argument("--seed", type=seed, default=0, help="seed of stochastic policies and salt of the split")
    p.add_argument("--guard", action="store_true",
                   help="keep each module's smaller valid object of the policy's and the default's "
                        "(never bigger than the default); report the guard's gain and cost")
    p.add_argument("--replay", metavar="T",
                   help="a tune directory (mlgo-host tune --output T): its modules are compiled with their tuned "
                        "replays (a module changed since tuning falls back to --policy and counts as stale)")
    p.add_argument("--output", "-o", metavar="CSV", help="write the per-module report as CSV")
    p.add_argument("--plot", metavar="PNG", help="plot per-module size change against module size")
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead of text")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def run(args: argparse.Namespace) -> int:
    from mlgo_host.channel.fifo import install_signal_cleanup
    from mlgo_host.evaluation.evaluate import evaluate

    install_signal_cleanup()  # SIGTERM unwinds: the pool stops its workers and their compiles
    if not 0.0 <= args.heldout_fraction <= 1.0:
        raise ConfigError(f"--heldout-fraction must be in [0, 1], got {args.heldout_fraction}")
    for path, what in ((args.output, "report"), (args.plot, "plot")):
        if path:
            check_file_target(path, what)  # before the compiles, whose results it keeps
    if args.baseline_cache and os.path.exists(args.baseline_cache) and not os.path.isdir(args.baseline_cache):
        raise ConfigError(f"--baseline-cache {args.baseline_cache}: not a directory")
    report = evaluate(
        args.corpus, args.policy, modules=args.modules, split=args.split, heldout_fraction=args.heldout_fraction,
        split_by=args.split_by, jobs=args.jobs, advisor=args.advisor, clang=args.clang, llvm_size=args.llvm_size,
        timeout=args.timeout, cache_dir=args.baseline_cache, seed=args.seed, progress=not args.no_progress,
        guard=args.guard, replay_dir=args.replay, worker_backend=args.worker_backend,
        pool_options={"ray_address": args.ray_address},
    )
    if args.output:
        report.write_csv(args.output)
    if args.plot:
        report.plot(args.plot)
    s = report.summary()
    if args.json:
        print(json.dumps(s.as_dict(), indent=1))
    else:
        name = f"tuned {args.replay} over {args.policy}" if args.replay else args.policy
        print(s.text(name + (" (guarded)" if args.guard else "")))
        if args.replay:
            n = {k: sum(1 for r in report.rows if r.tuned == k) for k in ("tuned", "stale", "default")}
            print(f"  replays: {n['tuned']} modules tuned, {n['stale']} stale (changed since tuning), "
                  f"{n['default']} not tuned")
        failed = [r for r in report.rows if not r.ok]
        for r in failed[:10]:
            print(f"  failed {r.module}: {r.reason[:300]}")
        if len(failed) > 10:
            print(f"  ... and {len(failed) - 10} more failures (see the CSV)")
    if args.output:
        print(f"report: {args.output}", file=sys.stderr)
    return 0 if s.ok else 1
