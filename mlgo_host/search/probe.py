"""The probe: a module compiled once over the channel, which gives each decision's features and names its call site
(:mod:`.sites`).  The channel decides by index, so the search probes once, then compiles its decision sets by the
compiler's replay (:mod:`.replay`)."""

from __future__ import annotations

import dataclasses
import os
import time

from mlgo_host.corpus.corpus import Module
from mlgo_host.episode import Episode
from mlgo_host.errors import CompilerError
from mlgo_host.fsutil import scratch_dir
from mlgo_host.measure.compile import compile_module
from mlgo_host.measure.objsizes import object_sizes
from mlgo_host.measure.sizes import llvm_tool
from mlgo_host.search.replay import Measured, run_compile
from mlgo_host.policies.heuristic import DefaultPolicy
from mlgo_host.search.sites import (AmbiguousSites, DebugInfo, Decision, Site, always_inline_sites, disassembled,
                                   identify, inlined_keys, mandatory_sites, read_debug_info, read_remarks)


@dataclasses.dataclass
class Probe:
    """A module's decisions as a channel compile took them: the episode and each decision's site."""

    episode: Episode
    decisions: list[Decision]
    text: int
    wall_s: float
    #: compiles it took: the channel's, and the plain one naming always-inline sites (:func:`probe_module`)
    compiles: int = 2
    #: the plain compile (the compiler's own decisions): its sizes and the keys it inlined
    plain: Measured | None = None
    #: the ``always_inline`` sites its remarks named: with ``plain``, what a second probe needs
    mandatory: tuple[Site, ...] | None = None
    #: functions with decisions that share a debug name, each -> all of them: the replay matches a call
    #: site by its function's debug name, so a key decides in each of them
    namesakes: dict[str, frozenset[str]] | None = None


def compile_with_remarks(module: Module, clang: str, timeout: float) -> tuple[str, Measured]:
    """The module's plain compile with ``-Rpass=inline`` (naming the ``always_inline`` sites)."""
    t0 = time.monotonic()
    with scratch_dir("mlgo-plain-") as tmp:
        out = os.path.join(tmp, "module.o")
        cmd = module.compile_command(clang, out) + ["-Rpass=inline"]
        remarks = run_compile(cmd, module, "plain", out, timeout)
        return remarks, Measured(object_sizes(out), inlined_keys(remarks), time.monotonic() - t0)


def probe_module(module: Module, policy, clang: str = "clang-19", llvm_size: str | None = None, timeout: float = 300.0,
                 plain: tuple[str, Measured] | None = None, like: Probe | None = None) -> Probe:
    """Compile ``module`` over the channel and name every decision's call site; ``plain`` (:func:`compile_with_remarks`)
    or ``like`` (an earlier probe) saves the plain compile, and so does a probe with the compiler's own decisions."""
    t0 = time.monotonic()
    # with the compiler's own decisions the channel's object is plain -Oz's and the record names every
    # key the plain compile would report; it is made only where a remark fits copies of one body
    one_compile = plain is None and like is None and isinstance(policy.for_language(module.language), DefaultPolicy)
    with scratch_dir("mlgo-probe-") as tmp:
        rec = os.path.join(tmp, "record.yaml")  # (the inliner's optimization record, by cc1 flags)
        record_flags = ["-opt-record-file", rec, "-opt-record-passes", "inline", "-opt-record-format", "yaml"]
        res = compile_module(module, policy, clang=clang, llvm_size=llvm_size, timeout=timeout, record=True,
                             extra_args=record_flags, sizes=one_compile)
        if not res.ok or res.episode is None:
            raise CompilerError(f"module {module.name!r}: the probe compile failed: {res.reason}")
        with open(rec, encoding="utf-8", errors="replace") as f:
            record = f.read()
    remarks = read_remarks(record)
    ep = res.episode
    if len(remarks) != ep.n:
        raise CompilerError(f"module {module.name!r}: {len(remarks)} inliner remarks for {ep.n} channel decisions "
                            "(the record and the channel disagree)")
    if ep.n == 0:  # nothing to name: the plain compile would only cost
        return Probe(ep, [], int(res.text_size), time.monotonic() - t0, compiles=1)
    debug = read_debug_info(disassembled(module.bc_path, llvm_tool(clang, "llvm-dis"), timeout).splitlines())
    decisions = None
    if one_compile:
        compiles, mandatory = 1, always_inline_sites(record)
        try:
            decisions = identify(remarks, debug, mandatory, exact=True)
        except AmbiguousSites:  # (copies of one body, which only the plain compile's keys tell apart)
            pass
        else:
            plain = Measured(res.sizes, {d.site.key for d in decisions if d.inlined} | {m.key for m in mandatory},
                             res.wall_s)
    if decisions is None:
        if like is not None and like.plain is not None and like.mandatory is not None:
            compiles, plain, mandatory = 1, like.plain, list(like.mandatory)
        else:
            compiles = 2 if plain is None else 1
            plain_text, plain = plain if plain is not None else compile_with_remarks(module, clang, timeout)
            mandatory = mandatory_sites(plain_text)
        # (the plain compile's inlined keys tell copies of one body apart: exact when the probe took its decisions)
        decisions = identify(remarks, debug, mandatory, plain.inlined)
    plain = plain.keyed_by({d.site.caller for d in decisions})
    for d, a in zip(decisions, ep.actions):
        if bool(a) != d.inlined:
            raise CompilerError(f"module {module.name!r}: decision {d.index}: the record says "
                                f"{'inlined' if d.inlined else 'not inlined'}, the channel answered {int(a)}")
    return Probe(ep, decisions, int(res.text_size), time.monotonic() - t0, compiles=compiles, plain=plain,
                 mandatory=tuple(mandatory), namesakes=namesakes_of({d.site.caller for d in decisions}, debug))


def namesakes_of(functions: set[str], debug: DebugInfo) -> dict[str, frozenset[str]]:
    """Each of ``functions`` that shares its debug name with another -> all of them (C++ overloads, a
    const and a non-const method, static functions of one name from two headers)."""
    by_name: dict[str, set[str]] = {}
    for f in functions:
        by_name.setdefault(debug.debug_name(f), set()).add(f)
    return {f: frozenset(group) for group in by_name.values() if len(group) > 1 for f in group}
