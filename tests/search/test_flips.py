"""The flip prior (patterns, the flip-gain model), the search loop's
budgets and splits, and imitation with its gate on what the search found,
with the real clang-19 on generated modules.

``k.c`` is the textbook case the search must find: a static helper called
with constant arguments from two places, which the default inliner refuses
at -Oz; inlining both calls lets the dead branches go and shrinks the object.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from mlgo_host.channel.default_slot import default_slot
from mlgo_host.corpus.build import build_corpus, load_compile_commands
from mlgo_host.corpus.corpus import load_corpus, split_three
from mlgo_host.measure.compile import baseline_size, compile_module
from mlgo_host.policies import load_policy
from mlgo_host.search.driver import search_module_batched
from mlgo_host.search.flips import FlipGainModel, pattern_scores

from _corpus_helpers import needs_clang
from _tune_helpers import HELPER_C, TINY_C



@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed")
    root = tmp_path_factory.mktemp("search")
    (root / "src").mkdir()
    db = []
    for name, text in {"k.c": HELPER_C, "t.c": TINY_C}.items():
        f = root / "src" / name
        f.write_text(text)
        db.append({"directory": str(root), "file": str(f),
                   "arguments": ["clang", "-Oz", "-c", str(f), "-o", str(root / "obj" / (name + ".o"))]})
    (root / "compile_commands.json").write_text(json.dumps(db))
    rep = build_corpus(load_compile_commands(root / "compile_commands.json"), root / "corpus", jobs=2, progress=False)
    assert not rep.failures
    return load_corpus(root / "corpus"), root


def _cfg(root):
    return {"clang": "clang-19", "llvm_size": None, "module_timeout": 120,
            "baseline_cache": str(root / "baselines"), "default_slot": default_slot("clang-19")}


def test_flip_gain_model_learns_a_separable_rule():
    rng = np.random.default_rng(0)
    n = 400
    rec = np.zeros(n, dtype=[("callee_users", "<i8"), ("cost_estimate", "<i8"), ("is_multiple_blocks", "<i8")])
    rec["callee_users"] = rng.integers(1, 6, n)
    rec["cost_estimate"] = rng.integers(0, 300, n)
    base = rng.integers(0, 2, n)
    gained = ((base == 0) & (rec["callee_users"] <= 2)).astype(float)
    m = FlipGainModel.fit(rec, base, gained, ["callee_users", "cost_estimate"])
    p = m.predict(rec, base)
    assert p[gained == 1].mean() > 0.7 > 0.3 > p[gained == 0].mean()
    again = FlipGainModel.from_json(json.loads(json.dumps(m.to_json())))
    assert np.allclose(again.predict(rec, base), p)


def test_pattern_prior_ranks_the_measured_winners_first():
    rec = np.zeros(2, dtype=[("callee_users", "<i8"), ("cost_estimate", "<i8"), ("is_multiple_blocks", "<i8")])
    rec["callee_users"] = [1, 9]
    rec["cost_estimate"] = [80, 500]
    rec["is_multiple_blocks"] = [1, 0]
    s = pattern_scores(rec, np.array([0, 0]))  # both refused by the default
    assert s[0] > s[1]


def test_three_way_split_is_deterministic_and_disjoint(corpus):
    c, _ = corpus
    mods = c.modules * 1
    a = split_three(mods, 0.2, 0.2, seed=3)
    b = split_three(mods, 0.2, 0.2, seed=3)
    assert [[m.name for m in part] for part in a] == [[m.name for m in part] for part in b]
    names = [m.name for part in a for m in part]
    assert sorted(names) == sorted(m.name for m in mods)
    # the held-out part is the one every other trainer keeps out
    assert [m.name for m in a[2]] == [m.name for m in c.split(0.2, seed=3)[1]]


@needs_clang
@pytest.mark.slow
def test_imitation_and_gate_reproduce_the_searched_gain(corpus, tmp_path):
    """The gated policy trained on the search's data makes the module as
    small as the search did; with the gate closed it is the default."""
    from mlgo_host.learning.imitate import examples_from_search, train_imitation
    from mlgo_host.policies.saved import set_gate

    c, root = corpus
    d = load_policy("default")
    res = [search_module_batched(c[n], d, _cfg(root), budget=30, default_size=baseline_size(c[n])) for n in ("k.c", "t.c")]
    pol_dir = str(tmp_path / "pol")
    fit = train_imitation(examples_from_search(res), pol_dir, default_slot=default_slot("clang-19"), epochs=300,
                          saved_model=False, seed=1)
    assert fit["deviations_labelled"] >= 1
    set_gate(pol_dir, 0.5)
    gated = compile_module(c["k.c"], load_policy(pol_dir), clang="clang-19")
    assert gated.text_size <= res[0]["best_size"] < res[0]["default_size"]
    set_gate(pol_dir, 1.0)  # closed: never leaves the default
    closed = compile_module(c["k.c"], load_policy(pol_dir), clang="clang-19")
    assert closed.text_size == res[0]["default_size"]
    md = json.loads(open(os.path.join(pol_dir, "metadata.json")).read())
    assert md["gate"]["threshold"] == 1.0 and md["spec"]["default_input"] == default_slot("clang-19")
