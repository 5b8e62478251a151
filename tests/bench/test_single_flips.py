"""bench/single_flips.py on a tune directory of the tune tests' project, with the real clang-19:
the known winning inlining of ``k.c`` (a static helper with constant arguments, refused by -Oz)
is a single flip to inline, smaller, of an internal callee."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from _corpus_helpers import needs_clang
from _tune_helpers import build_project_corpus
from mlgo_host.cli import main

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "bench"))
from single_flips import bands, single_flips, summary  # noqa: E402


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    if __import__("shutil").which("clang-19") is None:
        pytest.skip("clang-19 not installed")
    corpus = build_project_corpus(tmp_path_factory.mktemp("single_flips"))
    t = corpus.parent / "T"
    assert main(["tune", "--corpus", str(corpus), "--output", str(t), "--jobs", "2", "--no-progress",
                 "--compiles-per-module", "6", "--no-thresholds", "--start-policy", "none",
                 "--modules", "k", "t"]) == 0
    return str(corpus), str(t)


@needs_clang
def test_the_known_winning_inlining_is_a_smaller_single_flip_of_an_internal_callee(tuned):
    corpus, t = tuned
    flips = single_flips(t, corpus, "inline", "llvm-nm-19")
    assert flips and all(len(f["x"]) == len(flips[0]["x"]) for f in flips)
    winners = [f for f in flips if f["delta"] < 0]
    assert winners and all(f["linkage"] == "t" for f in winners)  # helper and tiny are static
    everything = summary(flips, np.ones(len(flips), dtype=bool))
    assert everything["net_bytes"] == sum(f["delta"] for f in flips)
    assert everything["smaller"] == len(winners)
    internal = [b for b in bands(flips) if b["linkage"] == "t" and b["max_users"] is None]
    assert sum(b["flips"] for b in internal) == sum(f["linkage"] == "t" for f in flips)


@needs_clang
def test_refusals_are_the_flips_from_an_inlining(tuned):
    corpus, t = tuned
    inline = {(f["delta"], tuple(f["x"])) for f in single_flips(t, corpus, "inline", "llvm-nm-19")}
    refuse = {(f["delta"], tuple(f["x"])) for f in single_flips(t, corpus, "refuse", "llvm-nm-19")}
    assert inline and refuse and not inline & refuse
