"""A module's textual IR with copies of function trees written into it, for :mod:`.copies`.  Each copy gets its own
``DISubprogram``: the compiler names a call site by its subprogram, so copies sharing one would share their keys."""

from __future__ import annotations

import dataclasses
import re
from typing import Iterable, Mapping

#: the suffix of copy ``k`` of a function (``name`` + suffix)
SUFFIX = ".mlgo{}"
#: the copies' own section, so the originals' section (and its end padding) is the object's without copies
COPIES_SECTION = ".text.mlgo_copies"

_DEFINE = re.compile(r'^define\b[^@]*@("(?:[^"\\]|\\.)*"|[-\w$.]+)\(')
_MD = re.compile(r"^!(\d+) = (.*)$")
_REF = re.compile(r"!(\d+)\b")
_NAME_FIELD = re.compile(r'\b(name|linkageName): "([^"]*)"')
#: linkage and visibility words a copy's ``define`` drops (a copy is internal)
_LINKAGE = {"private", "internal", "external", "linkonce_odr", "linkonce", "weak_odr", "weak",
            "available_externally", "extern_weak", "common", "dso_preemptable", "hidden", "protected", "default"}
#: metadata that is the module's, not a function's: never copied, never walked through
_GLOBAL_MD = ("!DICompileUnit(", "!DIGlobalVariable(", "!DIGlobalVariableExpression(", "!DIImportedEntity(")


#: what a copy copies as its roots: one function, or several (sorted) when a flip's code lands in several
Roots = str | tuple[str, ...]


def roots_of(roots: Roots) -> tuple[str, ...]:
    return (roots,) if isinstance(roots, str) else tuple(roots)


def copy_name(name: str, k: int) -> str:
    """Copy ``k``'s name for function (or debug name) ``name``."""
    return name + SUFFIX.format(k)


@dataclasses.dataclass
class _Function:
    start: int  # the index of its ``define`` line
    end: int    # the index of its closing ``}``
    sp: int | None  # its DISubprogram's metadata id
    debug_name: str  # what call-site keys name it by: the subprogram's linkage name, else its name


class ModuleText:
    """A module's textual IR, read once, and copies written into it (:meth:`with_copies`)."""

    def __init__(self, text: str):
        self.lines = text.split("\n")
        self.md: dict[int, str] = {}
        self.md_line: dict[int, int] = {}
        self.functions: dict[str, _Function] = {}
        self._used_line: int | None = None
        start = None
        name = ""
        for i, ln in enumerate(self.lines):
            if start is not None:
                if ln == "}":
                    sp = re.search(r"!dbg !(\d+)", self.lines[start])
                    self.functions[name] = _Function(start, i, int(sp.group(1)) if sp else None, name)
                    start = None
            elif m := _DEFINE.match(ln):
                start, name = i, m.group(1).strip('"')
            elif m := _MD.match(ln):
                self.md[int(m.group(1))] = m.group(2)
                self.md_line[int(m.group(1))] = i
            elif ln.startswith("@llvm.compiler.used = "):
                self._used_line = i
        self.next_id = max(self.md, default=-1) + 1
        for f in self.functions.values():
            if f.sp is not None:
                fields = dict(_NAME_FIELD.findall(self.md.get(f.sp, "")))
                f.debug_name = fields.get("linkageName") or fields.get("name") or f.debug_name
        self._local: dict[str, list[int]] = {}

    def debug_name(self, fn: str) -> str:
        f = self.functions.get(fn)
        return f.debug_name if f is not None else fn

    def is_local(self, fn: str) -> bool:
        """``fn`` is static, as its copies are (a copy of another may be optimised as it never is)."""
        f = self.functions.get(fn)
        if f is None:
            return False
        words = self.lines[f.start].split("@", 1)[0].split()
        return "internal" in words or "private" in words

    def can_copy(self, names: Iterable[str]) -> bool:
        """Every function of ``names`` is defined here with a subprogram."""
        return all(n in self.functions and self.functions[n].sp is not None for n in names)

    def _refs(self, i: int) -> list[int]:
        return [int(x) for x in _REF.findall(self.md.get(i, ""))]

    def _local_metadata(self, fn: str) -> list[int]:
        """The metadata nodes ``fn``'s copy needs its own of: those its body reaches that lead back
        to its subprogram, not through the module's own nodes."""
        if fn in self._local:
            return self._local[fn]
        f = self.functions[fn]
        body = "\n".join(self.lines[f.start:f.end + 1])
        seen: set[int] = set()
        stack = [int(x) for x in _REF.findall(body)]
        while stack:
            i = stack.pop()
            if i in seen or i not in self.md or self.md[i].removeprefix("distinct ").startswith(_GLOBAL_MD):
                continue
            seen.add(i)
            stack.extend(self._refs(i))
        # which of them lead to the subprogram: walked back from it (over the nodes seen only)
        users: dict[int, list[int]] = {}
        for i in seen:
            for j in self._refs(i):
                users.setdefault(j, []).append(i)
        leads, todo = {f.sp}, [f.sp]
        while todo:
            for i in users.get(todo.pop(), ()):
                if i not in leads:
                    leads.add(i)
                    todo.append(i)
        out = sorted(leads & seen | {f.sp})
        self._local[fn] = out
        return out

    def with_copies(self, copies: Mapping[int, tuple[Roots, Iterable[str]]]) -> str:
        """The module with each copy ``k`` (``copies[k] = (root, tree)``) of the tree's functions,
        internal, in :data:`COPIES_SECTION`, the roots kept alive by ``llvm.compiler.used``."""
        extra_fn: list[str] = []
        extra_md: list[str] = []
        kept: list[str] = []
        next_id = self.next_id
        for k, (root, names) in sorted(copies.items()):
            roots = roots_of(root)
            names = sorted(set(names) | set(roots))
            rename = {n: copy_name(n, k) for n in names}
            for n in names:
                ids = self._local_metadata(n)
                remap = {i: next_id + j for j, i in enumerate(ids)}
                next_id += len(ids)
                extra_fn.append(self._copy_function(n, rename, remap))
                extra_md += self._copy_metadata(n, ids, remap, k)
            kept += [rename[r] for r in roots]
        lines = list(self.lines)
        used = self._used(kept)
        if self._used_line is not None:
            lines[self._used_line] = used
            used = ""
        first_md = min(self.md_line.values(), default=len(lines))
        out = lines[:first_md] + extra_fn + ([used] if used else []) + lines[first_md:] + extra_md
        return "\n".join(out) + "\n"

    def _copy_function(self, fn: str, rename: Mapping[str, str], remap: Mapping[int, int]) -> str:
        f = self.functions[fn]
        text = "\n".join(self.lines[f.start:f.end + 1])
        head, _, rest = text.partition("\n")
        # a copy is its own symbol: internal (nothing outside sees it), no comdat
        prefix, _, after = head.partition("@")
        words = [w for w in prefix.split()[1:] if w not in _LINKAGE]
        head = re.sub(r"\s+comdat(\([^)]*\))?", "", " ".join(["define", "internal", *words]) + " @" + after)
        head = _in_section(head, COPIES_SECTION)
        text = head + "\n" + rest
        for old, new in rename.items():
            text = re.sub("@" + re.escape(_ident(old)) + r"(?![-\w$.])", "@" + _ident(new), text)
        return _remap_refs(text, remap)

    def _copy_metadata(self, fn: str, ids: list[int], remap: Mapping[int, int], k: int) -> list[str]:
        sp = self.functions[fn].sp
        out = []
        for i in ids:
            text = _remap_refs(self.md[i], remap)
            if i == sp:
                text = _NAME_FIELD.sub(lambda m: f'{m.group(1)}: "{copy_name(m.group(2), k)}"', text)
            out.append(f"!{remap[i]} = {text}")
        return out

    def _used(self, kept: list[str]) -> str:
        old = re.findall(r"ptr (@[^,\]\s]+)", self.lines[self._used_line]) if self._used_line is not None else []
        refs = old + ["@" + _ident(n) for n in kept]
        return (f"@llvm.compiler.used = appending global [{len(refs)} x ptr] [" + ", ".join(f"ptr {r}" for r in refs)
                + '], section "llvm.metadata"')


def _in_section(head: str, section: str) -> str:
    """A ``define`` line placing its function in ``section``."""
    if re.search(r'\ssection "[^"]*"', head):
        return re.sub(r'\ssection "[^"]*"', f' section "{section}"', head)
    depth, end = 0, None
    for i, ch in enumerate(head[head.index("@"):], head.index("@")):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                end = i
                break
    if end is None:
        return head
    m = re.search(r'\s(?:align \d|personality |prefix |prologue |gc "|!\w|\{)', head[end:])
    at = end + (m.start() if m else len(head) - end)
    return head[:at] + f' section "{section}"' + head[at:]


def _ident(name: str) -> str:
    """An IR identifier for ``name``, quoted as llvm-dis prints it (a C++ lambda's ``$_0`` is)."""
    return name if re.fullmatch(r"[-A-Za-z._][-A-Za-z0-9._]*", name) else '"' + name + '"'


def _remap_refs(text: str, remap: Mapping[int, int]) -> str:
    return _REF.sub(lambda m: f"!{remap.get(int(m.group(1)), int(m.group(1)))}", text)
