"""The flip-effect table (bench/research/effects.py) with the real clang-19: an entry measured in a
shared compile is the flip's change alone; the cache resumes without
measuring again; held-out modules are refused."""

from __future__ import annotations

import json
import os

import pytest

from mlgo_host.corpus.build import build_corpus, load_compile_commands
from mlgo_host.corpus.corpus import load_corpus
from mlgo_host.corpus.synth import inline_module
from mlgo_host.errors import ConfigError
from mlgo_host.policies import load_policy
from mlgo_host.search.attribution import EH_FRAME_PADDING
from mlgo_host.search.probe import probe_module
from mlgo_host.search.replay import ReplayEvaluator

import _research  # noqa: F401  (bench/research on sys.path)
import effects

CFG = {"clang": "clang-19"}


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    """A generated C module with ~100 decisions, built with locations kept."""
    root = tmp_path_factory.mktemp("effects")
    (root / "gen.c").write_text(inline_module(70, seed=3))
    db = [{"directory": str(root), "file": "gen.c", "command": "cc -Oz -c gen.c -o gen.o"}]
    (root / "compile_commands.json").write_text(json.dumps(db))
    build_corpus(load_compile_commands(root / "compile_commands.json"), root / "corpus", clang="clang-19",
                 jobs=1, progress=False)
    return load_corpus(root / "corpus").modules[0]


def test_a_flip_measured_in_a_shared_compile_gives_the_same_change_alone(module):
    e = effects.measure_effects(module, CFG, cap=40, seed=1)
    assert e["status"] == "ok" and len(e["flips"]) == 40
    shared = [f for f in e["flips"] if f["batch"] > 1 and f["applied"]]
    assert len(shared) >= 5 and e["compiles"] < 3 + len(e["flips"])  # batching paid
    probe = probe_module(module, load_policy("default"))
    ev = ReplayEvaluator(module, {d.site.caller for d in probe.decisions})
    default = {d.site.key: d.site for d in probe.decisions if d.inlined}
    assert ev.measure(default.values()).text == e["reference_text"]
    for f in shared[:6]:
        site = probe.decisions[f["index"]].site
        assert site.key == f["key"]
        alone = dict(default)
        if f["from"] == 0:
            alone[site.key] = site
        else:
            alone.pop(site.key)
        got = ev.measure(alone.values()).text - e["reference_text"]
        # the batch reads the flip's functions; alone the object may differ by .eh_frame's last-FDE padding
        assert abs(got - f["delta"]) <= EH_FRAME_PADDING, f["key"]


def test_a_resumed_table_measures_nothing_again(module, tmp_path, monkeypatch):
    root = str(tmp_path / "table")
    first = effects.build_table(root, [(module, "train")], CFG, cap=8, seed=0)
    assert [x["name"] for x in first] == [module.name] and first[0]["flips"] == 8
    path = effects.entry_path(root, module.name)
    stamp = os.stat(path).st_mtime_ns

    def no_compiles(*a, **k):
        raise AssertionError("measured again")

    monkeypatch.setattr(effects, "measure_effects", no_compiles)
    assert effects.build_table(root, [(module, "train")], CFG, cap=8, seed=0) == []
    assert os.stat(path).st_mtime_ns == stamp
    rep = effects.table_report(root)
    assert rep["decisions"] == 8 and rep["modules"] == 1
    assert rep["wins"] + rep["losses"] + rep["zero"] == rep["applied"]
    with pytest.raises(ConfigError, match="cap=8"):  # another sample is never mixed in
        effects.build_table(root, [(module, "train")], CFG, cap=9, seed=0)


def test_held_out_modules_are_never_measured(module, tmp_path):
    with pytest.raises(ConfigError, match="training and validation"):
        effects.build_table(str(tmp_path / "t"), [(module, "heldout")], CFG)
    with pytest.raises(ConfigError):
        effects.measure_effects(module, CFG, split="heldout")


def test_the_sample_is_seeded_and_capped():
    from types import SimpleNamespace

    from mlgo_host.search.sites import Decision, Site

    ds = [Decision(i, Site(f"f{i}", "main", (("main", i, 0),)), False) for i in range(50)]
    probe = SimpleNamespace(decisions=ds)
    a = effects.sample_indices(probe, (), 10, 0, "m")
    assert len(a) == 10 and a == effects.sample_indices(probe, (), 10, 0, "m")
    assert a != effects.sample_indices(probe, (), 10, 1, "m")
    assert effects.sample_indices(probe, (), 100, 0, "m") == list(range(50))
