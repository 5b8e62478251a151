"""Shared fixtures of the tests: real clang-19 sessions (an inliner and an
eviction episode with the default policy), a small corpus of generated C
modules and its default trace.  ``tests/helpers`` (generated corpora, toy
workers, policy helpers) is put on ``sys.path`` for every test directory."""

from __future__ import annotations

import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers"))

import pytest

from mlgo_host.corpus import synth
from mlgo_host.episode import EpisodeRecorder

HAVE_CLANG = shutil.which("clang-19") is not None
needs_clang = pytest.mark.skipif(not HAVE_CLANG, reason="clang-19 not installed")


def _session(tmp, advisor: str, source: str, opt: str):
    from mlgo_host.channel.advisors import get_advisor
    from mlgo_host.channel.session import run_session
    from mlgo_host.policies import load_policy

    src = tmp / f"{advisor}.c"
    src.write_text(source)
    adv = get_advisor(advisor)
    res = run_session(["clang-19", opt, "-c", str(src), "-o", str(tmp / f"{advisor}.o")], adv, load_policy("default"),
                      recorder=EpisodeRecorder(), timeout=120)
    assert res.returncode == 0, res.stderr_tail
    assert res.episode is not None and res.episode.n > 50
    return res.header, res.episode, adv


@pytest.fixture(scope="session")
def inline_session(tmp_path_factory):
    """(header, episode, advisor) of the default inliner on a generated module."""
    if not HAVE_CLANG:
        pytest.skip("clang-19 not installed")
    return _session(tmp_path_factory.mktemp("inl"), "inline", synth.inline_module(160, seed=11), "-Oz")


@pytest.fixture(scope="session")
def evict_session(tmp_path_factory):
    """(header, episode, advisor) of the default eviction advisor."""
    if not HAVE_CLANG:
        pytest.skip("clang-19 not installed")
    return _session(tmp_path_factory.mktemp("evi"), "regalloc-evict", synth.pressure_module(2, 36, seed=5), "-O2")


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory):
    """A corpus of 5 generated C modules (built with clang-19, -Oz) plus one
    module whose bitcode is corrupt (it must fail, the others trace)."""
    if not HAVE_CLANG:
        pytest.skip("clang-19 not installed")
    from mlgo_host.corpus.build import build_corpus, load_compile_commands

    root = tmp_path_factory.mktemp("proj")
    (root / "src").mkdir()
    db = []
    for i in range(6):
        f = root / "src" / f"m{i}.c"
        f.write_text(synth.inline_module(50 + 9 * i, seed=100 + i))
        db.append({"directory": str(root), "file": str(f),
                   "arguments": ["clang", "-Oz", "-c", str(f), "-o", str(root / "obj" / f"m{i}.o")]})
    (root / "compile_commands.json").write_text(json.dumps(db))
    out = root / "corpus"
    rep = build_corpus(load_compile_commands(root / "compile_commands.json"), out, jobs=2, progress=False)
    assert not rep.failures, rep.failures
    bc = sorted(out.rglob("*.bc"))
    assert len(bc) == 6
    bc[-1].write_bytes(b"BC\xc0\xde this is not bitcode")
    return out


@pytest.fixture(scope="session")
def default_trace(small_corpus, tmp_path_factory):
    """The default policy's trace of the small corpus (2 jobs) and its index."""
    from mlgo_host.trainers.traces import record_trace

    out = tmp_path_factory.mktemp("trace") / "trace"
    index = record_trace(str(small_corpus), str(out), policy="default", jobs=2, progress=False)
    return out, index
