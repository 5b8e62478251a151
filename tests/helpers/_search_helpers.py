"""The small modules the batched search's tests search with the real
clang-19 (one generated C module with ~100 decisions, C++ modules using the
standard library, and one module per scenario), and helpers those tests
share: a search of a module, a function-by-function change, hand-made
object sizes and an evaluator whose objects a test alters."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from _corpus_helpers import ACCESSOR
from mlgo_host.corpus.build import build_corpus, load_compile_commands
from mlgo_host.corpus.corpus import load_corpus
from mlgo_host.corpus.synth import inline_module
from mlgo_host.measure.objsizes import ObjectSizes
from mlgo_host.policies import load_policy
from mlgo_host.search.driver import BatchedSearch
from mlgo_host.search.probe import probe_module
from mlgo_host.search.replay import ReplayEvaluator

CPP = r"""
#include <vector>
#include <string>
struct Shape { virtual ~Shape() = default; virtual double area() const = 0; };
struct Sq : Shape { double s; explicit Sq(double x) : s(x) {} double area() const override { return s * s; } };
static double total(const std::vector<Sq> &v) { double t = 0; for (auto &x : v) t += x.area(); return t; }
double shapes_total(int n) { std::vector<Sq> v; for (int i = 0; i < n; i++) v.emplace_back(i); return total(v); }
std::string greet(const std::string &who) { return "hello " + who + std::string(3, '!'); }
"""

# C++ globals with constructors: their initializers (``__cxx_global_var_init.N``)
# have no line in the debug info, and the compiler counts their sites from 0
GLOBALS = r"""
#include <string>
static const std::string kName = "name";
static const std::string kKind = std::string("kind") + "!";
std::string tag(int i) { return i ? kName : kKind; }
"""

# one always-inline body copied twice into a function, the compiler then
# deciding the copies' calls in the order they stand, not the order it copied
# them in (zstd's FORCE_INLINE hash helpers); the copy with a constant folds
# its switch, so the two copies do not have the same calls
COPIES = r"""
static unsigned read32(const void *p) { unsigned v; __builtin_memcpy(&v, p, 4); return v; }
static unsigned long long read64(const void *p) { unsigned long long v; __builtin_memcpy(&v, p, 8); return v; }
static unsigned hash4(const void *p, unsigned h) { return (read32(p) * 2654435761U) >> (32 - h); }
static unsigned hash5(const void *p, unsigned h) { return (unsigned)(((read64(p) << 24) * 889523592379ULL) >> (64 - h)); }
static unsigned hash8(const void *p, unsigned h) { return (unsigned)((read64(p) * 0xCF1BBCDCB7A56463ULL) >> (64 - h)); }
static inline __attribute__((always_inline)) unsigned hash_ptr(const void *p, unsigned h, unsigned mls) {
  switch (mls) {
  default:
  case 4: return hash4(p, h);
  case 5: return hash5(p, h);
  case 8: return hash8(p, h);
  }
}
void fill(unsigned *big, unsigned *small, const unsigned char *b, int n, unsigned mls) {
  for (int i = 0; i < n; i++) {
    small[hash_ptr(b + i, 14, mls)] = i;
    big[hash_ptr(b + i, 17, 8)] = i;
  }
}
"""

# a helper whose calls the compiler decides in it, then inlines into two hubs and drops: a flip of one of its
# calls lands in both hubs (zstd's ZSTD_count, inlined into each block compressor)
MULTI = r"""
static int leaf1(int x) { return x * 3 + 1; }
static int leaf2(int x) { return x ^ (x >> 3); }
static int leaf3(int x) { return (x << 2) - x; }
static int helper(int x) { return leaf1(x) + leaf2(x) * leaf3(x); }
int hub1(int *a, int n) { int s = 0; for (int i = 0; i < n; i++) s += helper(a[i]); return s; }
int hub2(int *a, int n) { int s = 1; for (int i = 0; i < n; i++) s *= helper(a[i] + i); return s; }
"""

# a call written in a function after a lambda written inside it: by its line
# alone the call would be the lambda's (which starts later), inlined into the
# function through std::for_each
LAMBDA = r"""
#include <algorithm>
#include <utility>
#include <vector>
std::vector<std::pair<double, double>> curve(int n);
double at_recall(int n, double r) {
  double best = 0;
  std::vector<std::pair<double, double>> c = curve(n);
  std::for_each(c.begin(), c.end(), [&](const std::pair<double, double> &p) {
    if (p.second >= r) best = std::max(best, p.first);
  });
  return best;
}
"""

# one header included twice under other macro names (Brotli's hashers): two
# functions start on each of its lines, both always-inlined into one caller
HASHER = r"""
static unsigned FN(Addr)(const unsigned *t, unsigned k) { return t[(k * 2654435761U) >> 24] ^ (k >> SHIFT); }
static inline __attribute__((always_inline)) void FN(Store)(unsigned *t, unsigned k, unsigned v) { t[FN(Addr)(t, k) & 255] = v; }
"""
MACROS = r"""
#define FN(x) x##H1
#define SHIFT 3
#include "hasher.h"
#undef FN
#undef SHIFT
#define FN(x) x##H2
#define SHIFT 5
#include "hasher.h"
void store_both(unsigned *a, unsigned *b, const unsigned *k, int n) {
  for (int i = 0; i < n; i++) { StoreH1(a, k[i], i); StoreH2(b, k[i], i); StoreH1(b, k[i] + 1, i); }
}
"""


# a helper whose inlined copy folds where its second argument is 0 (the c
# callers: a call there costs more than the copy) and does not in the v
# callers (a loop each): with every call inlined, leaving them all out costs
# +2 B (its body, 48 B, against the v callers' -82 B and the c callers'
# +36 B), leaving out only the v callers' calls -34 B
TRIM = r"""
static int h(int x, int k) {
  if (k == 0) return x + 1;
  int s = 0;
  for (int i = 0; i < k; i++) s += (x ^ i) * (i + 3) - (s >> 3);
  return s;
}
int v1(int *p) { return h(p[0], p[1]); }
int v2(int *p) { return h(p[2], p[3]) * 2; }
int c1(int x) { return h(x, 0); }
int c2(int x) { return h(x, 0) + 5; }
int c3(int x) { return h(x, 0) - 7; }
int c4(int x) { return h(x, 0) ^ 9; }
int c5(int x) { return h(x, 0) | 11; }
int c6(int x) { return h(x, 0) & 12; }
"""

PIECES = r"""
extern "C" int puts(const char *);
inline int check(int x) {
  if (x > 100) { puts("check: the value is far too large for this table"); return -1; }
  return x * 3 + 1;
}
inline int scale(int x) {
  if (x < -50) { puts("scale: the value is far too small for this table"); return 0; }
  return x * 7 - 2;
}
int root(int y) { return check(1) + check(2) * y + check(3) - scale(4) + scale(5) * y; }
"""

# a constructor (its IR function C2, C1 an alias at its address) and two methods of one debug name
# whose calls of norm sit at the same place in each: the replay matches one key in both
NAMESAKES = r"""
extern "C" int puts(const char *);
static int norm(int i, int n) {
  if (i < 0 || n <= 0) { puts("norm: the index or the size is negative"); return 0; }
  return i % n;
}
struct Node {
  int *data;
  int n;
  Node(int *d, int k);
  int *get(int i);
  const int *get(int i) const;
};
Node::Node(int *d, int k) : data(d), n(k) { data[norm(k, k + 1)] = 0; }
int *Node::get(int i) {
  return data + norm(i, n); }
const int *Node::get(int i) const {
  return data + norm(i, n); }
int last(const Node &x) { return norm(x.n - 1, x.n) * 3; }  // (no tail call: its jump would follow the layout)
"""


def build_search_corpus(root: Path) -> dict:
    """The modules by name, built with the project's corpus builder (locations kept)."""
    (root / "gen.c").write_text(inline_module(70, seed=3))
    (root / "shapes.cc").write_text(CPP)
    (root / "leaf.c").write_text("int twice(int x) { return 2 * x; }\n")
    (root / "globals.cc").write_text(GLOBALS)
    (root / "copies.c").write_text(COPIES)
    (root / "lambda.cc").write_text(LAMBDA)
    (root / "hasher.h").write_text(HASHER)
    (root / "macros.c").write_text(MACROS)
    (root / "pieces.cc").write_text(PIECES)
    (root / "trim.c").write_text(TRIM)
    (root / "multi.c").write_text(MULTI)
    (root / "accessor.c").write_text(ACCESSOR)
    (root / "namesakes.cc").write_text(NAMESAKES)
    db = [{"directory": str(root), "file": "gen.c", "command": "cc -Oz -c gen.c -o gen.o"},
          {"directory": str(root), "file": "globals.cc", "command": "c++ -Oz -std=c++17 -c globals.cc -o globals.o"},
          {"directory": str(root), "file": "copies.c", "command": "cc -Oz -c copies.c -o copies.o"},
          {"directory": str(root), "file": "lambda.cc", "command": "c++ -Oz -std=c++17 -c lambda.cc -o lambda.o"},
          {"directory": str(root), "file": "macros.c", "command": "cc -Oz -c macros.c -o macros.o"},
          {"directory": str(root), "file": "leaf.c", "command": "cc -Oz -c leaf.c -o leaf.o"},
          {"directory": str(root), "file": "trim.c", "command": "cc -Oz -c trim.c -o trim.o"},
          {"directory": str(root), "file": "multi.c", "command": "cc -Oz -c multi.c -o multi.o"},
          {"directory": str(root), "file": "accessor.c", "command": "cc -Oz -c accessor.c -o accessor.o"},
          {"directory": str(root), "file": "pieces.cc", "command": "c++ -Oz -std=c++17 -c pieces.cc -o pieces.o"},
          {"directory": str(root), "file": "shapes.cc", "command": "c++ -Oz -std=c++17 -c shapes.cc -o shapes.o"},
          {"directory": str(root), "file": "namesakes.cc",
           "command": "c++ -Oz -std=c++17 -c namesakes.cc -o namesakes.o"}]
    (root / "compile_commands.json").write_text(json.dumps(db))
    build_corpus(load_compile_commands(root / "compile_commands.json"), root / "corpus", clang="clang-19",
                 jobs=2, progress=False)
    return {m.name: m for m in load_corpus(root / "corpus").modules}


def search(corpus: dict, name: str = "gen", budget: int = 40, copies: bool = False, policy: str = "default",
           begin: bool = True, **kw) -> BatchedSearch:
    """A search of module ``name`` from a probe with ``policy``, begun (its start the reference) unless not."""
    m = corpus[name]
    probe = probe_module(m, load_policy(policy))
    ev = ReplayEvaluator(m, {d.site.caller for d in probe.decisions})
    s = BatchedSearch(m, probe, ev, budget=budget, copies=copies, **kw)
    if begin:
        s.begin()
    return s


def changes(now: ObjectSizes, base: ObjectSizes) -> dict[str, int]:
    """Function -> its change from ``base`` to ``now`` (the functions that changed)."""
    keys = set(now.functions) | set(base.functions)
    return {f: now.functions.get(f, 0) - base.functions.get(f, 0) for f in keys
            if now.functions.get(f, 0) != base.functions.get(f, 0)}


def sizes(functions, other_sections, shared=None, referrers=None) -> ObjectSizes:
    """An object's sizes by hand."""
    other = sum(other_sections.values())
    return ObjectSizes(sum(functions.values()) + other, dict(functions), other, other_sections=dict(other_sections),
                       shared=shared, referrers=referrers)


def with_copies_and_in_place(s: BatchedSearch) -> list:
    """The first batch of ``s``'s single flips with flips measured in copies and flips measured in place."""
    return next(b for b in s.batches_of(s.candidates())
                if any(c.in_copy is not None for c in b) and any(c.in_copy is None for c in b))


class Altered:
    """An evaluator whose every compile is the real one's, passed through
    ``alter(measured) -> measured`` (as a compiler that made other code would
    give it)."""

    def __init__(self, ev: ReplayEvaluator, alter):
        self.ev = ev
        self.alter = alter

    def measure(self, *args, **kw):
        return self.alter(self.ev.measure(*args, **kw))

    def __getattr__(self, name):
        return getattr(self.ev, name)


def with_functions(m, change) -> object:
    """``m`` (a Measured) with its functions' sizes ``change(functions)`` (a new dict)."""
    return dataclasses.replace(m, sizes=dataclasses.replace(m.sizes, functions=change(dict(m.sizes.functions))))
