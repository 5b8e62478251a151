"""The probe with the real clang-19: a module probed with the compiler's own
decisions takes one compile and knows what the plain compile would have told;
where it cannot (copies of one body, another policy) it makes that compile."""

from __future__ import annotations

import pytest

from _corpus_helpers import build_generated_corpus
from mlgo_host.corpus.corpus import load_corpus
from mlgo_host.policies import load_policy
from mlgo_host.search.probe import compile_with_remarks, probe_module

# always_inline helpers in functions that are themselves inlined: the probe's
# record names the mandatory sites, its decisions the others
CLAMP = r"""
static inline __attribute__((always_inline)) int clamp(int x) { return x < 0 ? 0 : x > 255 ? 255 : x; }
static int scale(int x, int k) { return clamp(x * k) + clamp(x - k); }
static int mix(int a, int b) { return scale(a, 3) + scale(b, 5) + clamp(a + b); }
int api1(int a, int b) { return mix(a, b) * mix(b, a); }
int api2(int a) { return scale(a, 7) + mix(a, 1) + clamp(a); }
"""


@pytest.fixture(scope="module")
def clamp(tmp_path_factory):
    (m,) = load_corpus(build_generated_corpus(tmp_path_factory.mktemp("probe"), {}, sources={"clamp": CLAMP})).modules
    return m


def _with_plain_compile(m, policy="default"):
    return probe_module(m, load_policy(policy), plain=compile_with_remarks(m, "clang-19", 300.0))


@pytest.mark.parametrize("name", ["clamp", "gen", "trim", "lambda", "pieces"])
def test_a_probe_with_the_compilers_decisions_is_one_compile_that_knows_the_plain_ones(
        batched_corpus, clamp, name):
    m = clamp if name == "clamp" else batched_corpus[name]
    one = probe_module(m, load_policy("default"))
    two = _with_plain_compile(m)
    assert one.compiles == 1 and one.episode.n >= 3
    # the plain compile's object, the keys it inlined, its always_inline sites: as that compile gives them
    assert one.plain.sizes == two.plain.sizes
    assert one.plain.inlined == two.plain.inlined
    assert one.mandatory == two.mandatory
    assert [d.site.key for d in one.decisions] == [d.site.key for d in two.decisions]
    if name == "clamp":
        assert len(one.mandatory) >= 3 and {s.callee for s in one.mandatory} == {"clamp"}


@pytest.mark.parametrize("name", ["copies", "macros", "shapes", "globals"])
def test_copies_of_one_body_take_the_plain_compile(batched_corpus, name):
    # copies: an always_inline body copied twice, whose calls the compiler decides in another
    # order; macros: one header's function under two names; shapes, globals: C++ library bodies
    # inlined more than once into one function
    m = batched_corpus[name]
    probe = probe_module(m, load_policy("default"))
    assert probe.compiles == 2
    assert [d.site.key for d in probe.decisions] == [d.site.key for d in _with_plain_compile(m).decisions]


def test_a_probe_with_another_policy_takes_the_plain_compile(clamp):
    # its channel object is not -Oz's: only a compile without the channel gives that
    probe = probe_module(clamp, load_policy("never"))
    assert probe.compiles == 2
    assert probe.plain.text != probe.text
