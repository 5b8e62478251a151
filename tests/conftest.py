"""Shared fixtures of the tests: real clang-19 sessions (an inliner and an
eviction episode with the default policy), a small corpus of generated C
modules and its default trace, a saved inliner policy (written with TF), and
``toolchain``: the clang version matrix (every installed clang >= 17).  ``tests/helpers`` (generated corpora, toy
workers, policy helpers) is put on ``sys.path`` for every test directory."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers"))

import pytest

from mlgo_host.corpus import synth
from mlgo_host.episode import EpisodeRecorder

from _corpus_helpers import HAVE_CLANG  # noqa: E402 (after the sys.path entry)

# -- the clang version matrix ----------------------------------------------
#: oldest clang with the interactive channel the host speaks
MIN_CLANG = 17
#: versions always listed in the matrix (skipped with the reason when absent):
#: the requirement (19) and the newest one tested for real (22, Debian 12 security)
MATRIX_CLANGS = (19, 22)


def installed_clang_versions() -> list[int]:
    """Major versions N >= MIN_CLANG with a ``clang-N`` on PATH."""
    from mlgo_host.measure.sizes import installed_clang_versions as installed

    return installed(MIN_CLANG)


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """One installed LLVM version's tools (Debian names: clang-N, llc-N, llvm-size-N)."""

    version: int

    @property
    def clang(self) -> str:
        return f"clang-{self.version}"

    @property
    def llc(self) -> str:
        return f"llc-{self.version}"

    @property
    def llvm_size(self) -> str:
        return f"llvm-size-{self.version}"

    @property
    def default_slot(self) -> str:
        """Where this version sends the inliner's default decision: the
        include-default bug was fixed in LLVM 21 (docs/channel.md)."""
        from mlgo_host.channel.default_slot import BUGGY_SLOT, FIXED_SLOT

        return BUGGY_SLOT if self.version <= 20 else FIXED_SLOT

    def missing(self) -> list[str]:
        return [t for t in (self.clang, self.llc, self.llvm_size) if shutil.which(t) is None]


#: the requirement: the package tests run on it in depth
REQUIRED_CLANG = 19
CLANG_MATRIX = sorted(set(MATRIX_CLANGS) | set(installed_clang_versions()))
EXTRA_CLANGS = [v for v in CLANG_MATRIX if v != REQUIRED_CLANG]


@pytest.fixture(scope="session", params=CLANG_MATRIX, ids=[f"clang-{v}" for v in CLANG_MATRIX])
def toolchain(request) -> Toolchain:
    """Every installed clang >= 17 (and 19, 22 always listed): the version
    matrix.  Skipped, saying how to install it, when the version is absent."""
    return _installed_toolchain(request.param)


@pytest.fixture(scope="session", params=EXTRA_CLANGS, ids=[f"clang-{v}" for v in EXTRA_CLANGS])
def extra_toolchain(request) -> Toolchain:
    """The matrix without clang-19, for what the package tests already run
    on clang-19 and is too slow to repeat (training)."""
    return _installed_toolchain(request.param)


def _installed_toolchain(version: int) -> Toolchain:
    tc = Toolchain(version)
    missing = tc.missing()
    if missing:
        pytest.skip(f"clang-{tc.version} not installed ({', '.join(missing)} not on PATH; "
                    f"`apt-get install clang-{tc.version} llvm-{tc.version}` or `make setup` adds it where the "
                    "archive has it)")
    return tc


def _session(tmp, advisor: str, source: str, opt: str):
    from mlgo_host.channel.problems import ready_advisor
    from mlgo_host.channel.session import run_session
    from mlgo_host.policies import load_policy

    src = tmp / f"{advisor}.c"
    src.write_text(source)
    adv = ready_advisor(advisor, "clang-19")
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
    from mlgo_host.evaluation.traces import record_trace

    out = tmp_path_factory.mktemp("trace") / "trace"
    index = record_trace(str(small_corpus), str(out), policy="default", jobs=2, progress=False)
    return out, index


@pytest.fixture(scope="session")
def saved_inliner(inline_session, tmp_path_factory):
    """A saved inliner policy with random weights, written from a TF actor
    (SavedModel included): (directory, TF actor, spec, vocab)."""
    pytest.importorskip("tensorflow")
    from _policy_helpers import random_weights, spec_vocab

    from mlgo_host.learning import export
    from mlgo_host.learning.networks import build_actor_network
    from mlgo_host.learning.weights import import_actor_weights
    from mlgo_host.policies.vocab import NormConfig

    spec, vocab = spec_vocab(inline_session)
    cfg = NormConfig()
    net = build_actor_network(spec, vocab, cfg, fc_layer_params=(24, 12))
    import_actor_weights(net, random_weights(len(spec.inputs) * cfg.width, (24, 12), 2, seed=9))
    d = tmp_path_factory.mktemp("pol") / "policy"
    export.save_policy(str(d), net, spec, vocab, cfg, compiler="clang-19 (test)", training_step=7)
    return d, net, spec, vocab
