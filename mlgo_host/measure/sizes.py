"""Object sizes as ml-compiler-opt measures them (``llvm-size``'s Berkeley ``text``, read-only data
included) and the compiler's version.  No numpy: ``run`` imports this."""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess

from mlgo_host.errors import CompilerError, ConfigError

#: a versioned driver (Debian's clang-19): its LLVM's tools carry the same suffix (llvm-size-19)
_VERSIONED_DRIVER = re.compile(r"clang(?:\+\+)?(-\d+)")


def installed_clang_versions(oldest: int = 17) -> list[int]:
    """Major versions N >= ``oldest`` of the ``clang-N`` on PATH (17: the first with the channel)."""
    found = set()
    for d in os.environ.get("PATH", "").split(os.pathsep):
        for path in glob.glob(os.path.join(glob.escape(d or "."), "clang-*")):
            m = re.fullmatch(r"clang-(\d+)", os.path.basename(path))
            if m and int(m.group(1)) >= oldest and os.access(path, os.X_OK):
                found.add(int(m.group(1)))
    return sorted(found)


def llvm_tool_candidates(clang: str, tool: str = "llvm-size") -> list[str]:
    """Where ``clang``'s own LLVM ``tool`` may be, best first: ``tool-N`` for ``clang-N``, ``tool`` beside
    the driver as named and as resolved (Debian's /usr/bin/clang-22 links into /usr/lib/llvm-22/bin),
    last ``tool`` on PATH."""
    found = shutil.which(clang)
    dirs = [os.path.dirname(found), os.path.dirname(os.path.realpath(found))] if found else []
    names = []
    m = _VERSIONED_DRIVER.fullmatch(os.path.basename(clang))
    if m:
        versioned = tool + m.group(1)
        names += [os.path.join(d, versioned) for d in dirs[:1]] + [versioned]
    names += [os.path.join(d, tool) for d in dirs] + [tool]
    return list(dict.fromkeys(names))


@functools.lru_cache(maxsize=None)
def find_llvm_size(llvm_size: str | None = None, clang: str = "clang-19") -> str:
    """``llvm_size`` if given, else the llvm-size that comes with ``clang``."""
    return _first_found([llvm_size] if llvm_size else llvm_tool_candidates(clang), "llvm-size", clang,
                        " or pass --llvm-size")


def _first_found(cands: list[str], tool: str, clang: str, hint: str = "") -> str:
    p = next(filter(None, map(shutil.which, cands)), None)
    if p is None:
        raise ConfigError(f"{tool} not found (tried {', '.join(cands)}); install the llvm package of {clang}{hint}")
    return p


def text_size(obj_path: str | os.PathLike, llvm_size: str | None = None, clang: str = "clang-19") -> int:
    """The Berkeley ``text`` of one object, measured by ``clang``'s llvm-size unless ``llvm_size``."""
    tool = find_llvm_size(llvm_size, clang)
    try:
        r = subprocess.run([tool, "--format=berkeley", str(obj_path)], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise CompilerError(f"llvm-size did not finish on {obj_path} within 60 s") from None
    if r.returncode != 0:
        raise CompilerError(f"llvm-size failed on {obj_path}", r.returncode, r.stderr)
    lines = [ln.split() for ln in r.stdout.strip().splitlines() if ln.strip()]
    if len(lines) < 2 or lines[0][0] != "text":
        raise CompilerError(f"llvm-size printed no Berkeley table for {obj_path}: {r.stdout.strip()[:200]!r}")
    try:
        return int(lines[1][0])
    except ValueError:
        raise CompilerError(f"llvm-size: cannot read the text column for {obj_path}: {lines[1]!r}") from None


@functools.lru_cache(maxsize=None)
def compiler_version(clang: str) -> str:
    """``clang --version`` (cached per process); part of the baseline key."""
    try:
        r = subprocess.run([clang, "--version"], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise ConfigError(f"compiler {clang!r} not found") from None
    except subprocess.TimeoutExpired:
        raise CompilerError(f"{clang} --version did not answer within 60 s") from None
    if r.returncode != 0:
        raise CompilerError(f"{clang} --version failed", r.returncode, r.stderr)
    return r.stdout.strip()


@functools.lru_cache(maxsize=None)
def llvm_tool(clang: str, tool: str) -> str:
    """The LLVM tool ``tool`` (``llvm-dis``...) that comes with ``clang``."""
    return _first_found(llvm_tool_candidates(clang, tool), tool, clang)
