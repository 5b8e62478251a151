"""What lies past a search's optimum (bench/research/ceiling.py), measured with the real clang-19."""

from __future__ import annotations

import json

import pytest

from _corpus_helpers import ACCESSOR
from mlgo_host.corpus.build import build_corpus, load_compile_commands
from mlgo_host.corpus.corpus import load_corpus
from mlgo_host.policies import load_policy
from mlgo_host.search.driver import BatchedSearch, result_of
from mlgo_host.search.probe import probe_module
from mlgo_host.search.replay import ReplayEvaluator

import _research  # noqa: F401  (bench/research on sys.path)
from ceiling import ceiling_of, landing, neighbourhoods, rounds_of

CFG = {"clang": "clang-19", "module_timeout": 300.0}


@pytest.fixture(scope="module")
def accessor(tmp_path_factory):
    root = tmp_path_factory.mktemp("ceiling")
    (root / "accessor.c").write_text(ACCESSOR)
    db = [{"directory": str(root), "file": "accessor.c", "command": "cc -Oz -c accessor.c -o accessor.o"}]
    (root / "compile_commands.json").write_text(json.dumps(db))
    build_corpus(load_compile_commands(root / "compile_commands.json"), root / "corpus", clang="clang-19",
                 jobs=1, progress=False)
    (m,) = load_corpus(root / "corpus").modules
    return m


def _result(m, budget: int | None) -> tuple[BatchedSearch, dict]:
    """A search's result: run within ``budget``, or (None) its start alone, -Oz's decisions compiled."""
    probe = probe_module(m, load_policy("default"))
    s = BatchedSearch(m, probe, ReplayEvaluator(m, {d.site.caller for d in probe.decisions}), budget=budget or 3)
    if budget is None:
        s.begin()
    else:
        s.run()
    return s, result_of(s, probe.plain.text if probe.plain is not None else probe.text, 0.0)


def test_the_neighbourhood_of_a_start_holds_the_calls_that_pay_only_together(accessor):
    # -Oz leaves every call of the accessor out; no single flip pays, two or three of f's together do
    s, res = _result(accessor, budget=None)
    hoods = neighbourhoods(s.inline, s.sites, landing(s), set(s.base.sizes.functions), {})
    (f,) = [h for h in hoods if h.functions == frozenset({"f"})]
    assert f.kind == "all" and len(f.sites) == 3 and len(f.states) == 4  # (2**3 states, less now and 3 singles)
    assert all(sum(a != b for a, b in zip(st, (False,) * 3)) >= 2 for st in f.states)
    assert all(not (a.footprint & b.footprint) for r in rounds_of(hoods) for a in r for b in r if a is not b)
    out = ceiling_of(accessor, res, CFG)
    (paid,) = [p for p in out["paying"] if {k.split(" at ")[1].split(":")[0] for k, _ in p["flips"]} == {"f"}]
    assert len(paid["flips"]) >= 2 and all(on for _, on in paid["flips"]) and paid["bytes"] < 0
    assert out["gain_past"] >= -paid["bytes"] and out["past_size"] == out["best_size"] - out["gain_past"]


def test_past_the_searchs_own_optimum_its_neighbourhoods_are_measured_from_its_best(accessor):
    s, res = _result(accessor, budget=60)
    out = ceiling_of(accessor, res, CFG)
    assert out["best_size"] == s.base.text  # (from the search's best set, compiled again)
    # the search's caller group and the undo after it reached f's best combination: nothing is left
    assert sum(out["functions"].values()) >= 1 and out["unread_compiles"] == 0
    assert out["gain_past"] == 0 and out["paying"] == [] and out["past_size"] == s.base.text
