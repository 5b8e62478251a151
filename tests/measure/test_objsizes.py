"""Per-function object sizes against the real clang-19 and llvm-size-19:
they add up to llvm-size's text, FDEs and LSDAs go to their functions, and a
change of one function's body moves that function's number only."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from _corpus_helpers import CLANG
from mlgo_host.errors import CompilerError
from mlgo_host.measure.objsizes import ObjectSizes, object_sizes
from mlgo_host.measure.sizes import text_size

# What the corpus compiles with: -Oz, position-independent.
FLAGS = ["-Oz", "-fPIC", "-c"]

C_SOURCE = r"""
#include <string.h>
__attribute__((noinline)) static int helper(int x) { return x * 3 + 1; }
int table(int x) {
  switch (x) {
  case 0: return helper(x); case 1: return x + 7; case 2: return strlen("two");
  case 3: return x * x; case 4: return -x; case 5: return helper(x + 2);
  default: return 0;
  }
}
int other(char *p, int n) { char b[64]; memcpy(b, p, n); return b[3] + (int)strlen("hello world"); }
const char *name(int i) { static const char *t[] = {"a", "bb", "ccc"}; return t[i]; }
"""

CXX_SOURCE = r"""
#include <stdexcept>
#include <string>
struct Box { Box(int v); int v; };
Box::Box(int v) : v(v) { if (v < 0) throw std::invalid_argument("negative"); }
template <class T> T twice(T x) { return x + x; }
int guarded(int v) {
  try { Box b(v); return twice(b.v); } catch (const std::exception &) { return -1; }
}
std::string greet(const std::string &who) { return "hello " + who; }
"""


def _compile(tmp_path: Path, name: str, source: str, *extra: str) -> Path:
    src = tmp_path / name
    src.write_text(source)
    out = src.with_suffix(".o")
    subprocess.run([CLANG.replace("clang", "clang++") if name.endswith(".cc") else CLANG, *FLAGS, *extra, str(src), "-o", str(out)],
                   check=True)
    return out


def _symbols(obj: Path) -> dict[str, tuple[int, int]]:
    """Defined code symbols (weak ones too): name -> (address, size)."""
    out = subprocess.run(["llvm-nm-19", "-S", "--defined-only", str(obj)], capture_output=True, text=True,
                         check=True).stdout
    return {f[3]: (int(f[0], 16), int(f[1], 16)) for f in (ln.split() for ln in out.splitlines())
            if len(f) == 4 and f[2] in "tTW"}


def _section_size(obj: Path, name: str) -> int:
    out = subprocess.run(["llvm-size-19", "-A", str(obj)], capture_output=True, text=True, check=True).stdout
    return sum(int(f[1]) for f in (ln.split() for ln in out.splitlines()) if f and f[0] == name)


def _symbol_sizes(obj: Path) -> dict[str, int]:
    return {k: size for k, (_, size) in _symbols(obj).items()}


def _fde_sizes(obj: Path) -> dict[int, int]:
    """FDE record size (length field + 4) by the start address it covers."""
    out = subprocess.run(["llvm-dwarfdump-19", "--eh-frame", str(obj)], capture_output=True, text=True,
                         check=True).stdout
    return {int(m.group(2), 16): int(m.group(1), 16) + 4
            for m in re.finditer(r"^\S+ ([0-9a-f]+) \S+ FDE cie=\S+ pc=([0-9a-f]+)\.\.", out, re.M)}


@pytest.mark.parametrize("name,source", [("a.c", C_SOURCE), ("a.cc", CXX_SOURCE)])
def test_text_is_llvm_sizes_and_the_parts_add_up(tmp_path, name, source):
    obj = _compile(tmp_path, name, source)
    s = object_sizes(obj)
    assert s.text == text_size(obj)
    assert sum(s.functions.values()) + s.other == s.text
    assert sum(s.other_sections.values()) == s.other
    assert set(_symbol_sizes(obj)) == set(s.functions) | set(s.aliases)
    assert "helper" in s.functions or name.endswith(".cc")  # a static function counts


def test_cxx_lsdas_comdats_and_constructor_aliases(tmp_path):
    obj = _compile(tmp_path, "a.cc", CXX_SOURCE)
    s = object_sizes(obj)
    assert s.aliases == {"_ZN3BoxC2Ei": "_ZN3BoxC1Ei"}  # one function, keyed by the smallest name
    assert not any(k.startswith(".gcc_except_table") for k in s.other_sections)  # every LSDA has its FDE
    (address, size), fdes = _symbols(obj)["_Z7guardedi"], _fde_sizes(obj)
    lsda = s.functions["_Z7guardedi"] - size - fdes[address]  # its try/catch's call-site and action tables
    assert 0 < lsda <= _section_size(obj, ".gcc_except_table")


def test_each_function_owns_its_fde(tmp_path):
    # two leaf functions: CIE 24 + FDEs 20 + 20 bytes, a multiple of 8, so no end padding
    obj = _compile(tmp_path, "two.c", "int f(int x) { return x * 5 + 1; }\nint g(int x) { return x - 9; }\n")
    s, sym = object_sizes(obj), _symbol_sizes(obj)
    fdes = sorted(_fde_sizes(obj).values())
    assert fdes == [20, 20]
    assert s.functions == {"f": sym["f"] + 20, "g": sym["g"] + 20}
    assert s.other == s.other_sections[".eh_frame"] == 24  # the CIE


def test_last_fde_padding_is_other(tmp_path):
    # three leaf functions: 24 + 3 * 20 = 84 bytes, padded to 88 in the last FDE
    obj = _compile(tmp_path, "three.c", "int f(int x) { return x * 5 + 1; }\nint g(int x) { return x - 9; }\n"
                                        "int h(int x) { return x ^ 3; }\n")
    s, sym = object_sizes(obj), _symbol_sizes(obj)
    assert sorted(_fde_sizes(obj).values()) == [20, 20, 24]
    assert s.functions == {k: sym[k] + 20 for k in "fgh"}
    assert s.other_sections == {".eh_frame": 28}


def test_a_body_change_moves_that_function_only(tmp_path):
    a = object_sizes(_compile(tmp_path, "v1.c", C_SOURCE))
    changed = C_SOURCE.replace("case 4: return -x;", "case 4: return -x; case 6: return x << 3; case 7: return 9;")
    b = object_sizes(_compile(tmp_path, "v2.c", changed))
    assert b.text > a.text
    assert {k for k in a.functions.keys() | b.functions.keys() if a.functions.get(k) != b.functions.get(k)} == \
        {"table"}
    assert a.other == b.other


def test_jump_table_is_its_functions_and_a_constant_table_is_other(tmp_path):
    obj = _compile(tmp_path, "jt.c", C_SOURCE)
    s, syms, fdes = object_sizes(obj), _symbols(obj), _fde_sizes(obj)
    address, size = syms["table"]
    assert s.functions["table"] == size + fdes[address] + 6 * 4  # code, FDE, 6 PC-relative jump table entries
    assert s.other_sections[".rodata"] == 3 * 4  # name's table of three string offsets


POOL_SOURCE = r"""
double f(double x) { return x * 1.2345 + 6.789; }
double g(double x) { return x * 2.5 - 0.125; }
long h(int i) { static const long t[4] = {11, 22, 33, 44}; long c[4]; __builtin_memcpy(c, t, sizeof c); return c[i & 3]; }
"""


def test_a_constant_pool_is_its_functions_and_a_named_constant_is_other(tmp_path):
    obj = _compile(tmp_path, "pool.c", POOL_SOURCE)
    s, syms, fdes = object_sizes(obj), _symbols(obj), _fde_sizes(obj)
    for fn in "fg":  # code, FDE and two 8-byte constants of its own
        address, size = syms[fn]
        assert s.functions[fn] == size + s.padding.get(fn, 0) + fdes[address] + 16, fn
        assert s.pools[fn] == {".rodata.cst8": 16}
    assert ".rodata.cst8" not in s.other_sections
    assert "h" not in s.pools  # its table is one object, whoever refers to it
    assert sum(s.functions.values()) + s.other == s.text == text_size(obj)
    # the same constants in another function: each pool keeps its own copy
    twice = object_sizes(_compile(tmp_path, "pool2.c", POOL_SOURCE + "double k(double x) { return x * 1.2345 + 6.789; }\n"))
    assert twice.pools["k"] == {".rodata.cst8": 16} and twice.functions["f"] == s.functions["f"]


@pytest.mark.skipif(shutil.which("ld") is None, reason="needs ld -r to merge two objects")
def test_two_functions_of_one_name_stay_apart(tmp_path):
    parts = [_compile(tmp_path, f"d{i}.c", f"__attribute__((noinline)) static int dup(int x) {{ return x * {i + 3}; }}\n"
                                           f"int f{i}(int x) {{ return dup(x) + 1; }}\n") for i in (1, 2)]
    merged = tmp_path / "merged.o"
    subprocess.run(["ld", "-r", *map(str, parts), "-o", str(merged)], check=True)
    s = object_sizes(merged)
    assert {"dup", "dup#2", "f1", "f2"} == set(s.functions)
    assert s.text == text_size(merged) and sum(s.functions.values()) + s.other == s.text


@pytest.mark.parametrize("content", [b"", b"not an object\n", b"\x7fELF\x02\x01\x01" + b"\0" * 20])
def test_bad_input_is_a_one_line_compiler_error(tmp_path, content):
    bad = tmp_path / "bad.o"
    bad.write_bytes(content)
    with pytest.raises(CompilerError) as e:
        object_sizes(bad)
    assert str(bad) in str(e.value) and "\n" not in str(e.value)


def test_truncated_object_is_a_compiler_error(tmp_path):
    obj = _compile(tmp_path, "a.c", C_SOURCE)
    data = obj.read_bytes()
    for cut in (len(data) // 3, len(data) - 1):
        short = tmp_path / f"short{cut}.o"
        short.write_bytes(data[:cut])
        with pytest.raises(CompilerError, match="short"):
            object_sizes(short)


def test_missing_file_is_a_compiler_error(tmp_path):
    with pytest.raises(CompilerError, match="cannot read"):
        object_sizes(tmp_path / "none.o")


def test_strings_are_pieces_with_the_functions_that_refer_to_them(tmp_path):
    obj = _compile(tmp_path, "s.c", r"""
int puts(const char *);
static const char *pick(int x) { return x ? "picked when x" : "picked otherwise"; }
void one(int x) { puts(pick(x)); }
void two(void) { puts("two's own"); puts("picked otherwise"); }
""")
    s = object_sizes(obj)
    pieces = {text: (n, refs) for (section, text), (n, refs) in s.shared.items() if section.startswith(".rodata.str")}
    assert pieces[b"picked when x\0"] == (14, frozenset({"one"}))
    assert pieces[b"two's own\0"] == (10, frozenset({"two"}))
    # one string, referred to by both (the compiler merged the two uses)
    assert pieces[b"picked otherwise\0"] == (17, frozenset({"one", "two"}))
    # every byte of a section wholly in other is a piece's
    for section, n in s.other_sections.items():
        if section.startswith(".rodata.str"):
            assert sum(k for (sec, _), (k, _) in s.shared.items() if sec == section) == n


def test_functions_alone_in_their_section_know_who_refers_to_them(tmp_path):
    obj = _compile(tmp_path, "r.cc", r"""
template <class T> __attribute__((noinline)) T twice(T x) { return x + x; }
__attribute__((noinline)) static int local(int x) { return x * 7; }
int a(int x) { return twice(x) + local(x); }
long b(long x) { return twice(x); }
""")
    s = object_sizes(obj)
    assert s.referrers["_Z5twiceIiET_S0_"] == frozenset({"_Z1ai"})
    assert s.referrers["_Z5twiceIlET_S0_"] == frozenset({"_Z1bl"})
    # a static function shares .text with its callers: the assembler resolved the call, nothing names it
    assert "_ZL5locali" not in s.referrers


def test_keyed_by_renames_a_function_everywhere_the_object_names_it():
    s = ".rodata.str1.1"
    before = ObjectSizes(66, {"C1": 40, "user": 20}, 6, aliases={"C2": "C1", "D1": "C1"}, other_sections={s: 6},
                         shared={(s, b"hello\0"): (6, frozenset({"C1", "user"}))},
                         referrers={"C1": frozenset({"user"}), "user": frozenset({"C1"})}, padding={"C1": 1})
    after = before.keyed_by({"C2", "user"})
    assert after.functions == {"C2": 40, "user": 20} and after.text == before.text
    assert after.aliases == {"C1": "C2", "D1": "C2"} and after.padding == {"C2": 1}
    assert after.shared == {(s, b"hello\0"): (6, frozenset({"C2", "user"}))}
    assert after.referrers == {"C2": frozenset({"user"}), "user": frozenset({"C2"})}
    assert before.keyed_by({"user"}) is before  # (no alias among the names: nothing to rename)
