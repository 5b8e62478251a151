"""The help formatter every ``mlgo-host`` parser and subparser uses."""

from __future__ import annotations

import argparse
import math


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written; "(default: X)" after an option's help only
    when X says something: not for None, False or an empty list, nor when
    the help already tells its default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "%(default)" in text or "default:" in text:
            return text
        default = action.default
        if default is None or default is False or default == [] or default is argparse.SUPPRESS:
            return text
        if not action.option_strings and action.nargs not in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return text
        return f"{text} (default: %(default)s)"


def add_aliased(p: argparse.ArgumentParser, option: str, **kw) -> None:
    """Add ``option`` (``--no-progress``) and accept, unlisted, its earlier spelling (``--no_progress``)."""
    dest = option[2:].replace("-", "_")
    p.add_argument(option, dest=dest, **kw)
    parsing = {k: v for k, v in kw.items() if k in ("action", "type", "choices")}
    p.add_argument("--" + dest, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **parsing)


#: the --llvm-size option's help, the same wherever a command measures objects
LLVM_SIZE_HELP = ("llvm-size binary (default: the one of --clang's LLVM: llvm-size-N for clang-N, "
                  "else the llvm-size beside the clang binary)")


def seconds(text: str) -> float:
    """argparse type of a time limit: a finite number of seconds above 0 (not nan, not inf)."""
    value = float(text)  # (argparse reports a ValueError as "invalid seconds value")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a time limit is a finite number of seconds above 0")
    return value


def seconds_from_zero(text: str) -> float:
    """argparse type of a wait that may be none: a finite number of seconds, 0 or more."""
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a wait is a finite number of seconds, 0 or more")
    return value


def at_least_one(text: str) -> int:
    """argparse type of a count of things to take (modules, lines): 1 or more."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be 1 or more")
    return value


def seed(text: str) -> int:
    """argparse type of a random seed: numpy's generators take 0 or more."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a seed is 0 or more")
    return value
