"""Per-function sizes of one relocatable object, adding up to ``llvm-size``'s ``text`` column, so that a
batched search can read each inlining flip's effect from the functions it touches.  Each byte of
``text`` (allocated sections, executable or not writable) goes to one function or to ``other``:

* code: from a function's symbol to the next function's (its padding is fixed by where it ends);
* unwind: each FDE to the function its ``pc_begin`` points into; CIEs, and the 4 bytes the assembler
  pads the last FDE with (they depend on every record's size), to ``other``;
* read-only data, cut at anchors (symbols, targets of code relocations, LSDAs): a function owns its
  LSDAs and jump tables, which inlining copies; the rest (constant arrays, strings) is shared: ``other``;
* constant pools (``.rodata.cst8``...), not merged: a function owns the entries its code refers to,
  unless two functions refer to one.

Keys are mangled names; aliases at one address are one function (the smallest name, unless
:meth:`ObjectSizes.keyed_by` names another); two of one name are ``name``, ``name#2``...  The ELF
reader is hand-written (x86-64 relocatable objects only): much faster than pyelftools.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import re
import struct
from collections import Counter, namedtuple
from typing import Iterable

from mlgo_host.errors import CompilerError

SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR, SHF_MERGE, SHF_STRINGS = 0x1, 0x2, 0x4, 0x10, 0x20
SHT_SYMTAB, SHT_RELA, SHT_NOBITS, SHT_SYMTAB_SHNDX = 2, 4, 8, 18
SHT_X86_64_UNWIND = 0x70000001
STT_OBJECT, STT_FUNC, STT_SECTION, STT_GNU_IFUNC = 1, 2, 3, 10
SHN_LORESERVE, SHN_XINDEX = 0xFF00, 0xFFFF
EM_X86_64, ET_REL = 62, 1
# x86-64 relocations whose field holds S + A - P: from code, the target is about S + A + 4 (the
# displacement ends the instruction but for an immediate).
PC_RELATIVE = {2, 4, 13, 15, 24}  # PC32, PLT32, PC16, PC8, PC64
# The GOT-relative ones name their symbol itself; the addend is the field's.
GOT_RELATIVE = {3, 9, 41, 42}  # GOT32, GOTPCREL, GOTPCRELX, REX_GOTPCRELX

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_RELA = struct.Struct("<QQq")


@dataclasses.dataclass(frozen=True)
class ObjectSizes:
    """One object's ``text`` split over its functions."""

    text: int                      # exactly llvm-size's Berkeley text column
    functions: dict[str, int]      # function symbol (mangled) -> bytes attributed to it
    other: int                     # text - sum(functions.values()): bytes no single function owns
    aliases: dict[str, str] = dataclasses.field(default_factory=dict)  # alias symbol -> its key
    other_sections: dict[str, int] = dataclasses.field(default_factory=dict)  # section name -> its bytes in other
    #: function -> the non-zero padding after its code, counted in its number: what it owes to where it lies
    padding: dict[str, int] = dataclasses.field(default_factory=dict)
    #: function -> {constant pool section: bytes of its entries} (counted in its number)
    pools: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    #: ``other`` in sections no function owns any of, piece by piece (a string, a constant entry):
    #: (section, its bytes) -> (bytes in all, the functions whose code refers to it), to trace a change of
    #: ``other`` to the functions that made or dropped a piece (None: not read)
    shared: dict[tuple[str, bytes], tuple[int, frozenset[str]]] | None = None
    #: function -> the other functions whose code refers to it (calls, its address taken); None: not read
    referrers: dict[str, frozenset[str]] | None = None

    def unpadded(self, fn: str) -> int | None:
        """``fn``'s number without its trailing padding, or None."""
        n = self.functions.get(fn)
        return None if n is None else n - self.padding.get(fn, 0)

    def keyed_by(self, names: Iterable[str]) -> "ObjectSizes":
        """These sizes with each function keyed by one of its aliases in ``names`` when its key is not one:
        a reader that knows the IR's names (a C++ constructor's function is ``C2``; ``C1``, its alias at the
        same address, sorts first) reads every field under them."""
        names = set(names)
        new: dict[str, str] = {}
        for alias, key in self.aliases.items():
            if alias in names and key not in names:
                new[key] = min(new.get(key, alias), alias)
        if not new:
            return self

        def name(f: str) -> str:
            return new.get(f, f)

        aliases = {a: name(k) for a, k in self.aliases.items() if a != new.get(k)}
        aliases.update(new)
        shared = None if self.shared is None else \
            {piece: (n, frozenset(map(name, refs))) for piece, (n, refs) in self.shared.items()}
        referrers = None if self.referrers is None else \
            {name(f): frozenset(map(name, refs)) for f, refs in self.referrers.items()}
        return dataclasses.replace(self, functions={name(f): n for f, n in self.functions.items()}, aliases=aliases,
                                   padding={name(f): n for f, n in self.padding.items()},
                                   pools={name(f): p for f, p in self.pools.items()}, shared=shared,
                                   referrers=referrers)


class _Section(namedtuple("_Section", "name type flags offset size link info entsize")):
    @property
    def berkeley_text(self) -> bool:
        """Counted in llvm-size's text column (its rule: ELFObjectFile::isBerkeleyText)."""
        return bool(self.flags & SHF_ALLOC) and bool(self.flags & SHF_EXECINSTR or not self.flags & SHF_WRITE)

    @property
    def eh_frame(self) -> bool:
        return self.type == SHT_X86_64_UNWIND or self.name == ".eh_frame"


_Symbol = namedtuple("_Symbol", "name kind shndx value size")


class _Elf:
    """What this module reads of an ELF64 little-endian relocatable object."""

    def __init__(self, data: bytes, path: str):
        self.data, self.path = data, path
        if len(data) < _EHDR.size or data[:4] != b"\x7fELF":
            self.fail("not an ELF file")
        ident, e_type, machine, *_, shoff, _flags, _eh, _ph, _phn, shentsize, shnum, shstrndx = _EHDR.unpack_from(data)
        if ident[4] != 2 or ident[5] != 1:
            self.fail("not a 64-bit little-endian ELF file")
        if e_type != ET_REL or machine != EM_X86_64:
            self.fail(f"not an x86-64 relocatable object (e_type {e_type}, e_machine {machine})")
        if shentsize != _SHDR.size:
            self.fail(f"section header size {shentsize}, expected {_SHDR.size}")
        raw = [self._shdr(shoff, 0)]
        shnum = shnum or raw[0][5]  # more than 0xff00 sections: the count is in section 0
        if shstrndx == SHN_XINDEX:
            shstrndx = raw[0][6]
        raw += [self._shdr(shoff, i) for i in range(1, shnum)]
        self.sections = [_Section("", t, fl, off, size, link, info, es)
                         for _n, t, fl, _a, off, size, link, info, _al, es in raw]
        if any(s.type != SHT_NOBITS and s.offset + s.size > len(data) for s in self.sections):
            self.fail("truncated (a section runs past the end of the file)")
        if not 0 <= shstrndx < shnum:
            self.fail(f"section name table index {shstrndx} out of range")
        names = self.sections[shstrndx]
        self.sections = [s._replace(name=self.string(names, r[0])) for s, r in zip(self.sections, raw)]
        self.symbols = self._symbols()
        self.rela: dict[int, list[_Section]] = {}  # section -> its relocation sections
        for s in self.sections:
            if s.type == SHT_RELA:
                self.rela.setdefault(s.info, []).append(s)

    def fail(self, why: str):
        raise CompilerError(f"{self.path}: {why}")

    def _shdr(self, shoff: int, i: int) -> tuple:
        at = shoff + i * _SHDR.size
        if at + _SHDR.size > len(self.data):
            self.fail("truncated (section headers run past the end of the file)")
        return _SHDR.unpack_from(self.data, at)

    def string(self, table: _Section, at: int) -> str:
        start = table.offset + at
        end = self.data.find(b"\0", start, table.offset + table.size)
        if at >= table.size or end < 0:
            self.fail(f"string at {at} outside its table {table.name!r}")
        return self.data[start:end].decode("utf-8", "surrogateescape")

    def contents(self, s: _Section) -> memoryview:
        return memoryview(self.data)[s.offset:s.offset + s.size]

    def _symbols(self) -> list[_Symbol]:
        tab = next((s for s in self.sections if s.type == SHT_SYMTAB), None)
        if tab is None:
            return []
        if tab.size % _SYM.size or not 0 < tab.link < len(self.sections):
            self.fail("malformed symbol table")
        names = self.sections[tab.link]
        xindex = next((s for s in self.sections if s.type == SHT_SYMTAB_SHNDX and s.link == self.sections.index(tab)),
                      None)
        out = []
        for i, (name, info, _other, shndx, value, size) in enumerate(_SYM.iter_unpack(self.contents(tab))):
            if shndx == SHN_XINDEX and xindex is not None:
                shndx = struct.unpack_from("<I", self.data, xindex.offset + 4 * i)[0]
            kind = info & 0xF
            # only functions' names are used: skip decoding the others
            out.append(_Symbol(self.string(names, name) if kind in (STT_FUNC, STT_GNU_IFUNC) else "", kind,
                               shndx if shndx < SHN_LORESERVE or shndx > 0xFFFF else 0, value, size))
        return out

    def relocations(self, target: int):
        """(offset, symbol, type, addend) of every RELA entry applying to section ``target``."""
        for s in self.rela.get(target, ()):
            if s.size % _RELA.size:
                self.fail(f"malformed relocation section {s.name!r}")
            for off, info, addend in _RELA.iter_unpack(self.contents(s)):
                sym = info >> 32
                if sym >= len(self.symbols):
                    self.fail(f"relocation in {s.name!r} names symbol {sym} of {len(self.symbols)}")
                yield off, self.symbols[sym], info & 0xFFFFFFFF, addend


class _Functions:
    """Functions by section and start address: keys, and which function holds an address."""

    def __init__(self, elf: _Elf):
        by_place: dict[tuple[int, int], list[str]] = {}
        code: dict[tuple[int, int], int] = {}
        for sym in elf.symbols:
            if sym.kind in (STT_FUNC, STT_GNU_IFUNC) and 0 < sym.shndx < len(elf.sections) \
                    and elf.sections[sym.shndx].berkeley_text:
                by_place.setdefault((sym.shndx, sym.value), []).append(sym.name)
                code[sym.shndx, sym.value] = max(code.get((sym.shndx, sym.value), 0), sym.size)
        self.aliases: dict[str, str] = {}
        self.code: dict[str, int] = {}  # key -> its symbol's size (its code, without padding)
        self.starts: dict[int, list[int]] = {}
        self.keys: dict[int, list[str]] = {}
        seen: dict[str, int] = {}
        for (shndx, value), names in sorted(by_place.items()):
            names = sorted(set(names))
            key = names[0]
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > 1:
                key = f"{key}#{seen[key]}"
            self.aliases.update((n, key) for n in names[1:])
            self.code[key] = code[shndx, value]
            self.starts.setdefault(shndx, []).append(value)
            self.keys.setdefault(shndx, []).append(key)

    def at(self, shndx: int, offset: int) -> str | None:
        """The function whose extent (start to the next start) holds ``offset``."""
        i = bisect.bisect_right(self.starts.get(shndx, ()), offset) - 1
        return self.keys[shndx][i] if i >= 0 else None


def object_sizes(path: str | os.PathLike) -> ObjectSizes:
    """Split ``path``'s Berkeley ``text`` over its functions; CompilerError for anything but an x86-64
    relocatable object."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CompilerError(f"{path}: cannot read the object: {e.strerror or e}") from None
    try:
        return _attribute(_Elf(data, str(path)))
    except (struct.error, IndexError, ValueError) as e:
        raise CompilerError(f"{path}: malformed ELF object ({type(e).__name__}: {e})") from None


def _attribute(elf: _Elf) -> ObjectSizes:
    funcs = _Functions(elf)
    padding: dict[str, int] = {}
    lsdas: dict[int, dict[int, str]] = {}  # section -> LSDA offset -> function
    given: dict[int, dict[str, int]] = {}  # section -> function -> bytes given to it
    for i, sec in enumerate(elf.sections):
        if sec.berkeley_text and sec.flags & SHF_EXECINSTR:
            given[i] = _code(sec, funcs, i, padding)
        elif sec.berkeley_text and sec.eh_frame:
            given[i] = _eh_frame(elf, i, funcs, lsdas)
    code_refs, named = _code_references(elf, funcs)
    symbol_starts: dict[int, set[int]] = {}
    for sym in elf.symbols:
        if sym.kind != STT_SECTION:
            symbol_starts.setdefault(sym.shndx, set()).add(sym.value)
    pools = _pools(elf, code_refs, named)
    given.update(pools)
    for i, sec in enumerate(elf.sections):
        if sec.berkeley_text and i not in given and not sec.flags & SHF_MERGE:
            anchors = symbol_starts.get(i, set()) | {t for t, _ in code_refs.get(i, ())} | set(lsdas.get(i, ()))
            cuts = sorted(a for a in anchors if 0 <= a < sec.size)
            given[i] = _read_only(sec.size, cuts, code_refs.get(i, []), lsdas.get(i, {}),
                                  _pointers_into_code(elf, i, cuts, funcs))
    sizes = {k: 0 for keys in funcs.keys.values() for k in keys}
    for per_fn in given.values():
        for fn, n in per_fn.items():
            sizes[fn] += n
    text, other_sections = 0, {}
    shared: dict[tuple[str, bytes], tuple[int, frozenset[str]]] = {}
    for i, sec in enumerate(elf.sections):
        if sec.berkeley_text:
            text += sec.size
            left = sec.size - sum(given.get(i, {}).values())
            if left:
                other_sections[sec.name] = other_sections.get(sec.name, 0) + left
            if left == sec.size and not sec.flags & SHF_EXECINSTR and not sec.eh_frame and sec.type != SHT_NOBITS:
                _add_shared(elf, sec, symbol_starts.get(i, set()), code_refs.get(i, []), shared)
    return ObjectSizes(text=text, functions=sizes, other=text - sum(sizes.values()), aliases=funcs.aliases,
                       other_sections=other_sections, padding=padding,
                       pools=_by_function(elf, pools), shared=shared, referrers=_referrers(elf, code_refs, funcs))


def _referring(cuts: list[int], size: int, refs: list[tuple[int, str]]) -> list[set[str]]:
    """For each piece of a section of ``size`` bytes cut at ``cuts``: the functions of ``refs``
    ((target offset, function)) that refer into it."""
    who: list[set[str]] = [set() for _ in cuts]
    for target, fn in refs:
        i = bisect.bisect_right(cuts, target) - 1
        if i >= 0 and target < size:
            who[i].add(fn)
    return who


def _add_shared(elf: _Elf, sec: _Section, starts: set[int], refs: list[tuple[int, str]],
                shared: dict[tuple[str, bytes], tuple[int, frozenset[str]]]) -> None:
    """A section wholly in ``other`` cut into pieces (strings, constant entries, else at anchors), added to
    ``shared`` by content with the functions whose code refers into each."""
    data = bytes(elf.contents(sec))
    if sec.flags & SHF_STRINGS and sec.entsize == 1:
        cuts = [0] + [m.end() for m in re.finditer(b"\0", data[:-1])]
    elif sec.flags & SHF_MERGE and sec.entsize > 0:
        cuts = list(range(0, len(data), sec.entsize))
    else:
        cuts = sorted({0} | {a for a in starts | {t for t, _ in refs} if 0 <= a < len(data)})
    for start, end, fns in zip(cuts, cuts[1:] + [len(data)], _referring(cuts, len(data), refs)):
        key = (sec.name, data[start:end])
        n, before = shared.get(key, (0, frozenset()))
        shared[key] = (n + end - start, before | fns)


def _referrers(elf: _Elf, code_refs: dict[int, list[tuple[int, str]]], funcs: _Functions) -> dict[str, frozenset[str]]:
    """Function -> the other functions whose code refers to it, for functions alone in their section:
    the assembler resolves a call within a section without a relocation."""
    out: dict[str, set[str]] = {}
    for i, refs in code_refs.items():
        if not elf.sections[i].flags & SHF_EXECINSTR or len(funcs.starts.get(i, ())) != 1:
            continue
        for target, fn in refs:
            g = funcs.at(i, target)
            if g is not None and g != fn:
                out.setdefault(g, set()).add(fn)
    return {g: frozenset(fs) for g, fs in out.items()}


def _by_function(elf: _Elf, pools: dict[int, dict[str, int]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for i, per_fn in pools.items():
        name = elf.sections[i].name
        for fn, n in per_fn.items():
            out.setdefault(fn, {})[name] = out.get(fn, {}).get(name, 0) + n
    return out


def _pools(elf: _Elf, code_refs: dict[int, list[tuple[int, str]]], named: set[int]) -> dict[int, dict[str, int]]:
    """Mergeable constant sections (not strings) -> per function, the bytes of the entries its code refers
    to.  A section holding a named constant (an object symbol, shared by every copy of its users) stays
    in ``other``, and so does one whose entries two functions would share."""
    out: dict[int, dict[str, int]] = {}
    for i, refs in code_refs.items():
        sec = elf.sections[i]
        if i in named or not (sec.berkeley_text and sec.flags & SHF_MERGE and not sec.flags & SHF_STRINGS
                              and sec.entsize > 0):
            continue
        entries: dict[str, set[int]] = {}
        for target, fn in refs:
            # the entry at or just after the target: an immediate after the displacement
            # (vpshufd $imm, .LCPI(%rip)) puts S + A + 4 up to 4 bytes before it
            entries.setdefault(fn, set()).add(-(-target // sec.entsize) * sec.entsize)
        owners = Counter(a for at in entries.values() for a in at)
        if max(owners.values()) == 1 and len(owners) * sec.entsize <= sec.size:
            out[i] = {fn: len(at) * sec.entsize for fn, at in entries.items()}
    return out


def _code(sec: _Section, funcs: _Functions, index: int, padding: dict[str, int]) -> dict[str, int]:
    """Each function from its start to the next function's, its padding noted in ``padding``."""
    given = {}
    starts, keys = funcs.starts.get(index, []), funcs.keys.get(index, [])
    for key, start, end in zip(keys, starts, starts[1:] + [sec.size]):
        given[key] = n = max(0, min(end, sec.size) - start)
        if 0 < funcs.code[key] < n:
            padding[key] = n - funcs.code[key]
    return given


def _eh_frame(elf: _Elf, index: int, funcs: _Functions, lsdas: dict[int, dict[int, str]]) -> Counter[str]:
    """Each FDE to the function its pc_begin points into; notes each FDE's LSDA (its other relocation)."""
    fdes = _fde_extents(elf, elf.sections[index])
    starts = [start for start, _, _ in fdes]
    relocs = [(off, sym.shndx, sym.value + addend) for off, sym, _type, addend in elf.relocations(index)]
    owners: dict[int, str] = {}  # FDE start -> its function
    given: Counter[str] = Counter()
    for off, shndx, target in relocs:
        i = bisect.bisect_right(starts, off) - 1
        if i >= 0 and off == fdes[i][1]:
            owner = funcs.at(shndx, target)
            if owner is not None:
                owners[starts[i]] = owner
                given[owner] += fdes[i][2] - starts[i]
    for off, shndx, target in relocs:
        i = bisect.bisect_right(starts, off) - 1
        if i >= 0 and fdes[i][1] < off < fdes[i][2] and starts[i] in owners:
            lsdas.setdefault(shndx, {})[target] = owners[starts[i]]
    return given


def _fde_extents(elf: _Elf, sec: _Section) -> list[tuple[int, int, int]]:
    """(start, offset of pc_begin, end) of each FDE of an ``.eh_frame``."""
    data, at, fdes = elf.contents(sec), 0, []
    while at + 4 <= len(data):
        length, head = int.from_bytes(data[at:at + 4], "little"), 4
        if length == 0xFFFFFFFF:  # 64-bit DWARF: 8-byte length and CIE pointer
            length, head = int.from_bytes(data[at + 4:at + 12], "little"), 12
        end = at + head + length
        if end > len(data):
            elf.fail(f"{sec.name}: record at {at} runs past the section's end")
        id_size = 4 if head == 4 else 8
        if length and int.from_bytes(data[at + head:at + head + id_size], "little"):
            fdes.append((at, at + head + id_size, end))
        at = end
    # the assembler's DW_CFA_nop padding of the last FDE depends on every record's size
    if fdes and fdes[-1][2] == len(data) and len(data) % 8 == 0 and _trailing_nops(data, fdes[-1]) >= 4:
        fdes[-1] = (fdes[-1][0], fdes[-1][1], len(data) - 4)
    return fdes


def _trailing_nops(data: memoryview, fde: tuple[int, int, int]) -> int:
    """DW_CFA_nop bytes ending an FDE (clang's: 'z' augmentation, 4-byte pc_begin and pc_range)."""
    _, pc_begin, end = fde
    at, aug_len, shift = pc_begin + 8, 0, 0
    while at < end:  # ULEB128 augmentation length
        byte = data[at]
        aug_len |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            break
    instructions = bytes(data[at + aug_len:end])
    return len(instructions) - len(instructions.rstrip(b"\0"))


def _code_references(elf: _Elf, funcs: _Functions) -> tuple[dict[int, list[tuple[int, str]]], set[int]]:
    """Section -> (target offset, referring function) for every relocation in code, and the sections
    code refers to through an object symbol (a named constant, not a label)."""
    refs: dict[int, list[tuple[int, str]]] = {}
    named: set[int] = set()
    for shndx, starts in funcs.starts.items():
        for off, sym, rtype, addend in elf.relocations(shndx):
            if not 0 < sym.shndx < len(elf.sections):
                continue
            if sym.kind == STT_OBJECT:
                named.add(sym.shndx)
            target = sym.value if rtype in GOT_RELATIVE else sym.value + addend + (4 if rtype in PC_RELATIVE else 0)
            owner = funcs.at(shndx, off)
            if owner is not None:
                refs.setdefault(sym.shndx, []).append((target, owner))
    return refs, named


def _pointers_into_code(elf: _Elf, index: int, cuts: list[int], funcs: _Functions) -> list[set[str]]:
    """For each piece of section ``index``: the functions its relocations point into.  A jump table's
    PC-relative entries hold ``.LBB - .LJTI``: S + A less the entry's distance from the piece's start."""
    inside: list[set[str]] = [set() for _ in cuts]
    for off, sym, rtype, addend in elf.relocations(index):
        i = bisect.bisect_right(cuts, off) - 1
        if i >= 0:
            target = sym.value + addend - (off - cuts[i] if rtype in PC_RELATIVE else 0)
            owner = funcs.at(sym.shndx, target)
            if owner is not None:
                inside[i].add(owner)
    return inside


def _read_only(size: int, cuts: list[int], refs: list[tuple[int, str]], lsdas: dict[int, str],
               inside: list[set[str]]) -> Counter[str]:
    """Cut a section at ``cuts``.  A piece is a function's when it is its LSDA, or a jump table only it
    refers to.  Constant arrays stay in ``other`` even with one referrer: inlining their user shares
    them, which would move them from a function to ``other``."""
    given: Counter[str] = Counter()
    owners = _referring(cuts, size, [*refs, *lsdas.items()])
    for start, end, who, points_into in zip(cuts, cuts[1:] + [size], owners, inside):
        if len(who) == 1 and (start in lsdas or who == points_into):
            given[next(iter(who))] += end - start
    return given
