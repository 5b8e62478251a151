"""Call-site identity: which call site each inlining decision of a compile is.  A :class:`Site` is keyed as the
compiler's inline replay names it (``sq at big:3:71 @ f1:0:24``, docs/search.md); the optimization record lacks the
inline chain: :func:`identify` rebuilds it."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from typing import Iterable, Iterator, Sequence

from mlgo_host.errors import CompilerError

#: the ML advisor's remark names, per advice (clang-19 spells "Inining")
INLINED = ("InliningSuccess", "InliningSuccessWithCalleeDeleted")
DELETED = "InliningSuccessWithCalleeDeleted"
NOT_INLINED = ("IniningNotAttempted", "InliningNotAttempted")


@dataclasses.dataclass(frozen=True)
class Site:
    """A call site as the inline replay names it: ``callee``, ``caller`` (IR names) and the
    ``chain`` of (function by its debug name, relative line, column), innermost first."""

    callee: str
    caller: str
    chain: tuple[tuple[str, int, int], ...]

    @property
    def callsite(self) -> str:
        return " @ ".join(f"{fn}:{line}:{col}" for fn, line, col in self.chain)

    @property
    def key(self) -> str:
        """What the compiler matches a replay line on."""
        return f"{self.callee} at {self.callsite}"

    def replay_line(self) -> str:
        return f"remark: '{self.callee}' inlined into '{self.caller}' at callsite {self.callsite};"

    def through(self, outer: "Site") -> "Site":
        """This site cloned into ``outer``'s caller when ``outer`` is inlined."""
        return Site(self.callee, outer.caller, self.chain + outer.chain)

    def is_under(self, outer: "Site") -> bool:
        """A site cloned through ``outer`` (it exists only while ``outer`` is inlined)."""
        n = len(outer.chain)
        return len(self.chain) > n and self.chain[-n:] == outer.chain


_REPLAYED = re.compile(r"'(?P<callee>[^']*)' inlined into '(?P<caller>[^']*)'.* at callsite (?P<site>[^;]*);")


def parse_callsite(text: str) -> tuple[tuple[str, int, int], ...]:
    """``big:0:71 @ f1:0:24`` -> ((big, 0, 71), (f1, 0, 24)), without discriminators (``:71.2``)."""
    parts = (part.rsplit(":", 2) for part in text.split(" @ "))
    return tuple((fn, int(line), int(col.split(".")[0])) for fn, line, col in parts)


def site_of_line(line: str) -> Site:
    """The site a replay (or ``-Rpass=inline``) line names."""
    m = _REPLAYED.search(line)
    if m is None:
        raise ValueError(f"not an inline remark: {line!r}")
    return Site(m.group("callee"), m.group("caller"), parse_callsite(m.group("site")))


def site_of_key(key: str) -> Site:
    """The site a key names (``callee at f:1:2 @ outer:3:4``), its caller the chain's last entry."""
    callee, at = key.split(" at ", 1)
    chain = parse_callsite(at)
    return Site(callee, chain[-1][0], chain)


def _site_or_none(m: re.Match) -> Site | None:
    try:
        return Site(m.group("callee"), m.group("caller"), parse_callsite(m.group("site")))
    except ValueError:
        return None


def mandatory_sites(remarks: str) -> list[Site]:
    """The ``always_inline`` sites of a plain compile's ``-Rpass=inline``
    output, in order: the channel never sees them, but they copy call sites."""
    found = (_REPLAYED.search(ln) for ln in remarks.splitlines() if "always inline attribute" in ln)
    return [s for s in map(_site_or_none, filter(None, found)) if s is not None]


def inlined_keys(remarks: str) -> set[str]:
    """The keys of the sites a compile inlined, from its ``-Rpass=inline`` output."""
    return {s.key for s in map(_site_or_none, _REPLAYED.finditer(remarks)) if s is not None}


@dataclasses.dataclass(frozen=True)
class Remark:
    """One decision as the optimization record has it."""

    name: str
    caller: str
    callee: str
    line: int
    column: int
    file: str = ""

    @property
    def inlined(self) -> bool:
        return self.name in INLINED


_TOP = re.compile(r"^(Pass|Name|Function):\s+(.*)$")
_LOC = re.compile(r"^DebugLoc:\s+\{\s*File:\s*(.*?),\s*Line:\s*(\d+),\s*Column:\s*(\d+)")
_CALLEE = re.compile(r"^\s+- Callee:\s+(.*)$")


def _unquote(v: str) -> str:
    v = v.strip()
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        v = v[1:-1].replace("''", "'")
    return v


def _joined(lines: list[str]) -> Iterator[str]:
    """Lines with YAML's wrapped flow mappings (``DebugLoc: { ...`` over two lines) made one."""
    buf = ""
    for ln in lines:
        if buf:
            buf += " " + ln.strip()
            if "}" in ln:
                yield buf
                buf = ""
        elif "{" in ln and "}" not in ln:
            buf = ln
        else:
            yield ln
    if buf:
        yield buf


def read_remarks(text: str) -> list[Remark]:
    """The ML inliner's decisions of an optimization record, in order (hand-rolled: YAML is slow)."""
    out: list[Remark] = []
    for doc in text.split("\n--- "):
        fields: dict[str, str] = {}
        loc = None
        callee = None
        for ln in _joined(doc.splitlines()):
            if m := _TOP.match(ln):
                fields.setdefault(m.group(1), _unquote(m.group(2)))
            elif loc is None and (m := _LOC.match(ln)):
                loc = (int(m.group(2)), int(m.group(3)), _unquote(m.group(1)))
            elif callee is None and (m := _CALLEE.match(ln)):
                callee = _unquote(m.group(1))
        name = fields.get("Name", "")
        if name not in INLINED + NOT_INLINED or callee is None:
            continue
        out.append(Remark(name, fields.get("Function", ""), callee, *(loc or (0, 0, ""))))
    return out


_ARG = re.compile(r"^\s+- (\w+):\s+(.*)$")


def always_inline_sites(text: str) -> list[Site]:
    """The ``always_inline`` sites of an optimization record, in order: the mandatory inliner writes each
    ``AlwaysInline`` remark as ``-Rpass=inline`` prints it (its arguments, joined), beside the ML advisor's remarks."""
    lines = []
    for doc in text.split("\n--- "):
        if not re.search(r"^Name:\s+AlwaysInline\s*$", doc, re.M):
            continue
        args = False
        parts = []
        for ln in _joined(doc.splitlines()):
            if ln.startswith("Args:"):
                args = True
            elif args and (m := _ARG.match(ln)) and m.group(1) != "DebugLoc":
                parts.append(_unquote(m.group(2)))
        lines.append("".join(parts))
    return mandatory_sites("\n".join(lines))


@dataclasses.dataclass(frozen=True)
class FunctionInfo:
    """A function's debug identity: the name keys use for it, its first line and file."""

    name: str
    line: int
    file: str = ""
    #: its IR name ("" when the module does not define it)
    ir: str = dataclasses.field(default="", compare=False)


@dataclasses.dataclass
class DebugInfo:
    """A module's functions by debug info: the defined ones by IR name, and every definition by
    file (also those gone), to tell which function a call was written in."""

    functions: dict[str, FunctionInfo]
    by_file: dict[str, list[FunctionInfo]] = dataclasses.field(default_factory=dict)
    #: IR name -> the IR names its body calls directly (as written, before any inlining)
    calls: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)

    def written_in(self, file: str, line: int) -> FunctionInfo | None:
        """The last function of ``file`` starting at or before ``line``."""
        return next((f for f in reversed(self.by_file.get(file, ())) if f.line <= line), None)

    def debug_name(self, ir_name: str) -> str:
        info = self.functions.get(ir_name)
        return info.name if info is not None else ir_name


def disassembled(bitcode: str | os.PathLike, llvm_dis: str, timeout: float) -> str:
    """The module's textual IR, by ``llvm_dis``."""
    try:
        r = subprocess.run([llvm_dis, str(bitcode), "-o", "-"], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise CompilerError(f"{llvm_dis} not found (it comes with the compiler's llvm package)") from None
    except subprocess.TimeoutExpired:
        raise CompilerError(f"{llvm_dis} did not finish on {bitcode} within {timeout:g} s") from None
    except OSError as e:
        raise CompilerError(f"{llvm_dis} on {bitcode} failed: {e}") from None
    if r.returncode != 0:
        raise CompilerError(f"{llvm_dis} failed on {bitcode}", r.returncode, r.stderr[-2000:])
    return r.stdout


_DEFINE = re.compile(r'^define .*?@("(?:[^"\\]|\\.)*"|[-\w.$]+)\(.*!dbg !(\d+)')
_NODE = re.compile(r'^!(\d+) = distinct !DISubprogram\((.*)\)\s*$')
_DIFILE = re.compile(r'^!(\d+) = !DIFile\(filename: "((?:[^"\\]|\\.)*)"')
#: a direct call or invoke (an indirect one has a %value before any @)
_CALL = re.compile(r'\b(?:call|invoke)\s[^@%]*@("(?:[^"\\]|\\.)*"|[-\w.$]+)\(')
#: a subprogram's field: its name, then its text (name, linkageName) or its number (line, file: !N)
_FIELD = re.compile(r'\b(name|linkageName|line|file): (?:"((?:[^"\\]|\\.)*)"|!?(\d+))')


def read_debug_info(ir_lines: Iterable[str]) -> DebugInfo:
    defined: dict[str, str] = {}  # node id -> IR function name
    nodes: dict[str, tuple[str, int, str]] = {}  # node id -> (name, line, file node)
    files: dict[str, str] = {}
    calls: dict[str, set[str]] = {}  # IR function name -> its direct callees
    body: set[str] | None = None
    for ln in ir_lines:
        if body is not None and ln.startswith("  "):
            for c in _CALL.finditer(ln):
                body.add(c.group(1).strip('"'))
        elif m := _DEFINE.match(ln):
            defined[m.group(2)] = m.group(1).strip('"')
            body = calls.setdefault(m.group(1).strip('"'), set())
        elif ln.startswith("}"):
            body = None
        elif m := _DIFILE.match(ln):
            files[m.group(1)] = m.group(2)
        elif "DISPFlagDefinition" in ln and (m := _NODE.match(ln)):
            got: dict[str, str] = {}
            for field, text, number in _FIELD.findall(m.group(2)):
                got.setdefault(field, text or number)
            name = got.get("linkageName") or got.get("name")
            if name:  # (llvm-dis leaves out a line of 0: a C++ global initializer's, which the compiler counts from 0)
                nodes[m.group(1)] = (name, int(got.get("line", 0)), got.get("file", ""))
    infos = {i: FunctionInfo(n, line, files.get(f, ""), defined.get(i, "")) for i, (n, line, f) in nodes.items()}
    by_file: dict[str, list[FunctionInfo]] = {}
    for info in sorted(infos.values(), key=lambda f: f.line):
        if info.line:  # a function with no line has no extent in its file
            by_file.setdefault(info.file, []).append(info)
    functions = {fn: infos[i] for i, fn in defined.items() if i in infos}
    return DebugInfo(functions, by_file, {fn: frozenset(c) for fn, c in calls.items()})


@dataclasses.dataclass
class Decision:
    """Decision ``index`` of a compile: its site, the advice, whether the callee was deleted."""

    index: int
    site: Site
    inlined: bool
    deleted: bool = False
    #: the callee's live call sites as (would be) copied into the caller: the sites inlining it exposes
    exposed: tuple[Site, ...] = ()


@dataclasses.dataclass(frozen=True)
class _Live:
    site: Site
    line: int  # the innermost call's absolute line and column (what remarks give)
    column: int


class AmbiguousSites(CompilerError):
    """A remark that fits copies of one body with different keys, and no compile's keys to choose."""


def identify(remarks: Sequence[Remark], debug: DebugInfo, mandatory: Sequence[Site] = (),
             known: set[str] = frozenset(), exact: bool = False) -> list[Decision]:
    """Every decision's :class:`Site`, by replaying the inline tree in decision order (docs/search.md, "The probe
    and call-site keys").  ``mandatory``: the ``always_inline`` sites, inlined before the first decision.
    ``known``: keys a compile with the same decisions inlined; where a remark cannot tell copies of one body apart
    (the compiler may visit them in another order than it copied them), the copy agreeing with ``known`` goes first.
    ``exact``: raise :class:`AmbiguousSites` rather than take the first copy."""
    live: dict[str, list[_Live]] = {}
    used: dict[str, set[str]] = {}  # caller -> keys its decisions took
    bodies: dict[str, list[Site]] = {}  # caller -> the sites whose callee's body it took in, in order
    for m in mandatory:
        bodies.setdefault(m.caller, []).append(m)
    out: list[Decision] = []
    for i, r in enumerate(remarks):
        sites = live.setdefault(r.caller, [])
        hits = [k for k, s in enumerate(sites) if s.site.callee == r.callee and s.line == r.line and s.column == r.column]
        hit = _agreeing(hits, lambda k: sites[k].site.key, r.inlined, known, exact)
        taken = used.setdefault(r.caller, set())
        if hit is None:
            entry = _Live(_written_site(r, debug, bodies, taken, known, exact), r.line, r.column)
        else:
            entry = sites.pop(hit)
        taken.add(entry.site.key)
        copied = [_Live(s.site.through(entry.site), s.line, s.column) for s in live.get(r.callee, ())]
        if not r.inlined:
            sites.append(entry)
            out.append(Decision(i, entry.site, False, exposed=tuple(c.site for c in copied)))
            continue
        sites.extend(copied)
        bodies.setdefault(r.caller, []).append(entry.site)
        deleted = r.name == DELETED
        if deleted:
            live.pop(r.callee, None)
        out.append(Decision(i, entry.site, True, deleted, tuple(c.site for c in copied)))
    return out


def _written_site(r: Remark, debug: DebugInfo, bodies: dict[str, list[Site]], used: set[str],
                  known: set[str] = frozenset(), exact: bool = False) -> Site:
    """The site of a decision no live site explains: a call written in its caller or in a body
    inlined into it, copies of that body taking the next key not ``used`` yet."""
    own = debug.functions.get(r.caller) or FunctionInfo(r.caller, r.line, r.file, r.caller)
    here = Site(r.callee, r.caller, ((own.name, _offset(r.line, own.line), r.column),))
    copies: list[Site] = []
    if r.line == 0:  # a call the optimizer made (merged calls): no line tells which body it is in
        copies = [here] + [Site(r.callee, r.caller, ((w.name, _offset(0, w.line), r.column),) + path)
                           for w, path in _all_bodies(r.caller, debug, bodies)]
    else:
        w = _written_by(r, debug, bodies, own) if r.file else None
        if w is not None and w.name != own.name:
            copies = [Site(r.callee, r.caller, ((w.name, _offset(r.line, w.line), r.column),) + path)
                      for path in _body_paths(r.caller, w.name, debug, bodies)]
    if not copies:
        return here
    free = [x for x in copies if x.key not in used] or copies[:1]
    return free[_agreeing(range(len(free)), lambda k: free[k].key, r.inlined, known, exact)]


def _written_by(r: Remark, debug: DebugInfo, bodies: dict[str, list[Site]], own: FunctionInfo) -> FunctionInfo | None:
    """The function a call at ``r.file:r.line`` was written in: the last to start at or before
    that line, unless it does not call ``r.callee`` and a function inlined here starting on the
    same line does (a header included under several macro names), or the function it is local
    to does (a lambda's enclosing function's later lines read as the lambda's)."""
    w = debug.written_in(r.file, r.line)
    if w is None:
        return None
    inside = {own.ir: own} | {f.ir: f for f, _ in _all_bodies(r.caller, debug, bodies)}

    def calls(f: FunctionInfo) -> bool:
        return r.callee in debug.calls.get(f.ir, ())

    if not calls(w):
        w = next((f for f in inside.values() if f.file == r.file and f.line == w.line and calls(f)), w)
    while not calls(w):  # (the local entities of _Z<f> mangle as _ZZ<f>E...)
        outer = next((f for fn, f in inside.items() if fn.startswith("_Z") and w.ir.startswith("_ZZ" + fn[2:])), None)
        if outer is None:
            break
        w = outer
    return w


def _offset(line: int, first: int) -> int:
    """A line relative to its function's first, as the compiler prints it (unsigned 32-bit)."""
    return (line - first) & 0xFFFFFFFF


def _all_bodies(caller: str, debug: DebugInfo, bodies: dict[str, list[Site]],
                depth: int = 4) -> Iterator[tuple[FunctionInfo, tuple[tuple[str, int, int], ...]]]:
    """Every function whose body was inlined into ``caller``, with its chain."""
    for b in bodies.get(caller, ()):
        info = debug.functions.get(b.callee)
        if info is not None:
            yield info, b.chain
        if depth > 1:
            for inner, chain in _all_bodies(b.callee, debug, bodies, depth - 1):
                yield inner, chain + b.chain


def _agreeing(candidates, key_of, inlined: bool, known: set[str], exact: bool = False):
    """The first of ``candidates`` whose key is in ``known`` exactly when ``inlined``, else the first
    (``exact``: AmbiguousSites where ``known`` is empty and their keys differ)."""
    if not candidates:
        return None
    if exact and not known and len({key_of(c) for c in candidates}) > 1:
        raise AmbiguousSites(f"{key_of(candidates[0])}: a remark fits {len(candidates)} copies of one body")
    return next((c for c in candidates if known and (key_of(c) in known) == inlined), candidates[0])


def _body_paths(caller: str, written: str, debug: DebugInfo, bodies: dict[str, list[Site]],
                depth: int = 4) -> Iterator[tuple[tuple[str, int, int], ...]]:
    """The chains through which ``written``'s body (a debug name) was inlined into ``caller``."""
    for b in bodies.get(caller, ()):
        if debug.debug_name(b.callee) == written:
            yield b.chain
        elif depth > 1:
            for inner in _body_paths(b.callee, written, debug, bodies, depth - 1):
                yield inner + b.chain


def final_functions_of(inlined: Iterable[Site], names: Iterable[str], defined: Iterable[str]
                       ) -> dict[str, frozenset[str]]:
    """Each function of ``names`` -> the functions of the object its code ends up in under the
    ``inlined`` sites: itself if still ``defined``, and (transitively) every function it was inlined into."""
    defined = set(defined)
    into: dict[str, set[str]] = {}
    for s in inlined:
        into.setdefault(s.callee, set()).add(s.caller)
    memo: dict[str, frozenset[str]] = {}

    def final(fn: str, seen: frozenset[str] = frozenset()) -> frozenset[str]:
        if fn in memo:
            return memo[fn]
        out = {fn} if fn in defined else set()
        for h in into.get(fn, ()):
            if h not in seen:  # recursion: a function inlined into itself through a cycle
                out |= final(h, seen | {fn})
        memo[fn] = frozenset(out)
        return memo[fn]

    return {fn: final(fn) for fn in names}


def unique_decisions(decisions: Sequence[Decision]) -> Iterator[Decision]:
    """The first decision of each key (the inliner may ask twice about a site; a replay decides per key)."""
    seen: set[str] = set()
    for d in decisions:
        if d.site.key not in seen:
            seen.add(d.site.key)
            yield d
