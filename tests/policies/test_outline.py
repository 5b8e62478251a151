"""The outline rule (:mod:`mlgo_host.policies.outline`) and policies that
answer each source language with its own part: on the real compiler it
answers ``-Oz``'s decision or refuses one of ``-Oz``'s inlinings, never
more; a model file that is not one is a one-line error."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

from mlgo_host.channel.problems import ready_and_run
from mlgo_host.corpus import synth
from mlgo_host.errors import ConfigError
from mlgo_host.policies import load_policy
from mlgo_host.policies.outline import FORMAT, ByLanguage, OutlineModel, OutlinePolicy
from mlgo_host.policies.saved import language_parts, read_metadata, set_language_part
from mlgo_host.shipped import shipped_policy_dir

FEATURES = ("callee_users", "cost_estimate", "callsite_height")


def _model(bias: float, threshold: float = 0.5) -> OutlineModel:
    n = len(FEATURES)
    return OutlineModel(FEATURES, np.ones(n, bool), np.zeros(n), np.ones(n), np.zeros(n), bias, threshold)


class _Tally(OutlinePolicy):
    """An outline policy that keeps (-Oz's answer, its own) per decision."""

    def bind(self, header, advisor):
        super().bind(header, advisor)
        self.pairs = []

    def act(self, obs):
        a = super().act(obs)
        self.pairs.append((int(self._default(obs)), int(a)))
        return a


def test_a_model_file_round_trips_and_a_bad_one_is_a_one_line_error(tmp_path):
    m = _model(-1.5, 0.3)
    m.save(tmp_path / "m.json")
    got = OutlineModel.load(tmp_path / "m.json")
    assert got.features == FEATURES and got.bias == -1.5 and got.threshold == 0.3
    assert got.probability(np.array([3.0, 10.0, 1.0])) == pytest.approx(1 / (1 + np.exp(1.5)))
    doc = json.loads((tmp_path / "m.json").read_text())
    (tmp_path / "short.json").write_text(json.dumps(dict(doc, mean=[0.0])))
    with pytest.raises(ConfigError, match="short.json: bad outline model: one value per feature"):
        OutlineModel.load(tmp_path / "short.json")
    (tmp_path / "other.json").write_text(json.dumps(dict(doc, format="x/1")))
    with pytest.raises(ConfigError, match="other.json"):
        OutlineModel.load(tmp_path / "other.json")
    assert doc["format"] == FORMAT


def test_it_refuses_only_inlinings_oz_makes_and_at_threshold_one_is_exactly_oz(toolchain, tmp_path):
    src = tmp_path / "m.c"
    src.write_text(synth.inline_module(120, seed=3))
    plain = tmp_path / "plain.o"
    subprocess.run([toolchain.clang, "-Oz", "-c", str(src), "-o", str(plain)], check=True)

    def compile_with(policy, out):
        res = ready_and_run([toolchain.clang, "-Oz", "-c", str(src), "-o", str(out)], "inline", policy)
        assert res.returncode == 0
        return policy.pairs

    refusing = _Tally(_model(bias=50.0))  # P(win) ~ 1 at every site it may refuse
    pairs = compile_with(refusing, tmp_path / "r.o")
    assert all(a <= d for d, a in pairs) and any(a < d for d, a in pairs)
    assert (tmp_path / "r.o").read_bytes() != plain.read_bytes()
    pairs = compile_with(_Tally(_model(bias=50.0, threshold=1.0)), tmp_path / "k.o")  # P never > 1
    assert all(a == d for d, a in pairs)
    assert (tmp_path / "k.o").read_bytes() == plain.read_bytes()


def test_a_saved_policy_answers_each_language_with_its_part(tmp_path):
    d = tmp_path / "pol"
    shutil.copytree(shipped_policy_dir("pretrained-oz"), d)
    _model(-2.0).save(tmp_path / "cxx.json")
    set_language_part(str(d), "C++", str(tmp_path / "cxx.json"))
    md = read_metadata(str(d))
    assert md["by_language"]["C++"] == "cxx_outline.json"
    pol = load_policy(str(d))
    assert isinstance(pol, ByLanguage) and set(language_parts(str(d))) == {"C", "C++"}
    assert isinstance(pol.for_language("C++"), OutlinePolicy) and pol.for_language("C++").model.bias == -2.0
    assert pol.for_language(None) is pol.base and pol.name == "pol"
    with pytest.raises(ConfigError, match="language 'Fortran'"):
        set_language_part(str(d), "Fortran", str(tmp_path / "cxx.json"))
    (d / "metadata.json").write_text(json.dumps(dict(md, by_language={"Go": "x.json"})))
    with pytest.raises(ConfigError, match="bad by_language"):
        load_policy(str(d))


def test_the_shipped_policy_answers_c_with_its_outline_part_and_cxx_with_its_network():
    pol = load_policy("pretrained-oz")
    c, cxx = pol.for_language("C"), pol.for_language("C++")
    assert isinstance(c, OutlinePolicy) and c.model.trained_on["projects"] >= 30
    assert cxx is pol.base and type(cxx.base).__name__ == "NumpyPolicy"  # (behind its inlining bound)
