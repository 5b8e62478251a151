"""Batched evaluation with the real clang-19: call-site keys, the compiler's
replay of a decision set, and flips measured many per compile."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import mlgo_host.corpus.objsizes
import mlgo_host.search.batched

from _corpus_helpers import ACCESSOR
from mlgo_host.corpus.build import build_corpus, load_compile_commands
from mlgo_host.corpus.corpus import load_corpus
from mlgo_host.corpus.synth import inline_module
from mlgo_host.policies import load_policy
from mlgo_host.search.batched import BatchedSearch, Candidate, Outcome, search_module_batched
from mlgo_host.search.evaluate import ReplayEvaluator, probe_module
from mlgo_host.search.sites import final_functions, unique_decisions

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


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A generated C module with ~100 decisions and a C++ module using the
    standard library (always_inline helpers, templates), built with the
    project's corpus builder (locations kept)."""
    root = tmp_path_factory.mktemp("batched")
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
          {"directory": str(root), "file": "shapes.cc", "command": "c++ -Oz -std=c++17 -c shapes.cc -o shapes.o"}]
    (root / "compile_commands.json").write_text(json.dumps(db))
    build_corpus(load_compile_commands(root / "compile_commands.json"), root / "corpus", clang="clang-19",
                 jobs=2, progress=False)
    return {m.name: m for m in load_corpus(root / "corpus").modules}


def _plain_object(module, out: Path) -> bytes:
    subprocess.run(module.compile_command("clang-19", str(out)), check=True, capture_output=True)
    return out.read_bytes()


@pytest.mark.parametrize("name", ["gen", "shapes", "globals", "copies", "lambda", "macros"])
def test_replaying_the_defaults_decisions_gives_the_Oz_object_byte_for_byte(corpus, tmp_path, name):
    m = corpus[name]
    probe = probe_module(m, load_policy("default"))
    assert probe.episode.n >= 3
    ev = ReplayEvaluator(m, {d.site.caller for d in probe.decisions})
    yes = [d.site for d in probe.decisions if d.inlined]
    remarks = ev.compile(yes, str(tmp_path / "replayed.o"))
    assert (tmp_path / "replayed.o").read_bytes() == _plain_object(m, tmp_path / "plain.o")
    assert "inlined into" in remarks


def test_every_key_of_a_c_module_is_one_the_compiler_matches(corpus):
    # each not-inlined decision flipped alone is inlined by the replay: its
    # key (caller-relative line, inline chain) names the site the compiler sees
    m = corpus["gen"]
    probe = probe_module(m, load_policy("default"))
    scope = {d.site.caller for d in probe.decisions}
    ev = ReplayEvaluator(m, scope)
    yes = {d.site.key: d.site for d in probe.decisions if d.inlined}
    base = ev.measure(yes.values())
    assert set(yes) <= base.inlined
    no = [d.site for d in probe.decisions if not d.inlined]
    assert len(no) >= 5
    for s in no[:12]:
        got = ev.measure([*yes.values(), s])
        assert s.key in got.inlined, s.key


def _search(corpus, budget=40, worlds=False):
    m = corpus["gen"]
    probe = probe_module(m, load_policy("default"))
    ev = ReplayEvaluator(m, {d.site.caller for d in probe.decisions})
    s = BatchedSearch(m, probe, ev, budget=budget, worlds=worlds)
    s.begin()
    return s


def _changes(now, base) -> dict[str, int]:
    keys = set(now.functions) | set(base.functions)
    return {f: now.functions.get(f, 0) - base.functions.get(f, 0) for f in keys
            if now.functions.get(f, 0) != base.functions.get(f, 0)}


def test_the_plain_compile_stands_in_for_the_start_until_a_batch_checks_it(corpus, monkeypatch):
    s = _search(corpus)
    # the probe took the compiler's own decisions: its plain compile is the start, no compile spent
    assert s.provisional and s.ev.compiles == 0 and s.base is s.probe.plain
    replay = s.ev.measure(s.inline.values())
    assert replay.sizes.functions == s.base.sizes.functions and replay.inlined == s.base.inlined
    assert replay.text == s.base.text
    # a batch whose attribution holds checks it: every function and key outside the flips as the replay's
    batch = s.batches_of(s.candidates())[0]
    s.measure(batch)
    assert not s.provisional and s.base is s.probe.plain
    # one that fails may be the replay's fault: the start is compiled by replay, the batch measured again
    s2 = _search(corpus)
    real = s2._attribute
    calls = []
    monkeypatch.setattr(s2, "_attribute", lambda b, m: (calls.append(1), (None, "bytes no function owns moved")
                                                        if len(calls) == 1 else real(b, m))[1])
    got = s2.measure(batch)
    assert not s2.provisional and s2.base is not s2.probe.plain and s2.ev.compiles == 3  # batch, start, batch
    assert len(got) == len(batch)


def test_a_batch_of_disjoint_flips_gives_each_flip_its_single_change(corpus):
    s = _search(corpus)
    batch = s.batches_of(s.candidates())[0][:8]
    assert len(batch) >= 4
    measured = s.measure(batch)
    assert s.batches == 1 and len(measured) == len(batch), s.splits  # one compile, attribution held
    together = _changes(s.ev.measure(s._set_with(batch)).sizes, s.base.sizes)
    singles = {}
    for o in measured:
        alone = s.ev.measure(s._set_with([o.candidate]))
        mine = _changes(alone.sizes, s.base.sizes)
        # alone, the flip changes exactly the functions of its footprint that it changed in the batch, by as much
        assert mine == {f: d for f, d in together.items() if f in o.candidate.footprint}, o.candidate.key
        assert sum(mine.values()) == o.delta
        # and its total differs from that by .eh_frame's last-FDE padding at most
        assert abs(alone.text - s.base.text - o.delta) <= 4
        singles.update(mine)
    assert singles == together  # the batch's function total is the sum of the singles'


def test_flips_of_one_function_measured_in_copies_give_each_its_single_change(corpus):
    s = _search(corpus, budget=80, worlds=True)
    cands = s.candidates()
    rooted = [c for c in cands if s.world_root(c) is not None]
    by_root = {}
    for c in rooted:
        by_root.setdefault(s.world_root(c), []).append(c)
    root, flips = max(by_root.items(), key=lambda kv: len(kv[1]))
    assert len(flips) >= 3  # several flips share one function: without copies, one compile each
    batch = s.batches_of(flips)[0]
    assert len(batch) == len(flips) and all(c.world == root for c in batch)
    before = s.ev.compiles
    measured = s.measure(batch)
    assert s.ev.compiles - before == 1 and len(measured) == len(batch), s.splits  # one compile, every copy read
    assert s.world_flips == len(batch)
    backs = []
    for o in measured:
        alone = s.ev.measure(s._set_with([o.candidate]))
        back = s.brought_back(o.candidate)
        backs += [back] if back else []
        # in place, the flip changes its function's own bytes by what its copy showed, and brings back the
        # callee it brings back there (a call left out of a callee inlined everywhere else): its bytes count
        assert (alone.sizes.unpadded(root) - s.base.sizes.unpadded(root)
                + (alone.sizes.unpadded(back) if back else 0)) == o.delta, o.candidate.key
        assert o.applied == all((x.key in alone.inlined) == o.candidate.inline for x in o.candidate.sites)
        assert set(alone.sizes.functions) == set(s.base.sizes.functions) | ({back} if back else set())
    # (this batch has all kinds: flips that bring back a callee of the copied tree (each copy its own) and
    # one callee from outside it twice (emitted once for both copies), and flips that bring back none)
    shared = [b for b in backs if b not in s.tree(root)]
    assert len(shared) >= 2 and len(set(shared)) < len(shared) and len(backs) > len(shared)
    assert len(backs) < len(measured)


def test_a_body_brought_back_in_copies_costs_each_flip_what_it_costs_in_place_strings_and_all(corpus):
    # every call of the inline check() and scale() is inlined and folds its message away: leaving one out
    # brings the body back, message and all; the copies of root() that leave one out each share the one body
    m = corpus["pieces"]
    probe = probe_module(m, load_policy("default"))
    s = BatchedSearch(m, probe, ReplayEvaluator(m, {d.site.caller for d in probe.decisions}), budget=20,
                      worlds=True)
    s.begin()
    s._compile_start()  # (a reference read piece by piece)
    flips = s.candidates()
    assert len(flips) == 5 and len({s.brought_back(c) for c in flips} - {None}) == 2
    batch = s.batches_of(flips)[0]
    assert len(batch) == 5 and len({c.world for c in batch} - {None}) == 1
    before = s.ev.compiles
    got = s.measure(batch)
    assert s.ev.compiles - before == 1 and len(got) == 5 and s.world_flips == 5, s.splits
    for o in got:
        assert sum(o.other.values()) > 40  # (its message: new bytes only the body refers to)
        alone = s.ev.measure(s._set_with([o.candidate]))
        assert abs(alone.text - s.base.text - o.delta) <= 4, o.candidate.key  # (.eh_frame's padding)


def test_a_copy_that_differs_from_its_function_is_caught(corpus, monkeypatch):
    s = _search(corpus, budget=80, worlds=True)
    flips = [c for c in s.candidates() if s.world_root(c) is not None]
    batch = s.batches_of(flips)[0]
    copied = [c for c in batch if c.world is not None]
    controls = tuple(f".mlgo{k}" for k in range(len({c.world for c in copied})))  # (the plan's first worlds)
    # each control copy one byte off its function (as a copy compiled to other code would be)
    monkeypatch.setattr(mlgo_host.search.batched, "_own_size",
                        lambda sizes, fn: mlgo_host.corpus.objsizes.ObjectSizes.unpadded(sizes, fn) + fn.endswith(controls))
    got = s.measure(batch)
    # no function's copy is read; they get no copies again, and their flips go back to be measured in place
    assert not {id(o.candidate) for o in got} & {id(c) for c in copied}
    assert {c.world for c in copied} <= s.no_worlds and s.splits["copies: a control copy differs from its function"]
    back = s._unmeasured(batch, got)
    assert back == copied and all(c.world is None and s.world_root(c) is None for c in back)


def test_flips_whose_code_lands_in_two_hubs_are_measured_in_copies_of_both(corpus):
    m = corpus["multi"]
    probe = probe_module(m, load_policy("default"))
    s = BatchedSearch(m, probe, ReplayEvaluator(m, {d.site.caller for d in probe.decisions}), budget=20, worlds=True)
    s.begin()
    s._compile_reference()
    flips = [c for c in s.candidates() if c.sites[0].caller == "helper"]
    assert len(flips) == 3 and all(c.footprint - {c.sites[0].callee} == {"hub1", "hub2"} for c in flips)
    # without a copy of both hubs, each would be a compile of its own (they share both)
    assert all(s.world_root(c) == ("hub1", "hub2") for c in flips)
    (batch,) = s.batches_of(flips)
    before = s.ev.compiles
    measured = s.measure(batch)
    assert s.ev.compiles - before == 1 and len(measured) == 3 and s.world_flips == 3, s.splits
    for o in measured:
        alone = s.ev.measure(s._set_with([o.candidate]))
        back = s.brought_back(o.candidate)
        # in place it changes both hubs, and brings back its callee: what the two copies showed, and its body
        assert back is not None
        assert (sum(alone.sizes.unpadded(h) - s.base.sizes.unpadded(h) for h in ("hub1", "hub2"))
                + alone.sizes.unpadded(back)) == o.delta, o.candidate.key
        assert o.measured.sizes.functions["hub1"] - s.base.sizes.functions["hub1"] == (
            alone.sizes.unpadded("hub1") - s.base.sizes.unpadded("hub1"))


def _with_copies_and_in_place(s):
    return next(b for b in s.batches_of(s.candidates())
                if any(c.world is not None for c in b) and any(c.world is None for c in b))


def test_in_place_flips_that_fail_beside_copies_leave_the_copies_their_function(corpus, monkeypatch):
    s = _search(corpus, budget=80, worlds=True)
    s._compile_start()  # (a compiled reference: a failure is the batch's, not the start's)
    batch = _with_copies_and_in_place(s)
    copied = [c for c in batch if c.world is not None]
    real, failed = BatchedSearch._attribute, []

    def attribute(self, flips, m):
        if flips and not failed:  # the flips measured in place beside the copies fail, once
            failed.append(list(flips))
            return None, "a function outside every footprint changed"
        return real(self, flips, m)

    monkeypatch.setattr(BatchedSearch, "_attribute", attribute)
    got = s.measure(batch)
    # their failure is not the copies': those are measured in copies again, the others in place
    assert failed and not s.no_worlds
    assert {id(o.candidate) for o in got} == {id(c) for c in batch} and s.world_flips == len(copied)


def test_copies_alone_are_read_when_their_calls_changed_the_originals(corpus, monkeypatch):
    s = _search(corpus, budget=80, worlds=True)
    s._compile_start()
    batch = [c for c in _with_copies_and_in_place(s) if c.world is not None]
    real = BatchedSearch._attribute
    # the originals outside the copies changed (as more callers of a static callee change what it becomes)
    monkeypatch.setattr(BatchedSearch, "_attribute", lambda self, flips, m: (None, "a function outside every "
                                                                            "footprint changed") if not flips
                        else real(self, flips, m))
    before = s.ev.compiles
    got = s.measure(batch)
    assert s.ev.compiles == before + 1 and len(got) == len(batch) and not s.no_worlds
    # against a reference not compiled (derived from winners) the same compile is not read: the reference is
    # compiled and the copies measured again, and the function keeps its copies
    s2 = _search(corpus, budget=80, worlds=True)
    s2._compile_start()
    batch2 = [c for c in _with_copies_and_in_place(s2) if c.world is not None]
    s2.compiled = False
    before = s2.ev.compiles
    got2 = s2.measure(batch2)
    assert s2.ev.compiles == before + 3 and s2.compiled  # (the copies, the reference, the copies again)
    assert len(got2) == len(batch2) and not s2.no_worlds and s2.world_flips == len(batch2)


def test_copies_that_changed_their_function_itself_are_read_against_their_control(corpus, monkeypatch):
    # the copies' calls changed the original function too, by as much as its copies (capstone's SystemZ printer:
    # 4 bytes): the control is the same code in the same compile, so each flip is read against it
    def batch_of(s):
        s._compile_start()
        return [c for c in _with_copies_and_in_place(s) if c.world is not None]

    plain = _search(corpus, budget=80, worlds=True)
    want = {o.candidate.key: o.delta for o in plain.measure(batch_of(plain))}
    s = _search(corpus, budget=80, worlds=True)
    batch = batch_of(s)
    roots = {c.world for c in batch}
    real_attribute, real_size = BatchedSearch._attribute, mlgo_host.search.batched._own_size
    monkeypatch.setattr(BatchedSearch, "_attribute", lambda self, flips, m: (None, "a function outside every "
                                                                            "footprint changed") if not flips
                        else real_attribute(self, flips, m))
    monkeypatch.setattr(mlgo_host.search.batched, "_own_size",
                        lambda sizes, fn: real_size(sizes, fn) + 4 * (sizes is not s.base.sizes
                                                                      and fn.split(".mlgo")[0] in roots))
    got = s.measure(batch)
    assert {o.candidate.key: o.delta for o in got} == want and not s.no_worlds
    assert s.splits == {"copies: the function moved with its copies": len(roots)}  # (one per control)
    # a winner's function is the reference's plus its gain, not the moved function's
    o = got[0]
    assert o.measured.sizes.functions[o.candidate.world] == s.base.sizes.functions[o.candidate.world] + o.delta


def test_a_flip_whose_copy_changed_other_sites_is_measured_in_place_from_then_on(corpus, monkeypatch):
    s = _search(corpus, budget=80, worlds=True)
    s._compile_start()
    batch = [c for c in _with_copies_and_in_place(s) if c.world is not None]
    real = mlgo_host.search.batched._split_worlds

    def split(keys):
        plain, by_world = real(keys)
        last = max(by_world)  # the plan's last world: the batch's last flip measured in a copy
        by_world[last] = by_world[last] | {"nobody at flipped:1:1"}
        return plain, by_world

    monkeypatch.setattr(mlgo_host.search.batched, "_split_worlds", split)
    got = s.measure(batch)
    victim = batch[-1]
    assert victim not in [o.candidate for o in got] and len(got) == len(batch) - 1
    assert s.world_root(victim) is None and s.world_root(batch[0]) is not None


def _sizes(functions, other_sections, shared=None, referrers=None):
    other = sum(other_sections.values())
    return mlgo_host.corpus.objsizes.ObjectSizes(sum(functions.values()) + other, dict(functions), other,
                                                other_sections=dict(other_sections), shared=shared,
                                                referrers=referrers)


def test_a_string_that_appears_or_goes_is_the_flip_whose_functions_alone_refer_to_it():
    from mlgo_host.search.batched import _pieces_moved
    a = Candidate((), True, frozenset({"f", "g"}))
    b = Candidate((), True, frozenset({"h"}))
    owner = {"f": a, "g": a, "h": b}
    s = ".rodata.str1.1"
    base = _sizes({"f": 10, "h": 10}, {s: 9, ".eh_frame": 4},
                  {(s, b"gone\0"): (5, frozenset({"f", "g"})), (s, b"kept\0"): (4, frozenset({"f", "h"}))})
    now = _sizes({"f": 10, "h": 10}, {s: 11, ".eh_frame": 8},
                 {(s, b"kept\0"): (4, frozenset({"h"})), (s, b"brand new\0"): (7, frozenset({"h"}))})
    assert sorted(_pieces_moved(base, now, owner), key=lambda x: x[0][1]) == [((s, -5), a), ((s, 7), b)]
    # a piece two flips' functions refer to is nobody's alone
    shared = dict(now.shared)
    shared[(s, b"brand new\0")] = (7, frozenset({"h", "f"}))
    assert _pieces_moved(base, dataclasses.replace(now, shared=shared), owner) is None
    # bytes that moved beyond the pieces (and .eh_frame's padding) are nobody's
    assert _pieces_moved(base, dataclasses.replace(now, other_sections={s: 12, ".eh_frame": 8}), owner) is None


def test_a_function_that_appears_or_goes_is_the_flip_whose_functions_alone_refer_to_it():
    from mlgo_host.search.batched import _made_or_dropped
    a = Candidate((), True, frozenset({"f"}))
    b = Candidate((), True, frozenset({"h"}))
    owner = {"f": a, "h": b}
    base = _sizes({"f": 10, "h": 10, "gone": 8}, {}, {}, {"gone": frozenset({"h"})})
    now = _sizes({"f": 20, "h": 2, "tmpl": 30, "guard": 6}, {}, {},
                 {"tmpl": frozenset({"f"}), "guard": frozenset({"tmpl"})})
    outside = {"gone": -8, "tmpl": 30, "guard": 6}
    # (a template instance a new call brought, and what that instance calls)
    assert _made_or_dropped(outside, base, now, owner) == {"gone": b, "tmpl": a, "guard": a}
    # no referrer known (a static function: its calls have no relocation), or a function that only changed size
    assert _made_or_dropped({"static": 5}, base, dataclasses.replace(now, functions={**now.functions, "static": 5}),
                            owner) is None
    assert _made_or_dropped({"f": 3}, base, now, owner) is None


def test_what_came_back_with_a_body_a_copy_brought_back_is_its_cost():
    from mlgo_host.search.batched import _bodies_brought, _pieces_of
    base = _sizes({"root": 90}, {".rodata.str1.1": 10}, {(".rodata.str1.1", b"old"): (10, frozenset({"root"}))}, {})
    # two copies brought back "x" (the module's one) and copy 1 its own "y.mlgo1"; "x" calls "leaf", which
    # was inlined only where "x" was, and both refer to a new message
    now = _sizes({"root": 90, "root.mlgo0": 90, "root.mlgo1": 60, "root.mlgo2": 70, "x": 30, "y.mlgo1": 20,
                  "leaf": 8},
                 {".rodata.str1.1": 10 + 24 + 5},
                 {(".rodata.str1.1", b"old"): (10, frozenset({"root"})),
                  (".rodata.str1.1", b"msg"): (24, frozenset({"x", "leaf"})),
                  (".rodata.str1.1", b"mine"): (5, frozenset({"y.mlgo1"}))},
                 {"x": frozenset({"root.mlgo1", "root.mlgo2"}), "leaf": frozenset({"x"})})
    copies = {"root.mlgo0", "root.mlgo1", "root.mlgo2"}
    owners = _bodies_brought({"x", "y.mlgo1"}, copies, base, now)
    assert owners == {"x": {"x"}, "y.mlgo1": {"y.mlgo1"}, "leaf": {"x"}}
    pieces, came = _pieces_of(owners, base, now)
    assert pieces == {"x": {".rodata.str1.1": 24}, "y.mlgo1": {".rodata.str1.1": 5}} and came == {".rodata.str1.1": 29}
    # a function nobody brought back appeared (or one whose callers are unknown: a static callee): not read
    odd = dataclasses.replace(now, functions={**now.functions, "odd": 4})
    assert _bodies_brought({"x"}, copies, base, odd) is None
    # unless it appeared where a flip measured in place may change code (an answered flip's functions, left to
    # the heuristic, which kept a wrapper it had inlined: zstd_double_fast's extDict_4): that flip's reading
    assert _bodies_brought({"x", "y.mlgo1"}, copies, base, odd, frozenset({"odd", "root"})) == owners
    # with nothing brought back, what appeared is the originals' reading's
    assert _bodies_brought(set(), copies, base, odd) == {}


def test_a_flip_queued_before_a_winner_is_read_from_where_its_code_lands_now(corpus):
    # a call inside a helper the set inlines into a hub: its code lands in the hub; once a winner leaves the
    # helper out there, the same flip changes the helper's own body instead, and it is packed and read so
    s = _search(corpus, budget=60)
    s._compile_reference()  # (a compiled reference, not the probe's plain compile)
    final = final_functions(s.probe.decisions, s.base.sizes.functions)
    cands = {c.key: c for c in s.candidates()}
    pairs = [(out, c) for out in cands.values() if out.sites[0].key in s.inline
             for c in cands.values() if c.sites[0].caller == out.sites[0].callee
             and out.sites[0].caller in final[c.sites[0].caller]]
    assert pairs, "the generated module has no inlined helper with calls of its own"
    out, c = pairs[0]
    hub, helper = out.sites[0].caller, out.sites[0].callee
    assert hub in c.footprint  # formed against the set that inlines the helper into the hub
    (o,) = s.measure([out])
    assert o.applied
    s.accept([o])
    batch, _ = s._next_batch([c])
    (now,) = batch
    assert hub not in now.footprint and helper in now.footprint
    (m,) = s.measure(batch)
    assert s.splits == {}, s.splits  # read from the functions it changes now, with nothing left over
    assert set(_changes(m.measured.sizes, s.base.sizes)) <= now.footprint


def test_an_overlapping_batch_is_detected_and_split(corpus):
    s = _search(corpus)
    cands = s.candidates()
    a = cands[0]
    final = final_functions(s.probe.decisions, s.base.sizes.functions)
    # a second flip claiming the first one's functions: the attribution cannot tell them apart
    b = next(c for c in cands[1:] if c.key != a.key)
    b = Candidate(b.sites, b.inline, b.footprint | a.footprint, index=b.index)
    m = s.ev.measure(s._set_with([a, b]))
    out, why = s._attribute([a, b], m)
    assert out is None and why == "footprints overlap"
    before = s.batches
    got = s.measure([a, b])
    assert [o.candidate for o in got] == [a, b]
    assert s.batches - before == 3 and s.splits["footprints overlap"] == 1  # the pair, then each alone
    assert final  # the inline tree named where every caller's code ends up


def test_flips_that_came_out_larger_together_are_undone_first(corpus):
    # winners of one batch applied together can cost more than each measured
    # beside the others (seen on libsass's utf8_string: -29 B apart, +50 B
    # with its batch's other winners): the compiled reference then exceeds
    # the derived one, and undoing each winner is measured before anything else
    s = _search(corpus, budget=30)
    won = [o for o in s.measure(s.batches_of(s.candidates())[0]) if o.applied][:2]
    assert len(won) == 2
    for o in won:  # as if both paid: the reference derived from their measured functions
        o.delta = -1
    s.accept(won)
    assert not s.compiled and s.suspects == []
    # derived 100 B below what compiles
    s.base = dataclasses.replace(s.base, sizes=dataclasses.replace(s.base.sizes, text=s.base.text - 100))
    s._compile_reference()
    assert [c.kind for c in s.suspects] == ["undo", "undo"]
    assert [(c.key, c.inline) for c in s.suspects] == [(o.candidate.key, not o.candidate.inline) for o in won]
    before = len(s.outcomes)
    s._pass([])  # nothing queued: the undos alone are measured
    assert {o.candidate.kind for o in s.outcomes[before:]} == {"undo"} and s.suspects == []
    # a derived reference the compile confirms leaves nothing to undo
    s.compiled, s._derived_by = False, [won[0].candidate]
    s._compile_reference()
    assert s.suspects == []


def test_a_flip_whose_undo_paid_is_measured_alone_from_then_on(corpus, monkeypatch):
    # a flip that won beside others but cost more applied (its undo paid) wins again in the next
    # sweep's batches, read the same wrong way, and is undone again, sweep after sweep (validation's
    # utf8_string: 700 compiles on one flip); alone, its change is the object's
    s = _search(corpus, budget=30)
    a = s.batches_of(s.candidates())[0][0]
    undo = s._candidate(a.sites, not a.inline, s._final(), kind="undo")
    s.suspects = [undo]
    monkeypatch.setattr(s, "measure", lambda batch: [Outcome(c, -1, True, s.base) for c in batch])
    s._pass([])  # the undo is measured and pays
    assert s.interacting == {(a.key, a.inline)}
    monkeypatch.undo()
    s._compile_reference()
    batches = s.batches_of(s.candidates())
    (alone,) = [b for b in batches if any(c.key == a.key for c in b)]
    assert len(alone) == 1 and max(map(len, batches)) > 1  # the others still share compiles
    # a resumed search keeps it
    t = _search(corpus, budget=30)
    t.resume_from(mlgo_host.search.batched.result_of(s, s.base.text, 0.0))
    assert t.interacting == {(a.key, a.inline)}


def test_the_batched_search_measures_many_flips_per_compile_and_never_ends_bigger(corpus):
    m = corpus["gen"]
    from mlgo_host.corpus.compile import baseline_size

    d = baseline_size(m, cache_dir=None)
    r = search_module_batched(m, load_policy("default"), {"clang": "clang-19"}, budget=20, default_size=d)
    assert r["status"] == "ok" and r["compiles"] <= 20
    assert r["flips_measured"] >= 3 * (r["compiles"] - 3), r  # probe (2) and the reference (1) measure no flip
    assert r["best_size"] <= d
    if r["inline"] is not None:  # the best set, replayed, is the size it claims
        from mlgo_host.search.sites import site_of_line

        ev = ReplayEvaluator(m, r["scope"])
        assert ev.measure([site_of_line(x) for x in r["inline"]]).text == r["best_size"]


def test_the_flips_the_search_applied_add_up_to_its_gain(corpus):
    # each flip applied once (but when undone: winners that interact), its
    # bytes measured against the reference as it was: their sum is the final
    # compile's gain (to the byte but for .eh_frame's padding, which follows
    # the total), also when a flip's change spilled out of its predicted
    # functions (read from the object's total, the reference then is that
    # compile), once the compiled references' drift from the derived ones is
    # counted
    s = _search(corpus, budget=60, worlds=True)
    s.run()
    assert s.compiled
    applied = [o for o in s.outcomes if o.accepted]
    undone = {o.candidate.key for o in applied if o.candidate.kind == "undo"}
    kept = [o.candidate.key for o in applied if o.candidate.key not in undone]
    assert len(kept) >= 3 and len(set(kept)) == len(kept)
    assert all(sum(o.candidate.key == k for o in applied) == 2 for k in undone)  # applied, then undone
    gain = s.start_text - s.base.text
    assert abs(gain + sum(o.delta for o in applied) + s.drift) <= 4, (gain, [o.delta for o in applied], s.drift)
    # what tune keeps: a flip is accepted once, and only while it is in the best set
    r = mlgo_host.search.batched.result_of(s, s.probe.text, 0.0)
    kept = [f["key"] for f in r["flips"] if f["accepted"]]
    assert len(set(kept)) == len(kept) and set(kept) <= {o.candidate.key for o in applied}


def test_the_users_deadline_bounds_the_probe(corpus, tmp_path, monkeypatch):
    import tempfile
    import time

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # what the cut probe leaves behind is seen
    m = corpus["gen"]
    t0 = time.time()
    r = search_module_batched(m, load_policy("default"), {"clang": "clang-19"}, budget=20, default_size=1,
                              deadline=t0 + 0.05)
    assert time.time() - t0 < 2.0  # the probe is cut at the deadline, not at the module's 300 s timeout
    assert r == {"name": m.name, "status": "skipped", "compiles": 0}  # not a failure: a later run probes again
    r = search_module_batched(m, load_policy("default"), {"clang": "clang-19"}, budget=20, default_size=1,
                              deadline=time.time() - 1)
    assert r["status"] == "skipped"  # past the deadline: no compile at all
    assert list(tmp_path.iterdir()) == []  # no FIFO, temp file or directory left


def test_a_module_without_decisions_costs_one_compile(corpus):
    from mlgo_host.corpus.compile import baseline_size

    m = corpus["leaf"]
    r = search_module_batched(m, load_policy("default"), {"clang": "clang-19"}, budget=20,
                              default_size=baseline_size(m, cache_dir=None))
    assert r["decisions"] == 0 and r["compiles"] == 1 and r["stopped"] == "exhausted"


def test_a_prior_leads_the_order_and_its_promise_counts_the_flips_left(corpus):
    # a prior sure of one flip (P = 1) and of no other (P = 0): that flip
    # comes first whatever the patterns say, and the promise (the flips the
    # prior expects to pay, not measured yet) is 1 until it is measured
    m = corpus["gen"]
    probe = probe_module(m, load_policy("default"))
    ds = list(unique_decisions(probe.decisions))
    target = [d for d in ds if not d.inlined][-1]
    p1 = np.array([1.0 if d.inlined or d is target else 0.0 for d in ds])

    def prior(feats):
        assert len(feats) == len(ds)
        return p1

    s = BatchedSearch(m, probe, ReplayEvaluator(m, {d.site.caller for d in probe.decisions}), budget=10,
                      prior=prior)
    s.begin()
    assert s.promise() == 1.0
    first = s.candidates()[0]
    assert first.sites[0].key == target.site.key and first.inline
    s.tried.add(first.key)
    assert s.promise() == 0.0
    assert BatchedSearch(m, probe, s.ev, budget=10).promise() is None  # no prior, no promise


def test_an_outline_group_brings_its_callee_back_once_and_reads_from_its_footprint(corpus):
    # a callee inlined at every call (gone from the object): all its calls left out together
    s = _search(corpus, budget=20)
    final = final_functions(s.probe.decisions, s.base.sizes.functions)
    groups = s.outline_groups(set(s.inline), final)  # (as if every single flip had lost)
    assert groups, "the generated module has no callee inlined everywhere"
    g = max(groups, key=lambda c: len(c.sites))
    callee = g.sites[0].callee
    assert len(g.sites) >= 2 and {x.callee for x in g.sites} == {callee} and not g.inline
    assert callee not in s.base.sizes.functions and callee in g.footprint
    (o,) = s.measure([g])
    m = o.measured
    assert o.applied and not {x.key for x in g.sites} & m.inlined  # no call of it inlined
    assert callee in m.sizes.functions  # its body is back, once
    changed = set(_changes(m.sizes, s.base.sizes))
    assert changed <= g.footprint and callee in changed  # its change lies in the functions it predicts


def test_a_losing_outline_group_is_trimmed_to_the_callers_it_made_smaller(corpus):
    # every call of h inlined; all of them left out loses, and its one compile says which callers paid:
    # only their calls are left out next, and that pays as the group's reading predicts
    m = corpus["trim"]
    probe = probe_module(m, load_policy("always"))
    s = BatchedSearch(m, probe, ReplayEvaluator(m, {d.site.caller for d in probe.decisions}), budget=10)
    s.begin()
    (g,) = s.early_outlines()
    assert {x.caller for x in g.sites} == {"v1", "v2", "c1", "c2", "c3", "c4", "c5", "c6"}
    (o,) = s.measure([g])
    assert o.applied and o.delta >= 0  # the whole group loses
    change = _changes(o.measured.sizes, s.base.sizes)
    t = s.trimmed(o)
    assert t is not None and not t.inline and t.kind == "outline"
    assert {x.caller for x in t.sites} == {f for f in ("v1", "v2", "c1", "c2", "c3", "c4", "c5", "c6")
                                            if change.get(f, 0) < 0} == {"v1", "v2"}
    (ot,) = s.measure([t])
    assert ot.applied and ot.delta < 0
    assert ot.delta == o.delta - sum(d for f, d in change.items() if f.startswith("c"))  # as read off the group
    # a group that wins is not trimmed: it is applied, and its calls are flipped back one by one
    assert s.trimmed(dataclasses.replace(o, delta=-1)) is None and s.trimmed(ot) is None
    # the search finds it (no single call pays for the body, and the group loses)
    s = BatchedSearch(m, probe, ReplayEvaluator(m, {d.site.caller for d in probe.decisions}), budget=30)
    s.run()
    assert s.start_text - s.base.text >= -ot.delta
    assert {x.caller for x in s.sites.values() if x.key not in s.inline} >= {"v1", "v2"}


def test_a_callees_calls_in_one_function_that_pay_only_together_are_inlined_together(corpus):
    m = corpus["accessor"]
    probe = probe_module(m, load_policy("default"))
    s = BatchedSearch(m, probe, ReplayEvaluator(m, {d.site.caller for d in probe.decisions}), budget=40)
    s.run()
    singles = {o.candidate.key: o.delta for o in s.outcomes if o.candidate.kind == "single"}
    in_f = sorted(k for k, x in s.sites.items() if x.caller == "f")
    assert len(in_f) == 3 and all(singles[k] > 0 for k in in_f)  # -Oz leaves them out, and rightly one by one
    (whole,) = [o for o in s.outcomes if o.candidate.kind == "group" and len(o.candidate.sites) == 4]
    assert whole.delta > 0  # every call of the accessor: k's copy costs more than f's calls save
    (together,) = [o for o in s.outcomes if o.candidate.kind == "group"
                   and sorted(x.key for x in o.candidate.sites) == in_f]
    assert together.candidate.inline and together.applied and together.delta < 0
    assert s.start_text - s.base.text >= -together.delta
    assert s.caller_groups(set(in_f), s._final()) == []  # (formed from calls the set leaves out only)


def test_every_callee_inlined_twice_or_more_is_left_out_whole_first(corpus):
    # an outline group per callee inlined at two or more sites, whether its body is gone or
    # not and before any single flip lost, the most sites first
    s = _search(corpus, budget=40)
    early = s.early_outlines()
    per_callee: dict[str, set[str]] = {}
    for x in s.inline.values():
        per_callee.setdefault(x.callee, set()).add(x.key)
    want = {c: ks for c, ks in per_callee.items() if len(ks) >= 2}
    assert want, "the generated module has no callee inlined twice"
    assert {g.sites[0].callee: {x.key for x in g.sites} for g in early} == want
    assert all(not g.inline and g.kind == "outline" for g in early)
    assert [len(g.sites) for g in early] == sorted((len(g.sites) for g in early), reverse=True)
    s.tried.add(early[0].key)
    assert early[0].key not in {g.key for g in s.early_outlines()}  # (measured once)


def test_the_search_measures_the_outline_groups_first_within_their_share(corpus):
    budget = 16
    s = _search(corpus, budget=budget)
    n = len(s.early_outlines())
    s.run()
    kinds = [o.candidate.kind for o in s.outcomes]
    leading = [i for i, o in enumerate(s.outcomes) if o.candidate.kind == "outline"]
    assert leading and leading[0] == 0  # the first compile measured a group
    # (at most the share's compiles went to groups: each leads one batch)
    assert len(leading) <= min(n, int(budget * mlgo_host.search.batched.EARLY_OUTLINE_SHARE) + 1)
    assert "single" in kinds  # and the single flips filled the batches and the rest of the budget
    assert s.ev.compiles <= budget and s.base.text <= s.start_text


def test_an_answered_flip_leaves_its_callers_to_the_compiler_and_its_answer_replays(corpus):
    # a flip in a function other functions call, with those functions left to the compiler's
    # heuristic: the compiler's answer is read from its remarks, becomes the set, and compiling
    # that set gives the same object
    s = _search(corpus, budget=40)
    s._compile_start()
    final = final_functions(s.probe.decisions, s.base.sizes.functions)
    answered = [a for a in (s.answered(c) for c in s.candidates()) if a is not None]
    assert answered, "no flip of the generated module is written in a function others call"
    a = answered[0]
    (x,) = a.sites
    holders = {y.caller for y in s.sites.values() if y.callee == x.caller} - {x.caller}
    assert a.release == holders and a.kind == "answered" and a.key.endswith("(answered)")
    assert holders <= a.footprint and final.get(x.caller, frozenset({x.caller})) <= a.footprint
    (o,) = s.measure([a])
    assert o.applied and o.measured.text == s.base.text + o.delta
    s.accept([o])
    want = o.measured.text
    s._compile_reference()
    assert s.base.text == want and s.base.inlined == o.measured.inlined  # the answer, replayed: the same object
    # a function the search changed is not left to the heuristic (it would undo the change)
    s.inline.pop(next(k for k, y in s.inline.items() if y.caller in holders), None)
    assert s.answered(dataclasses.replace(a, release=frozenset(), kind="single")) is None


def test_an_answered_flip_left_pending_is_formed_again_or_dropped(corpus):
    s = _search(corpus, budget=40)
    a = next(a for a in (s.answered(c) for c in s.candidates()) if a is not None)
    s.pending = [a]
    stored = mlgo_host.search.batched.result_of(s, s.base.text, 0.0)["pending"]
    assert stored[0]["release"] == sorted(a.release)
    (again,) = s._pending_of(stored)  # (what a resumed search starts with)
    assert again.release == a.release and again.key == a.key and again.footprint == a.footprint
    # once the search changed one of its functions, the answer would undo that: it is dropped
    s.inline.pop(next(k for k, y in s.inline.items() if y.caller in a.release))
    assert s._pending_of(stored) == []


def test_a_search_that_won_measures_every_site_again_from_its_best_until_a_sweep_wins_nothing(corpus):
    s = _search(corpus, budget=400, worlds=True)
    s.run()
    assert s.wins >= 1 and s.exhausted and s.ev.compiles < 400
    again = [o.candidate for o in s.outcomes if o.candidate.kind == "again"]
    # every probe decision's site once more, each flipped from the best set (winners' sites undone)
    assert {c.key for c in again} == {c.key for c in s.candidates()}
    applied = {c.key: c.inline for c in (o.candidate for o in s.outcomes if o.accepted) if len(c.sites) == 1}
    assert any(c.inline != applied[c.key] for c in again if c.key in applied) or not applied
    assert s.sweep_mark == s.wins  # (the last sweep won nothing: none more)
    r = mlgo_host.search.batched.result_of(s, s.probe.text, 0.0)
    assert (r["wins"], r["sweep_mark"]) == (s.wins, s.sweep_mark)  # (a resumed search knows)
    # a sweep is afforded when the compiles left cover it at the flips per compile measured so far
    per = s.flips_measured / s.ev.compiles
    s.budget = s.ev.compiles + 1 + int(np.ceil(len(again) / max(per, 1.0)))
    assert s._affords(again) and not s._affords(again + again)
    # with a deadline (modules search in turn until it) no sweep takes the time of the modules after it
    s.wins += 1
    assert s.resweep()
    s.wins += 1
    s.deadline = time.time() + 600
    assert s.resweep() == []


def test_the_groups_are_formed_again_from_each_new_best_and_none_is_measured_twice(corpus, monkeypatch):
    s = _search(corpus, budget=400, worlds=True)
    formed = []
    real = BatchedSearch.groups

    def groups(self):
        out = real(self)
        formed.append({c.key for c in out})
        return out

    monkeypatch.setattr(BatchedSearch, "groups", groups)
    s.run()
    assert s.exhausted and len(formed) >= 2  # (after every pass that measured all it queued, not only the first)
    measured = [o.candidate.key for o in s.outcomes if o.candidate.kind == "group"]
    assert measured and len(measured) == len(set(measured))
    assert set(measured) <= set().union(*formed)


def test_a_sweep_the_compiles_left_do_not_afford_is_left_to_the_resumed_search(corpus, monkeypatch):
    # (every sweep unaffordable: tune's next pass gives the module its compiles)
    monkeypatch.setattr(BatchedSearch, "_affords", lambda self, sweep: False)
    from mlgo_host.corpus.compile import baseline_size

    m = corpus["gen"]
    d = baseline_size(m, cache_dir=None)
    r = search_module_batched(m, load_policy("default"), {"clang": "clang-19"}, budget=400, default_size=d)
    assert r["stopped"] == "sweep" and r["compiles"] < 400
    assert {p["kind"] for p in r["pending"]} == {"again"} and "again" not in {f["kind"] for f in r["flips"]}
    for _ in range(8):
        n = len(r["flips"])
        r = search_module_batched(m, load_policy("default"), {"clang": "clang-19"}, budget=r["compiles"] + 400,
                                  default_size=d, resume=r)
        assert "again" in {f["kind"] for f in r["flips"][n:]}  # the resumed search measured the sweep
        if r["stopped"] != "sweep":
            break
    assert r["stopped"] == "exhausted" and r["sweep_mark"] == r["wins"]  # (the last sweep won nothing)


def test_flips_a_budget_cuts_off_are_measured_by_the_resumed_search(corpus, monkeypatch):
    s = _search(corpus, budget=40)
    s._compile_start()  # (the replay's own start: a failed attribution is the batch's)
    a, b = s.batches_of(s.candidates())[0][:2]
    # the budget runs out between the halves of a split batch: the second half is not measured
    s.budget = s.ev.compiles + 3
    monkeypatch.setattr(s, "_attribute", lambda batch, m: (None, "a function outside every footprint changed"))
    touched, lost, rest = s._pass([a, b])
    assert [c.key for c in rest] == [b.key] and b.key not in s.tried  # kept, not lost as tried
    monkeypatch.undo()
    # end to end: a search cut by its budget keeps what it queued, and the resumed one measures it
    from mlgo_host.corpus.compile import baseline_size
    m = corpus["gen"]
    d = baseline_size(m, cache_dir=None)
    r1 = search_module_batched(m, load_policy("default"), {"clang": "clang-19"}, budget=8, default_size=d)
    assert r1["stopped"] == "budget" and r1["pending"]
    measured1 = {f["key"] for f in r1["flips"]}
    assert set(r1["tried"]) <= measured1  # nothing counted as tried that was not measured
    r2 = search_module_batched(m, load_policy("default"), {"clang": "clang-19"}, budget=r1["compiles"] + 200,
                               default_size=d, resume=r1)
    again = [f["key"] for f in r2["flips"][len(r1["flips"]):]]
    assert r2["stopped"] in ("exhausted", "sweep")  # (a sweep is left when it won: see the sweep's test)
    # every queued flip is measured (an answered one, under its key, unless its functions changed since)
    plain = {" + ".join(p["keys"]) for p in r1["pending"] if not p.get("release")}
    answered = {" + ".join(p["keys"]) + " (answered)" for p in r1["pending"] if p.get("release")}
    assert plain and plain <= set(again)
    assert {k for k in again if k.endswith(" (answered)")} <= answered
