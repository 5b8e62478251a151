"""Evaluate a whole inlining decision set of a module in one compile.

Two paths, measured side by side by ``bench/tune.py``:

* **the compiler's inline replay** (:class:`ReplayEvaluator`, what the
  search uses): the set is written as a replay file and clang applies it by
  itself (``-cgscc-inline-replay=FILE``, scope ``Function``, fallback
  ``NeverInline``): in every function the file names, exactly the listed
  sites are inlined; every function with a decision is named (a function
  with nothing inlined by a line that matches no call), so a site left out
  is a site not inlined.  No channel, no host round trip: a plain compile's
  time, and any number of flips per compile.  ``-Rpass=inline`` makes the
  compiler say which sites it inlined: the evaluator checks that against the
  set, so a key the compiler did not match is seen, never assumed applied.
* **the channel** (:func:`probe_module`): the ML advisor asks, a policy
  answers, and the optimization record names each decision's call site
  (:mod:`.sites`).  It is what gives the features of each decision and the
  trajectory a policy takes; it decides by decision index, so a flip
  changes every later decision's index: one flip per compile.  The search
  uses it once per module (the probe), then replays.

Both measure the object as the rest of the project does (``llvm-size``'s
text column) and the replay path also per function
(:func:`~mlgo_host.corpus.objsizes.object_sizes`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterable

from mlgo_host.corpus.compile import compile_module
from mlgo_host.corpus.corpus import Module
from mlgo_host.corpus.objsizes import ObjectSizes, object_sizes
from mlgo_host.corpus.sizes import llvm_tool
from mlgo_host.corpus.tuned import replay_flags
from mlgo_host.episode import Episode
from mlgo_host.errors import CompilerError
from mlgo_host.search.sites import (DebugInfo, Decision, Site, debug_info, identify, inlined_keys, mandatory_sites,
                                   read_remarks)

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
        tmp = tempfile.mkdtemp(prefix="mlgo-replay-")
        try:
            out = os.path.join(tmp, "module.o")
            remarks = self.compile(inline, out, ir, scope, release)
            return Measured(object_sizes(out), inlined_keys(remarks), time.monotonic() - t0)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


# -- the channel probe ----------------------------------------------------------


@dataclasses.dataclass
class Probe:
    """A module's decisions as a channel compile took them: the episode
    (features, actions) and each decision's call site."""

    episode: Episode
    decisions: list[Decision]
    text: int
    wall_s: float
    #: compiles it took: the channel's, and the plain one naming always-inline sites (none without decisions)
    compiles: int = 2
    #: the plain compile (the compiler's own decisions): its sizes and the keys it inlined
    plain: Measured | None = None
    #: the ``always_inline`` sites its remarks named: with ``plain``, what a second probe of the same
    #: command (another policy's decisions) needs instead of a plain compile of its own
    mandatory: tuple[Site, ...] | None = None


def compile_with_remarks(module: Module, clang: str, timeout: float) -> tuple[str, Measured]:
    """The module's plain compile with ``-Rpass=inline``: its remarks (they
    name the ``always_inline`` sites, which the channel never sees) and its
    object's sizes with the keys it inlined (what a replay of the
    compiler's own decisions should give)."""
    t0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="mlgo-plain-")
    try:
        out = os.path.join(tmp, "module.o")
        cmd = module.compile_command(clang, out) + ["-Rpass=inline"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CompilerError(f"module {module.name!r}: the plain compile did not finish within {timeout:g} s") from None
        if r.returncode != 0:
            raise CompilerError(f"module {module.name!r}: the plain compile failed", r.returncode, r.stderr[-2000:])
        return r.stderr, Measured(object_sizes(out), inlined_keys(r.stderr), time.monotonic() - t0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def record_flags(path: str) -> list[str]:
    """cc1 flags writing the inliner's optimization record (YAML) to ``path``."""
    return ["-opt-record-file", path, "-opt-record-passes", "inline", "-opt-record-format", "yaml"]


def probe_module(module: Module, policy, clang: str = "clang-19", llvm_size: str | None = None,
                 timeout: float = 300.0, debug: DebugInfo | None = None,
                 plain: tuple[str, Measured] | None = None, like: Probe | None = None) -> Probe:
    """Compile ``module`` over the channel with ``policy`` (the compiler's
    default for the search's start), recording the trajectory and the
    optimization record, and name every decision's call site.  ``plain``:
    :func:`compile_with_remarks`' result for this very command, when a caller
    made it already (the threshold starts), or ``like``: an earlier probe of
    this very command (another policy's start) that kept it; the probe then
    costs its channel compile only."""
    t0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="mlgo-probe-")
    try:
        rec = os.path.join(tmp, "record.yaml")
        res = compile_module(module, policy, clang=clang, llvm_size=llvm_size, timeout=timeout, record=True,
                             extra_args=record_flags(rec))
        if not res.ok or res.episode is None:
            raise CompilerError(f"module {module.name!r}: the probe compile failed: {res.reason}")
        with open(rec, encoding="utf-8", errors="replace") as f:
            remarks = read_remarks(f.read())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ep = res.episode
    if len(remarks) != ep.n:
        raise CompilerError(f"module {module.name!r}: {len(remarks)} inliner remarks for {ep.n} channel decisions "
                            "(the record and the channel disagree)")
    if ep.n == 0:  # nothing to name: the plain compile would only cost
        return Probe(ep, [], int(res.text_size), time.monotonic() - t0, compiles=1)
    if debug is None:
        debug = debug_info(module.bc_path, llvm_tool(clang, "llvm-dis"), timeout)
    if like is not None and like.plain is not None and like.mandatory is not None:
        compiles, plain, mandatory = 1, like.plain, list(like.mandatory)
    else:
        compiles = 2 if plain is None else 1
        plain_text, plain = plain if plain is not None else compile_with_remarks(module, clang, timeout)
        mandatory = mandatory_sites(plain_text)
    # (the plain compile's inlined keys tell apart copies of one body; they are the probe's own when
    # the probe takes the compiler's decisions, as tune's does, else only a hint)
    decisions = identify(remarks, debug, mandatory, plain.inlined)
    for d, a in zip(decisions, ep.actions):
        if bool(a) != d.inlined:
            raise CompilerError(f"module {module.name!r}: decision {d.index}: the record says "
                                f"{'inlined' if d.inlined else 'not inlined'}, the channel answered {int(a)}")
    return Probe(ep, decisions, int(res.text_size), time.monotonic() - t0, compiles=compiles, plain=plain,
                 mandatory=tuple(mandatory))
