"""Train a policy over a corpus through the interactive channel.

Configuration is gin, with ml-compiler-opt's flag spellings: --gin_files
(configs/inlining/ppo.gin for PPO, configs/inlining/bc.gin for behavioural
cloning, configs/regalloc/ppo.gin for eviction) and --gin_bindings to
override macros, e.g. --gin_bindings "warmstart_policy='out/bc/saved_policy'".

State lives in --root_dir (TensorBoard events in train/, checkpoints,
state.json, policy/<iteration>/, saved_policy/); re-running the same command
resumes after the last completed iteration.

--collected DIR --baseline-stats FILE instead makes one PPO iteration from
the episodes `serve --collect DIR` kept since the last such run (see
docs/training.md, "Training from real builds").
"""

from __future__ import annotations

import argparse
import logging
import os
import warnings

from mlgo_host.commands.help import add_aliased
from mlgo_host.errors import ConfigError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root_dir", required=True, help="output directory (checkpoints, summaries, policies)")
    p.add_argument("--corpus", "--data_path", dest="corpus",
                   help="corpus directory (corpus_description.json + .bc/.cmd files); or --collected")
    p.add_argument("--collected", metavar="DIR",
                   help="train one iteration on the episodes `serve --collect DIR` kept since the last run "
                        "(instead of --corpus; needs --baseline-stats)")
    add_aliased(p, "--baseline-stats", metavar="FILE",
                help="with --collected: the --stats file of a `serve --policy default` build of the same "
                     "tree (the rewards' baseline sizes)")
    p.add_argument("--gin_files", nargs="+", action="extend", default=[], required=True, metavar="FILE",
                   help="gin configuration files")
    p.add_argument("--gin_bindings", nargs="+", action="extend", default=[], metavar="BINDING",
                   help="gin bindings overriding the files, e.g. num_iterations=5")
    add_aliased(p, "--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    from mlgo_host.channel.fifo import install_signal_cleanup

    if (args.corpus is None) == (args.collected is None):
        raise ConfigError("give exactly one of --corpus DIR (train over a corpus) and --collected DIR "
                          "(one iteration on episodes collected by serve --collect)")
    if args.collected is not None and args.baseline_stats is None:
        raise ConfigError("--collected needs --baseline-stats FILE (the stats of a --policy default build)")
    if args.corpus is not None and args.baseline_stats is not None:
        raise ConfigError("--baseline-stats goes with --collected, not --corpus")
    if os.path.exists(args.root_dir) and not os.path.isdir(args.root_dir):
        raise ConfigError(f"--root_dir {args.root_dir} is a file, not a directory")

    install_signal_cleanup()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("absl", "tensorflow"):  # SavedModel writing chatter at INFO
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # tf-agents' `state is not ()`, flagged whenever AutoGraph recompiles it: not ours to fix
    warnings.filterwarnings("ignore", message='"is not" with a literal', category=SyntaxWarning)
    from mlgo_host.training import entry  # TensorFlow and tf-agents: after the logging setup above

    entry.parse_gin(args.gin_files, args.gin_bindings)
    if args.collected is not None:
        entry.run_online(args.root_dir, args.collected, args.baseline_stats, progress=not args.no_progress)
    else:
        entry.run(root_dir=args.root_dir, corpus_dir=args.corpus, progress=not args.no_progress)
    return 0
