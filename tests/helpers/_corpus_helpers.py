"""Small C/C++ projects and corpora built with the real clang-19 (shared by
the corpus, reward and eval tests)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

CLANG = "clang-19"
HAVE_CLANG = shutil.which(CLANG) is not None
needs_clang = pytest.mark.skipif(not HAVE_CLANG, reason=f"{CLANG} not installed")

# a checked accessor called three times in f and once in k: each call inlined alone costs f bytes,
# all three inlined together pay (f then keeps one call, to fail, shared by the three checks, and saves
# no register across calls); inlining every call of it, k's too, costs (double-conversion's RawBigit)
ACCESSOR = r"""
extern void fail(const char *) __attribute__((noreturn));
static unsigned buf[64];
unsigned *at(int i) { if ((unsigned)i >= 64) fail("index out of range"); return &buf[i]; }
void f(int a, int b, int c) { *at(a) += *at(b) * *at(c); }
unsigned k(int a) { return *at(a) + 1; }
"""

SOURCES = {
    # Static helpers called once: the default inliner folds them away at -Oz,
    # a never-inline policy keeps them (bigger object).
    "src/mathx.c": r"""
#include "mathx.h"
static int sq(int x) { return x * x; }
static int cube(int x) { return sq(x) * x; }
static int poly(int x, int a, int b) { return a * cube(x) + b * sq(x) + x; }
int mathx_eval(const int *v, int n) {
  int s = 0;
  for (int i = 0; i < n; i++) s += poly(v[i], 3, 5);
  return s;
}
""",
    "src/mathx.h": "int mathx_eval(const int *v, int n);\n",
    "src/strs.c": r"""
#include <string.h>
#include "mathx.h"
static unsigned hash_step(unsigned h, unsigned char c) { return h * 31u + c; }
unsigned strs_hash(const char *s) {
  unsigned h = 7;
  for (size_t i = 0, n = strlen(s); i < n; i++) h = hash_step(h, (unsigned char)s[i]);
  return h;
}
int strs_mix(const char *s) { int v[2] = {(int)strs_hash(s), 3}; return mathx_eval(v, 2); }
""",
    "src/tiny.c": "int tiny_answer(void) { return 42; }\n",
    "src/shapes.cc": r"""
#include <vector>
struct Shape { virtual ~Shape() = default; virtual double area() const = 0; };
struct Sq : Shape { double s; explicit Sq(double x) : s(x) {} double area() const override { return s * s; } };
static double total(const std::vector<Sq> &v) { double t = 0; for (auto &x : v) t += x.area(); return t; }
double shapes_total(int n) { std::vector<Sq> v; for (int i = 0; i < n; i++) v.emplace_back(i); return total(v); }
""",
}


def write_project(root: Path) -> Path:
    """Write the sources and a compile database mixing both entry forms:
    ``command`` strings with relative ``-o`` (and -MD dependency flags) and
    ``arguments`` lists with absolute ``-o``. Returns the database path."""
    for rel, text in SOURCES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    build = root / "build"
    build.mkdir(exist_ok=True)
    db = [
        {"directory": str(build), "file": "../src/mathx.c",
         "command": "cc -Oz -I../src -MD -MF mathx.d -c ../src/mathx.c -o obj/mathx.o"},
        {"directory": str(build), "file": str(root / "src/strs.c"),
         "arguments": ["gcc", "-Oz", f"-I{root / 'src'}", "-c", str(root / "src/strs.c"),
                       "-o", str(build / "obj/strs.o")]},
        {"directory": str(root), "file": "src/tiny.c",
         "command": "clang -Oz -DTINY=1 -c src/tiny.c -o build/obj/tiny.o"},
        {"directory": str(build), "file": str(root / "src/shapes.cc"),
         "arguments": ["g++", "-Oz", "-std=c++17", "-c", "../src/shapes.cc", "-o", "obj/shapes.o"]},
    ]
    path = root / "compile_commands.json"
    path.write_text(json.dumps(db, indent=1))
    return path


def build_small_corpus(root: Path, clang: str = CLANG) -> Path:
    """Build the project's corpus with ``clang`` once into ``root/corpus`` (idempotent)."""
    from mlgo_host.corpus.build import build_corpus, load_compile_commands

    out = root / "corpus"
    if not (out / "corpus_description.json").exists():
        db = write_project(root / "project")
        rep = build_corpus(load_compile_commands(db), out, clang=clang, jobs=2, progress=False)
        assert not rep.failures, rep.failures
    return out


def copy_corpus(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def generated_c_source(n: int, seed: int) -> str:
    """``n`` small static functions and ``n`` callers: ~3n inlining decisions."""
    from mlgo_host.corpus.synth import caller_module

    return caller_module(n, seed)


def build_generated_corpus(root: Path, sizes: dict[str, int], clang: str = CLANG,
                           sources: dict[str, str] | None = None) -> Path:
    """A corpus of generated C files (name -> number of functions), and of
    the C ``sources`` given (name -> text), built with the real ``clang`` by
    the corpus builder; returns its directory."""
    from mlgo_host.corpus.build import build_corpus, load_compile_commands, write_compile_commands

    src = root / "src"
    src.mkdir(parents=True, exist_ok=True)
    entries = []
    for k, (name, n) in enumerate(sizes.items()):
        (src / f"{name}.c").write_text(generated_c_source(n, k))
        entries.append({"directory": str(src), "file": str(src / f"{name}.c"),
                        "arguments": [clang, "-Oz", "-c", f"{name}.c", "-o", f"{name}.o"]})
    for name, text in (sources or {}).items():
        (src / f"{name}.c").write_text(text)
        entries.append({"directory": str(src), "file": str(src / f"{name}.c"),
                        "arguments": [clang, "-Oz", "-c", f"{name}.c", "-o", f"{name}.o"]})
    write_compile_commands(src / "compile_commands.json", entries)
    build_corpus(load_compile_commands(src / "compile_commands.json"), root / "corpus", clang=clang, progress=False)
    return root / "corpus"
