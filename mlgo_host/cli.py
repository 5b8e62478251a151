"""The ``mlgo-host`` console script. Each subcommand is ``mlgo_host/commands/<name>.py`` with
``add_arguments(parser)`` and ``run(args) -> int``, imported lazily so ``run`` starts without TensorFlow."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

import mlgo_host
from mlgo_host.commands.help import HelpFormatter
from mlgo_host.errors import CompatibilityWarning, MlgoHostError

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("mlgo_host.commands.run", "compile once with a policy answering the compiler's decisions"),
    "corpus": ("mlgo_host.commands.corpus", "build a corpus from a compile database, the benchmark corpus or Debian source packages"),
    "eval": ("mlgo_host.commands.eval", "evaluate a policy over a corpus against the default heuristic"),
    "trace": ("mlgo_host.commands.trace", "record a policy's observations and decisions over a corpus"),
    "vocab": ("mlgo_host.commands.vocab", "compute per-feature quantile vocabularies from a trace"),
    "train": ("mlgo_host.commands.train", "train a policy with PPO or behavioural cloning (gin-configured)"),
    "serve": ("mlgo_host.commands.serve", "answer the compiles of a build run through mlgo-clang"),
    "stats": ("mlgo_host.commands.stats", "summarize the per-compile statistics written by `serve --stats`"),
    "tune": ("mlgo_host.commands.tune", "search the best inlining decisions of your modules and keep them for builds"),
}

#: commands whose compiles a saved policy answers (its inputs bound by meaning)
SERVES_POLICIES = ("run", "eval", "trace", "serve", "tune", "train")


class Parser(argparse.ArgumentParser):
    """A usage error in one line, as every other error of the tool (``--help`` shows the usage)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = Parser(
        prog="mlgo-host",
        description="Train and serve LLVM's ML optimization advisors (inliner, register allocation)\n"
        "through clang's interactive channel, with a stock clang (19 and 22 tested).",
        epilog="`mlgo-host COMMAND --help` describes a command and its options.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {mlgo_host.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=help_text)
            continue
        mod = importlib.import_module(module)
        p = sub.add_parser(name, help=help_text, description=(mod.__doc__ or help_text).strip(),
                           formatter_class=HelpFormatter)
        mod.add_arguments(p)
        if name in SERVES_POLICIES:
            p.add_argument("--allow-changed-inputs", action="store_true",
                           help="serve a saved policy even when an input of it means something this compiler sends "
                           "in no feature (e.g. the real block count of a clang-22 policy, on clang-19): it is fed "
                           "from its own slot, with a warning. Inputs the compiler sends under another name are read "
                           "there without this. Same as MLGO_ALLOW_CHANGED_INPUTS=1")
        p.set_defaults(_module=mod)
    return parser


def say_warnings_once(command: str) -> None:
    """Show each :class:`CompatibilityWarning` once, as ``mlgo-host CMD: warning: ...``."""
    python_style = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, CompatibilityWarning):
            print(f"mlgo-host {command}: warning: {message}", file=file or sys.stderr)
        else:
            python_style(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    warnings.filterwarnings("once", category=CompatibilityWarning)


#: exit status when stdout's reader went away: a shell's for a tool killed by SIGPIPE (128 + 13);
#: not 0, since the output was cut short
EXIT_BROKEN_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; end quietly when stdout's reader goes away (``... | head -1``)."""
    return ends_quietly(lambda: _dispatch(argv))


def ends_quietly(run) -> int:
    """``run()``'s exit status, or :data:`EXIT_BROKEN_PIPE` without a traceback on a closed stdout."""
    try:
        try:
            return run()
        finally:
            sys.stdout.flush()  # a closed pipe shows here (also after --help's exit), not at exit
    except BrokenPipeError:
        # stdout to /dev/null so the interpreter's flush at exit stays quiet (Python's signal docs)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _dispatch(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # only the module of the command given is imported (the first word, when it names one)
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(first if first in COMMANDS else None)
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    say_warnings_once(args.command)
    if getattr(args, "allow_changed_inputs", False):
        os.environ["MLGO_ALLOW_CHANGED_INPUTS"] = "1"  # policies.specs.ALLOW_CHANGED_INPUTS; workers inherit it
    try:
        if isinstance(getattr(args, "policy", None), str):  # --policy pretrained-oz: the shipped policy's directory
            from mlgo_host.shipped import resolve_policy  # nothing heavy: `run --policy default` stays light

            args.policy = resolve_policy(args.policy)
        return int(args._module.run(args) or 0)
    except MlgoHostError as e:
        # gin appends "\n  In call to configurable ..." to what a configurable raises
        msg = str(e).split("\n  In call to configurable ", 1)[0]
        print(f"mlgo-host {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"mlgo-host {args.command}: interrupted", file=sys.stderr)
        return 130

