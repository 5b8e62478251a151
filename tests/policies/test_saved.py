"""A saved policy directory with a damaged file: `mlgo-host run --policy DIR`
says which file and what is wrong, in one line, exit status 2."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from _policy_helpers import random_weights
from mlgo_host.channel.default_slot import default_slot
from mlgo_host.cli import main
from mlgo_host.policies.actor import NumpyActor
from mlgo_host.policies.saved import FORMAT, METADATA, VOCAB_DIR, WEIGHTS
from mlgo_host.policies.specs import PolicySpec
from mlgo_host.policies.vocab import NormConfig, VocabBuilder


@pytest.fixture(scope="module")
def good_policy(inline_session, tmp_path_factory):
    """A small saved inliner policy, written with numpy only."""
    header, ep, adv = inline_session
    builder = VocabBuilder()
    builder.add(ep.features())
    vocab = builder.build(20)
    spec = PolicySpec.from_header(header, "inline", vocab_names=vocab.names(), default_slot=default_slot("clang-19"))
    d = tmp_path_factory.mktemp("saved") / "policy"
    vocab.save(str(d / VOCAB_DIR))
    norm = NormConfig()
    NumpyActor.save_weights(str(d / WEIGHTS), random_weights(len(spec.inputs) * norm.width, (8,), 2, seed=3))
    (d / METADATA).write_text(json.dumps({"format": FORMAT, "advisor": "inline", "spec": spec.to_json(),
                                          "norm": norm.to_json(), "activation": "relu"}))
    return d


def _run(policy, tmp_path, capsys) -> tuple[int, str]:
    src = tmp_path / "m.c"
    src.write_text("static int f(int x) { return x * 3; }\nint g(int y) { return f(y) + f(y + 1); }\n")
    rc = main(["run", "--policy", str(policy), "--", "clang-19", "-Oz", "-c", str(src), "-o", str(tmp_path / "m.o")])
    return rc, capsys.readouterr().err


def test_the_intact_policy_compiles(good_policy, tmp_path, capsys):
    rc, err = _run(good_policy, tmp_path, capsys)
    assert rc == 0, err


def _truncate(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _spec_not_a_dict(path):
    md = json.loads(path.read_text())
    md["spec"] = ["inline"]
    path.write_text(json.dumps(md))


def _wrong_layer(path):
    w = NumpyActor.load_weights(str(path))
    w["hidden_0_kernel"] = w["hidden_0_kernel"][:-1]
    NumpyActor.save_weights(str(path), w)


def _no_bias(path):
    w = NumpyActor.load_weights(str(path))
    del w["hidden_0_bias"]
    NumpyActor.save_weights(str(path), w)


def _one_buckets_file(d):
    return sorted((d / VOCAB_DIR).iterdir())[0]


DAMAGE = {
    # name: (file to damage, how, words the message must have)
    "truncated weights": (WEIGHTS, _truncate, "not a readable .npz"),
    "no weights": (WEIGHTS, os.unlink, "missing"),
    "weights that are text": (WEIGHTS, lambda p: p.write_text("hello"), "not a readable .npz"),
    "weights of the wrong shape": (WEIGHTS, _wrong_layer, "layer 0"),
    "a layer without its bias": (WEIGHTS, _no_bias, "no hidden_0_bias"),
    "truncated metadata": (METADATA, _truncate, "unreadable"),
    "metadata spec not a mapping": (METADATA, _spec_not_a_dict, METADATA),
    "binary vocab file": (None, lambda p: p.write_bytes(b"\xff\xfe\x00\x81" * 8), "not a text file"),
    "vocab file with a word": (None, lambda p: p.write_text("0.5\nlots\n"), "not a number"),
    "missing vocab file": (None, os.unlink, ".buckets"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_file_is_one_line_naming_it(case, good_policy, tmp_path, capsys):
    rel, damage, words = DAMAGE[case]
    d = tmp_path / "policy"
    shutil.copytree(good_policy, d)
    target = d / rel if rel else _one_buckets_file(d)
    damage(target)
    rc, err = _run(d, tmp_path, capsys)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlgo-host run: error: "), err
    named = str(target) if case != "missing vocab file" else str(d / VOCAB_DIR)
    assert named in lines[0] and words in lines[0], lines[0]


def test_a_copy_without_the_saved_model_says_it_has_none(good_policy, tmp_path):
    # tune's T/policy and the shipped policy are such copies: their metadata names only files they have
    from mlgo_host.policies import load_policy
    from mlgo_host.policies.saved import SAVED_MODEL_DIR, copy_without_saved_model, read_metadata

    src = tmp_path / "src"
    shutil.copytree(good_policy, src)
    (src / SAVED_MODEL_DIR).mkdir()
    (src / SAVED_MODEL_DIR / "saved_model.pb").write_bytes(b"x")
    md = json.loads((src / METADATA).read_text())
    (src / METADATA).write_text(json.dumps(dict(md, saved_model=SAVED_MODEL_DIR)))
    assert read_metadata(str(src))["saved_model"] == SAVED_MODEL_DIR
    dst = tmp_path / "dst"
    copy_without_saved_model(str(src), str(dst))
    assert sorted(os.listdir(dst)) == sorted([METADATA, VOCAB_DIR, WEIGHTS])
    got = read_metadata(str(dst))
    assert got["saved_model"] is None
    assert {k: v for k, v in got.items() if k != "saved_model"} == md
    assert load_policy(str(dst)).name
