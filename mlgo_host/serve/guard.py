"""The guard of served builds (docs/serving.md): after a served compile, ``mlgo-clang`` compiles the
command plainly beside the output and keeps the smaller valid object (the policy's on a tie).  Runs in
the client, so it imports nothing heavy."""

from __future__ import annotations

import itertools
import os

from mlgo_host.errors import MlgoHostError
from mlgo_host.serve.slots import unlink_quiet

GUARD_ENV = "MLGO_GUARD"

#: options dropped with their value: the policy's compile wrote those files already
_DROP_WITH_VALUE = {"-MF", "-MT", "-MQ", "-MJ", "-serialize-diagnostics", "-dependency-file", "-dependency-dot"}
#: options dropped alone
_DROP = {"-MD", "-MMD", "-MP", "-MG", "-ftime-trace", "--serialize-diagnostics"}
_DROP_PREFIX = ("-MF", "-MT", "-MQ", "-MJ", "-ftime-trace=", "-ftime-trace-granularity=", "--serialize-diagnostics=",
                "-Wp,-MD", "-Wp,-MMD")
#: options whose side outputs are named after the object: not guarded
_UNGUARDED = {"-gsplit-dwarf", "-save-temps", "--coverage", "-ftest-coverage", "-fprofile-arcs"}
_UNGUARDED_PREFIX = ("-gsplit-dwarf=", "-save-temps=")


def wanted(info: dict) -> bool:
    """Whether this client guards: ``MLGO_GUARD`` (1/0) if set, else the server's ``--guard``."""
    v = os.environ.get(GUARD_ENV, "").strip().lower()
    if v in ("1", "yes", "true", "on"):
        return True
    if v in ("0", "no", "false", "off"):
        return False
    return bool(info.get("guard"))


def temp_output(output: str) -> str:
    """A hidden name beside ``output`` for the default's object (keeping it is one rename)."""
    d, b = os.path.split(output)
    return os.path.join(d, f".{b}.mlgo-guard.{os.getpid()}.o")


def guard_command(argv: list[str], tmp_out: str) -> tuple[list[str] | None, str]:
    """(the plain compile of ``argv`` writing ``tmp_out`` and no side outputs, ""), or (None, why not)."""
    out = [argv[0]]
    has_o = False
    args = iter(argv[1:])
    for a in args:
        if a in _UNGUARDED or a.startswith(_UNGUARDED_PREFIX):
            return None, f"{a} writes files named after the object"
        if a == "-o":
            out += ["-o", tmp_out]
            has_o = True
            next(args, None)
        elif a.startswith("-o") and len(a) > 2:
            out.append("-o" + tmp_out)
            has_o = True
        elif a in _DROP_WITH_VALUE:
            next(args, None)
        elif a in ("-Xclang", "-mllvm"):
            out += [a, *itertools.islice(args, 1)]  # with its value, whatever it is
        elif a not in _DROP and not a.startswith(_DROP_PREFIX):
            out.append(a)
    if not has_o:
        out += ["-o", tmp_out]
    return out, ""


def object_text_size(path: str, compiler: str) -> int | None:
    """llvm-size text of ``path``; None when it is not an object file."""
    from mlgo_host.measure.sizes import text_size

    try:
        return text_size(path, clang=compiler)
    except MlgoHostError:
        return None


def keep_smaller(output: str, tmp_out: str, compiler: str) -> dict:
    """Keep the smaller valid object of ``output`` (the policy's) and ``tmp_out`` (the default's) at
    ``output``; returns the stats fields (guard, guard_policy_text, guard_default_text)."""
    pol = object_text_size(output, compiler) if os.path.exists(output) else None
    dft = object_text_size(tmp_out, compiler) if os.path.exists(tmp_out) else None
    keep_default = dft is not None and (pol is None or dft < pol)
    if keep_default:
        os.replace(tmp_out, output)
    else:
        unlink_quiet(tmp_out)
    return {"guard": "default" if keep_default else "policy", "guard_policy_text": pol, "guard_default_text": dft}
