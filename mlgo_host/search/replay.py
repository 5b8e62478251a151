"""A whole inlining decision set of a module in one compile, by the compiler's inline replay (docs/search.md)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from pathlib import Path
from typing import Iterable

from mlgo_host.corpus.corpus import Module
from mlgo_host.errors import CompilerError
from mlgo_host.fsutil import scratch_dir
from mlgo_host.measure.objsizes import ObjectSizes, object_sizes
from mlgo_host.search.sites import Site, inlined_keys

#: a callee no module has: its line puts a function in the replay's scope with nothing inlined
NO_CALLEE = "__mlgo_host_nothing__"


def replay_text(inline: Iterable[Site], scope: Iterable[str]) -> str:
    """A replay file, with a line matching no call for each function of ``scope`` no site names."""
    inline = sorted(set(inline), key=lambda s: (s.caller, s.key))
    named = {s.caller for s in inline}
    lines = [s.replay_line() for s in inline]
    lines += [Site(NO_CALLEE, fn, ((fn, 0, 0),)).replay_line() for fn in sorted(set(scope) - named)]
    return "".join(ln + "\n" for ln in lines)


def run_compile(cmd: list[str], module: Module, what: str, out: str, timeout: float) -> str:
    """Run ``module``'s ``what`` compile ``cmd`` into ``out``; returns its remarks (stderr)."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CompilerError(f"module {module.name!r}: the {what} compile did not finish within "
                            f"{timeout:g} s") from None
    if r.returncode != 0 or not os.path.exists(out):
        raise CompilerError(f"module {module.name!r}: the {what} compile failed", r.returncode, r.stderr[-2000:])
    return r.stderr


def replay_flags(path: str, fallback: str = "NeverInline") -> list[str]:
    """Flags applying replay file ``path``: sites not listed in the functions it names get ``fallback``."""
    return ["-mllvm", f"-cgscc-inline-replay={path}", "-mllvm", "-cgscc-inline-replay-scope=Function",
            "-mllvm", f"-cgscc-inline-replay-fallback={fallback}"]


@dataclasses.dataclass
class Measured:
    """One compile of a decision set: its sizes and the keys the compiler reports inlined."""

    sizes: ObjectSizes
    inlined: set[str]
    wall_s: float

    @property
    def text(self) -> int:
        return self.sizes.text

    def keyed_by(self, names: Iterable[str]) -> "Measured":
        """This compile with its functions keyed by ``names`` where an alias is one: the search names
        functions as the IR does (:meth:`~mlgo_host.measure.objsizes.ObjectSizes.keyed_by`)."""
        sizes = self.sizes.keyed_by(names)
        return self if sizes is self.sizes else dataclasses.replace(self, sizes=sizes)


class ReplayEvaluator:
    """Compiles decision sets of one module through the compiler's replay."""

    def __init__(self, module: Module, scope: Iterable[str], clang: str = "clang-19", timeout: float = 300.0):
        self.module = module
        self.scope = frozenset(scope)
        self.clang = clang
        self.timeout = timeout
        self.compiles = 0

    def compile(self, inline: Iterable[Site], out: str, ir: str | None = None, scope: Iterable[str] = (),
                release: Iterable[str] = ()) -> str:
        """Compile with exactly ``inline`` inlined (in the scope and ``scope``) into ``out``; returns the
        remarks.  ``ir``: text instead of the bitcode; ``release``: functions left to the heuristic."""
        rf = out + ".replay.txt"
        Path(rf).write_text(replay_text(inline, (self.scope | set(scope)) - set(release)), encoding="utf-8")
        module = self.module
        if ir is not None:
            module = dataclasses.replace(module, bc_path=Path(out + ".ll"))
            module.bc_path.write_text(ir, encoding="utf-8")
        cmd = module.compile_command(self.clang, out) + replay_flags(rf) + ["-Rpass=inline"]
        self.compiles += 1
        try:
            return run_compile(cmd, self.module, "replay", out, self.timeout)
        finally:
            os.unlink(rf)
            if ir is not None:
                os.unlink(module.bc_path)

    def measure(self, inline: Iterable[Site], ir: str | None = None, scope: Iterable[str] = (),
                release: Iterable[str] = ()) -> Measured:
        """:meth:`compile` into a temporary directory."""
        t0 = time.monotonic()
        with scratch_dir("mlgo-replay-") as tmp:
            out = os.path.join(tmp, "module.o")
            remarks = self.compile(inline, out, ir, scope, release)
            return Measured(object_sizes(out).keyed_by(self.scope), inlined_keys(remarks), time.monotonic() - t0)
