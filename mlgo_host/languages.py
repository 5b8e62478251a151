"""The source language of a compile (C or C++), which a policy with a part
per language answers by: told from the command alone."""

from __future__ import annotations

import os
from typing import Sequence

#: source suffixes compiled as C++ (the rest of a corpus is C)
CXX_SUFFIXES = (".cc", ".cpp", ".cxx", ".c++", ".C", ".mm", ".hpp", ".hh")
#: ``-x`` languages a policy can be chosen by
X_LANGUAGES = {"c": "C", "c-header": "C", "objective-c": "C", "c++": "C++", "c++-header": "C++",
               "objective-c++": "C++"}


def source_language(path: str) -> str | None:
    """"C++", "C" or None by a source file's suffix."""
    return "C++" if path.endswith(CXX_SUFFIXES) else "C" if path.endswith(".c") else None


def command_language(argv: Sequence[str], source: str = "") -> str | None:
    """"C", "C++" or None: by the cc1 ``-main-file-name`` (bitcode), ``-x``, ``source`` or the first
    source's suffix, else the driver's name (``clang++``)."""
    args = list(argv)
    for i, a in enumerate(args[:-1]):
        if a == "-main-file-name":
            return source_language(args[i + 1])
    for i, a in enumerate(args):
        x = args[i + 1] if a == "-x" and i + 1 < len(args) else a[2:] if a.startswith("-x") and len(a) > 2 else None
        if x is not None and x != "ir":
            return X_LANGUAGES.get(x)
    srcs = [source] if source else [a for a in args[1:] if not a.startswith("-") and source_language(a)]
    if srcs:
        return source_language(srcs[0])
    return "C++" if args and "++" in os.path.basename(args[0]) else None
