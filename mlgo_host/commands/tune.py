"""Search the best inlining decisions of each module of your corpus and keep
them as replays your build applies (`serve --replay T`).

Each module is searched from the base policy (--policy; default: the
compiler's own decisions): one channel compile names each decision's call
site, then batches of flips are compiled by the compiler's own inline
replay, each flip's gain read from the functions it touches and checked.
The likeliest winners are measured first (--prior); winners are kept and the
search goes on from the new best.  A C++ module first compiles at inline
thresholds 50, 150 and 450 and with the shipped policy's decisions and starts
from the smallest of those and -Oz; a C module starts from -Oz.  No module
gets bigger than -Oz.

T/ holds per module its best decisions as the compiler's replay file
(replays/<module>.inline.txt: a build applies it with plain compiler flags,
MLGO_REPLAY=T with mlgo-clang, or --print-flags T FILE), the flips measured
(data/, training data for search.gin: --gin_bindings "search_data='T'"),
tune.json, report.csv, report.png and summary.json.

Exit status 0, or 1 when no module could be tuned (every one failed: each
says why on stderr).  A module that failed is searched again by the next run.

Budget: --compiles-per-module K (counting what T holds: rerunning a killed
tune with the same K finishes it, a bigger K improves on it) or
--budget-minutes N (this run's wall time: most of it shared evenly among the
files, the rest going where the compiles found the most bytes per second).  A second run
continues each module from its best.

example:
  mlgo-host corpus build --compile-commands build/compile_commands.json --output corpus/
  mlgo-host tune --corpus corpus/ --output tuned/ --compiles-per-module 30 --jobs 2
  mlgo-host serve --channels /tmp/mlgo --replay tuned/ --stats build.jsonl &
  MLGO_CHANNELS=/tmp/mlgo make -j2 CC=mlgo-clang
  MLGO_REPLAY=tuned/ make -j2 CC=mlgo-clang      # no server: compiler flags only
  mlgo-host tune --print-flags tuned/ src/foo.c  # the flags of one file
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from mlgo_host.commands.help import LLVM_SIZE_HELP
from mlgo_host.errors import ConfigError
from mlgo_host.shipped import SHIPPED


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", metavar="DIR", help="corpus directory (mlgo-host corpus build)")
    p.add_argument("--output", metavar="T", help="tune directory to create or continue")
    p.add_argument("--print-flags", nargs=2, metavar=("T", "FILE"), default=None,
                   help="print the compiler flags that apply T's tuned decisions to source FILE (for build systems "
                        "that add flags per file) and exit 0; nothing for a file T did not improve or never saw, or "
                        "whose replay file is missing or damaged (a note on stderr); a T that is no tune directory "
                        "is an error (exit 2)")
    p.add_argument("--prior", default="pretrained-oz", metavar="{pretrained-oz,patterns,DIR}",
                   help="what orders each module's flips: pretrained-oz (default), the shipped policy's "
                        "probability of the other action (for C, its C part's where that part may refuse an inlining); "
                        "a saved policy directory (e.g. ROOT/saved_policy), the "
                        "same with its weights; patterns, the measured winner patterns only")
    p.add_argument("--no-copies", action="store_true",
                   help="measure each flip in place only (by default flips are measured in copies of the functions "
                        "their code lands in, many per compile, each copy checked against a control copy)")
    p.add_argument("--no-thresholds", action="store_true",
                   help="a search from the compiler's decisions: start every module from -Oz's own (by default "
                        "a C++ module also compiles at inline thresholds 50, 150 and 450 and starts from the "
                        "smallest; a build then gets that threshold among its flags)")
    p.add_argument("--start-policy", default="pretrained-oz", choices=("pretrained-oz", "none"),
                   help="a search from the compiler's decisions: also compile every C++ module with this shipped "
                        "policy's decisions, the start when smallest; none: -Oz and the thresholds only")
    p.add_argument("--policy", default=None,
                   help="base policy the search starts from: a heuristic or a saved policy directory "
                        "(default: default, the compiler's own decisions; a continued T keeps its own)")
    b = p.add_mutually_exclusive_group()
    b.add_argument("--compiles-per-module", type=float, default=None, metavar="K",
                   help="compiles per module on average, counting what T holds (default 30)")
    b.add_argument("--budget-minutes", type=float, default=None, metavar="N", help="wall-clock minutes of this run")
    p.add_argument("--modules", nargs="+", metavar="NAME", help="tune only these modules of the corpus")
    p.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1, metavar="J",
                   help="worker processes (default: the number of CPUs)")
    p.add_argument("--backend", choices=("local", "ray"), default="local", help="worker pool")
    p.add_argument("--ray-address", default=None, metavar="ADDR", help="with --backend ray: the cluster to join")
    p.add_argument("--clang", default="clang-19", metavar="PATH", help="clang binary compiling the modules")
    p.add_argument("--llvm-size", default=None, metavar="PATH", help=LLVM_SIZE_HELP)
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS", help="time one compile may take")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (default: one on a terminal)")


def _prior(prior: str) -> str | None:
    """None for the patterns alone, a shipped policy's name, or a saved policy
    directory made absolute (the workers may run elsewhere)."""
    if prior == "patterns":
        return None
    if prior in SHIPPED:
        return prior
    if not os.path.isfile(os.path.join(prior, "metadata.json")):
        raise ConfigError(f"--prior {prior}: neither pretrained-oz, patterns nor a saved policy directory "
                          "(no metadata.json)")
    return os.path.abspath(prior)


def run(args: argparse.Namespace) -> int:
    from mlgo_host.search.tune import progress_default, summary_line, tune

    if args.print_flags:
        from mlgo_host.search.tunedir import TunedDir, UnusableReplay, shell_flags

        t, source = args.print_flags
        tuned = TunedDir(t)
        name = tuned.module_of_source(source)
        if name is None:
            # a file added since the tune compiles as it is: a build adding flags to every file goes on
            gone = "" if os.path.exists(source) else " (no such file)"
            print(f"mlgo-host tune: note: {source}{gone}: {tuned.path} has no tuned flags for it (not one of its "
                  f"{len(tuned)} modules): nothing to add, the compiler decides", file=sys.stderr)
            return 0
        changed = tuned.changed(name, source)
        try:
            flags = tuned.flags_for(name, changed)
        except UnusableReplay as e:  # a flag naming it would fail the compile: as for a file T never saw
            print(f"mlgo-host tune: note: {source}: {e}: nothing to add, the compiler decides", file=sys.stderr)
            return 0
        if changed:
            print(f"mlgo-host tune: note: {source} changed since it was tuned: its flags keep the tuned sites that "
                  "still match and let the compiler decide the rest", file=sys.stderr)
        if flags:
            print(shell_flags(flags))
        return 0
    if not args.corpus or not args.output:
        raise ConfigError("give --corpus DIR and --output T (or --print-flags T FILE)")
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # unwinds like Ctrl-C: T keeps the modules finished
    s = tune(args.corpus, args.output, policy=args.policy, budget_minutes=args.budget_minutes,
             compiles_per_module=args.compiles_per_module, jobs=args.jobs, backend=args.backend,
             ray_address=args.ray_address, clang=args.clang, llvm_size=args.llvm_size, module_timeout=args.timeout,
             modules=args.modules, prior=_prior(args.prior), copies=not args.no_copies,
             thresholds=not args.no_thresholds,
             start_policy=None if args.start_policy == "none" else args.start_policy,
             progress=progress_default() and not args.no_progress)
    print(summary_line(s, args.output))
    if s["identified"] < s["tuned"]:
        print(f"note: {s['tuned'] - s['identified']} tuned modules have no recorded source (corpus built before "
              "module_sources.json): builds cannot be matched to them (rebuild the corpus with mlgo-host corpus build)")
    return 1 if s["failed"] and not s["tuned"] else 0
