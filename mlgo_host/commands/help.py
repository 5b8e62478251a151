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


def _checked(name: str, convert, ok, rule: str):
    """An argparse type named ``name`` (argparse reports a ValueError of ``convert`` as "invalid NAME
    value") that refuses, saying ``rule``, a value ``ok`` rejects."""
    def parse(text: str):
        value = convert(text)
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{text!r}: {rule}")
        return value

    parse.__name__ = name
    return parse


#: a time limit (not nan, not inf)
seconds = _checked("seconds", float, lambda v: math.isfinite(v) and v > 0,
                   "a time limit is a finite number of seconds above 0")
#: a wait that may be none
seconds_from_zero = _checked("seconds_from_zero", float, lambda v: math.isfinite(v) and v >= 0,
                             "a wait is a finite number of seconds, 0 or more")
#: a count of things to take (modules, lines)
at_least_one = _checked("at_least_one", int, lambda v: v >= 1, "must be 1 or more")
#: a random seed: numpy's generators take 0 or more
seed = _checked("seed", int, lambda v: v >= 0, "a seed is 0 or more")
