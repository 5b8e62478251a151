"""A whole inlining decision set of a module in one compile, by the
compiler's inline replay (:class:`ReplayEvaluator`, what the search
measures every flip with).

The set is written as a replay file and clang applies it by itself
(``-cgscc-inline-replay=FILE``, scope ``Function``, fallback
``NeverInline``): in every function the file names, exactly the listed
sites are inlined; every function with a decision is named (a function
with nothing inlined by a line that matches no call), so a site left out
is a site not inlined.  No channel, no host round trip: a plain compile's
time, and any number of flips per compile.  ``-Rpass=inline`` makes the
compiler say which sites it inlined: the evaluator checks that against the
set, so a key the compiler did not match is seen, never assumed applied.

The other way to compile a decision set is the channel (:mod:`.probe`),
measured side by side with this one by ``bench/tune.py``: it gives each
decision's features, but decides by decision index, so a flip changes
every later decision's index (one flip per compile).  The search uses it
once per module, then replays.

The object is measured as the rest of the project does (``llvm-size``'s
text column) and per function
(:func:`~mlgo_host.measure.objsizes.object_sizes`).
"""

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
    """A replay file: a line per site to inline, and a line that matches no
    call for each function of ``scope`` no site names (so it keeps nothing
    inlined rather than fall back to the compiler's heuristic)."""
    inline = sorted(set(inline), key=lambda s: (s.caller, s.key))
    named = {s.caller for s in inline}
    lines = [s.replay_line() for s in inline]
    lines += [Site(NO_CALLEE, fn, ((fn, 0, 0),)).replay_line() for fn in sorted(set(scope) - named)]
    return "".join(ln + "\n" for ln in lines)


def replay_flags(path: str, fallback: str = "NeverInline") -> list[str]:
    """The flags that make clang apply replay file ``path``: in every
    function the file names, the listed sites are inlined and the others get
    ``fallback``; every other function gets the compiler's own decisions."""
    return ["-mllvm", f"-cgscc-inline-replay={path}", "-mllvm", "-cgscc-inline-replay-scope=Function",
            "-mllvm", f"-cgscc-inline-replay-fallback={fallback}"]


@dataclasses.dataclass
class Measured:
    """One compile of a decision set: the object's sizes and the keys the
    compiler reports it inlined."""

    sizes: ObjectSizes
    inlined: set[str]
    wall_s: float

    @property
    def text(self) -> int:
        return self.sizes.text


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
        """Compile with exactly ``inline`` inlined (in the scope's functions,
        and ``scope``'s) into object ``out``; returns the compiler's remarks
        (stderr).  ``ir``: the module's text to compile instead of its
        bitcode (with copies of functions, :mod:`.copies`); ``release``:
        functions of the scope left to the compiler's own heuristic (named
        nowhere in the file)."""
        rf = out + ".replay.txt"
        with open(rf, "w", encoding="utf-8") as f:
            f.write(replay_text(inline, (self.scope | set(scope)) - set(release)))
        module = self.module
        if ir is not None:
            ll = out + ".ll"
            with open(ll, "w", encoding="utf-8") as f:
                f.write(ir)
            module = dataclasses.replace(module, bc_path=Path(ll))
        cmd = module.compile_command(self.clang, out) + replay_flags(rf) + ["-Rpass=inline"]
        self.compiles += 1
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise CompilerError(f"module {self.module.name!r}: the replay compile did not finish within "
                                f"{self.timeout:g} s") from None
        finally:
            os.unlink(rf)
            if ir is not None:
                os.unlink(module.bc_path)
        if r.returncode != 0 or not os.path.exists(out):
            raise CompilerError(f"module {self.module.name!r}: the replay compile failed", r.returncode,
                                r.stderr[-2000:])
        return r.stderr

    def measure(self, inline: Iterable[Site], ir: str | None = None, scope: Iterable[str] = (),
                release: Iterable[str] = ()) -> Measured:
        """:meth:`compile` into a temp directory (always removed): the sizes
        and the keys the compiler inlined."""
        t0 = time.monotonic()
        with scratch_dir("mlgo-replay-") as tmp:
            out = os.path.join(tmp, "module.o")
            remarks = self.compile(inline, out, ir, scope, release)
            return Measured(object_sizes(out), inlined_keys(remarks), time.monotonic() - t0)
