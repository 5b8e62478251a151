"""The version matrix: the same smoke tests against every installed clang
>= 17 (the ``toolchain`` fixture of conftest.py; clang-19 and clang-22 are
always listed and skipped, with how to install them, when absent).

Per version: the channel (header, default-decision slot detected by a compile
and cached, what the compiler-dependent features carry), ``run`` for every
advisor, the default inliner reproducing plain ``-Oz`` byte for byte,
``eval``, ``serve`` with ``mlgo-clang``, and (slow; for clang-19 the trainer
tests do it) one PPO iteration and a behavioural-cloning run through
``mlgo-host train`` with the version's ``clang_path``/``llvm_size_path``.
The full-depth tests of each package run on clang-19, the requirement.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from _corpus_helpers import build_generated_corpus, build_small_corpus

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve"))  # the serve tests' helpers
from _serve_util import ServerProc, mlgo_clang, write_sources  # noqa: E402
from mlgo_host.channel import default_slot as slots  # noqa: E402
from mlgo_host.channel.problems import ready_advisor
from mlgo_host.channel.session import run_session
from mlgo_host.cli import main
from mlgo_host.corpus import synth
from mlgo_host.episode import EpisodeRecorder

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    d = tmp_path_factory.mktemp("vsrc")
    files = {"mid.c": synth.inline_module(330, seed=2), "pressure.c": synth.pressure_module(n_funcs=2, live=36, seed=4)}
    for name, text in files.items():
        (d / name).write_text(text)
    return d


@pytest.fixture()
def fresh_slot_cache(tmp_path, monkeypatch):
    """An empty default-slot cache (memory and disk) for this test."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(slots.ENV_OVERRIDE, raising=False)
    monkeypatch.setattr(slots, "_MEMO", {})
    return tmp_path / "cache" / "mlgo_host" / "default_slot.json"


def _cli_json(args: list[str], tmp_path) -> dict:
    r = subprocess.run([sys.executable, "-m", "mlgo_host", *args], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


# -- channel ---------------------------------------------------------------
def test_default_slot_is_detected_once_and_cached(toolchain, fresh_slot_cache, monkeypatch):
    slot = slots.default_slot(toolchain.clang)
    assert slot == toolchain.default_slot
    assert slot in json.loads(fresh_slot_cache.read_text()).values()

    def no_detection(clang, timeout=60.0):
        raise AssertionError(f"detected {clang}'s slot again")

    monkeypatch.setattr(slots, "detect_slot", no_detection)
    assert slots.default_slot(toolchain.clang) == slot  # memory
    monkeypatch.setattr(slots, "_MEMO", {})
    assert slots.default_slot(toolchain.clang) == slot  # disk


def test_channel_header_and_what_the_slots_carry(toolchain, sources, tmp_path):
    """Same inliner features everywhere; the default decision is in the
    detected slot (answering with it reproduces -Oz, below), the other slot
    carries 0 (clang-19's inlining_default) or the real block count."""
    rec = EpisodeRecorder()
    res = run_session([toolchain.clang, "-Oz", "-c", str(sources / "mid.c"), "-o", str(tmp_path / "m.o")],
                      ready_advisor("inline", toolchain.clang),
                      None, recorder=rec, timeout=120)
    assert res.returncode == 0, res.stderr_tail
    names = [f.name for f in res.header.features]
    # 39 features + the advice: the 40 tensors of clang-19's inliner
    assert len(names) == 39 and res.header.advice.name == "inlining_decision"
    assert slots.FIXED_SLOT in names and slots.BUGGY_SLOT in names
    feats = res.episode.features()
    decision = feats[toolchain.default_slot].reshape(-1)
    assert set(np.unique(decision)) == {0, 1}
    assert (res.episode.actions == decision).all()  # the default policy answered from that slot
    blocks = feats[slots.BUGGY_SLOT].reshape(-1)
    if toolchain.default_slot == slots.FIXED_SLOT:
        assert blocks.max() > 1  # a real count
    else:
        assert (feats[slots.FIXED_SLOT] == 0).all()


# -- run, every advisor ------------------------------------------------------
def test_run_inline_default_is_byte_identical_to_plain_oz(toolchain, sources, tmp_path):
    plain, ours = tmp_path / "plain.o", tmp_path / "ours.o"
    subprocess.run([toolchain.clang, "-Oz", "-c", str(sources / "mid.c"), "-o", str(plain)], check=True)
    out = _cli_json(["run", "--policy", "default", "--", toolchain.clang, "-Oz", "-c", str(sources / "mid.c"),
                     "-o", str(ours)], tmp_path)
    assert out["returncode"] == 0 and out["observations"] > 500 and set(out["decisions"]) == {"0", "1"}
    assert ours.read_bytes() == plain.read_bytes()


@pytest.mark.parametrize("advisor", ["regalloc-evict", "regalloc-priority"])
def test_run_regalloc_advisors_answer(toolchain, sources, tmp_path, advisor):
    """Both regalloc advisors over clang and over llc.  (The compiler sends
    no default decision for them, so the host's "default" is an
    approximation: no byte identity is claimed.)"""
    ll = tmp_path / "p.ll"
    subprocess.run([toolchain.clang, "-O2", "-S", "-emit-llvm", str(sources / "pressure.c"), "-o", str(ll)],
                   check=True)
    for cmd in ([toolchain.clang, "-O2", "-c", str(sources / "pressure.c"), "-o", str(tmp_path / "c.o")],
                [toolchain.llc, "-O2", "-filetype=obj", str(ll), "-o", str(tmp_path / "l.o")]):
        out = _cli_json(["run", "--advisor", advisor, "--policy", "default", "--", *cmd], tmp_path)
        assert out["returncode"] == 0 and out["advisor"] == advisor
        assert out["observations"] >= 200 and out["contexts"] >= 2 and out["text_size"] > 0


# -- eval --------------------------------------------------------------------
def test_eval_default_policy_reproduces_plain_sizes(toolchain, tmp_path_factory, tmp_path):
    corpus = build_small_corpus(tmp_path_factory.mktemp(f"corpus{toolchain.version}"), clang=toolchain.clang)
    out = tmp_path / "e.csv"
    rc = main(["eval", "--corpus", str(corpus), "--policy", "default", "--jobs", "2", "--no-progress",
               "--clang", toolchain.clang, "--llvm-size", toolchain.llvm_size,
               "--baseline-cache", str(tmp_path / "baselines"), "--output", str(out)])
    assert rc == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)
    assert all(r["policy_text"] == r["baseline_text"] and float(r["reward"]) == 0.0 for r in rows)
    assert sum(int(r["observations"]) for r in rows) > 0


# -- the compiler's inline replay (batched search, tune's build flags) ------------
def test_replay_of_the_channels_decisions_is_the_oz_object_and_a_batch_reads_cleanly(toolchain, tmp_path_factory,
                                                                                  tmp_path):
    from mlgo_host.corpus.corpus import load_corpus
    from mlgo_host.policies import load_policy
    from mlgo_host.search.copytext import roots_of
    from mlgo_host.search.driver import BatchedSearch
    from mlgo_host.search.probe import probe_module
    from mlgo_host.search.replay import ReplayEvaluator

    corpus = build_small_corpus(tmp_path_factory.mktemp(f"replay{toolchain.version}"), clang=toolchain.clang)
    copied = 0
    for m in load_corpus(corpus).modules:
        probe = probe_module(m, load_policy("default"), clang=toolchain.clang, llvm_size=toolchain.llvm_size)
        ev = ReplayEvaluator(m, {d.site.caller for d in probe.decisions}, clang=toolchain.clang)
        ev.compile([d.site for d in probe.decisions if d.inlined], str(tmp_path / "r.o"))
        subprocess.run(m.compile_command(toolchain.clang, str(tmp_path / "p.o")), check=True)
        assert (tmp_path / "r.o").read_bytes() == (tmp_path / "p.o").read_bytes(), m.name
        if m.name == "mathx":  # its flips, batched, read as they do alone
            s = BatchedSearch(m, probe, ev, budget=20)
            s.begin()
            outs = s.measure(s.batches_of(s.candidates())[0])
            assert outs and all(o.applied for o in outs)
        # flips of one function measured in copies of it read as each does alone in place
        s = BatchedSearch(m, probe, ev, budget=20)
        s.begin()
        by_root: dict[str, list] = {}
        for c in s.candidates():
            if s.copies.root(c) is not None:
                by_root.setdefault(s.copies.root(c), []).append(c)
        flips = max(by_root.values(), key=len, default=[])[:4]
        if len(flips) >= 2:
            outs = s.measure(s.batches_of(flips)[0])
            assert s.state.flips_in_copies == len(outs) == len(flips), s.splits
            for o in outs:
                alone = s.ev.measure(s.state.set_with([o.candidate]))
                roots = roots_of(o.candidate.in_copy) if o.candidate.in_copy else tuple(o.candidate.footprint)[:1]
                back = s.copies.brought_back(o.candidate)  # (a callee inlined everywhere else: its body comes back too)
                assert (sum(alone.sizes.unpadded(r) - s.base.sizes.unpadded(r) for r in roots)
                        + (alone.sizes.unpadded(back) if back else 0)) == o.delta, (m.name, o.candidate.key)
            copied += 1
    assert copied, "no module of the small corpus had two flips of one function"


def _only_tools(bin_dir, links: dict[str, str]) -> dict:
    """An environment whose PATH holds only ``links`` (name -> real tool):
    no llvm-size of another version to fall back on."""
    bin_dir.mkdir()
    for name, tool in links.items():
        os.symlink(shutil.which(tool), bin_dir / name)
    return {**os.environ, "PATH": str(bin_dir)}


def test_the_size_tool_is_the_compilers_own(extra_toolchain, tmp_path_factory, tmp_path):
    """A machine with only clang-N and llvm-N needs no --llvm-size:
    clang-N is measured with llvm-size-N, a plain ``clang`` with the
    llvm-size beside the binary it resolves to (/usr/lib/llvm-N/bin)."""
    tc = extra_toolchain
    env = _only_tools(tmp_path / "bin", {tc.clang: tc.clang, tc.llvm_size: tc.llvm_size})
    corpus = build_small_corpus(tmp_path_factory.mktemp(f"sizes{tc.version}"), clang=tc.clang)
    p = subprocess.run([sys.executable, "-m", "mlgo_host", "eval", "--corpus", str(corpus), "--policy", "default",
                        "--jobs", "1", "--no-progress", "--clang", tc.clang, "--json",
                        "--baseline-cache", str(tmp_path / "baselines")],
                       capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert (s["ok"], s["failed"], s["policy_total"]) == (4, 0, s["baseline_total"])

    # a plain `clang` linked to the version's binary, and no llvm-size on PATH at all
    env = _only_tools(tmp_path / "plain", {"clang": tc.clang})
    src = tmp_path / "t.c"
    src.write_text(synth.inline_module(40, seed=3))
    p = subprocess.run([sys.executable, "-m", "mlgo_host", "run", "--", "clang", "-Oz", "-c", str(src), "-o",
                        str(tmp_path / "t.o")], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    table = subprocess.run([tc.llvm_size, str(tmp_path / "t.o")], capture_output=True, text=True, check=True)
    assert json.loads(p.stdout)["text_size"] == int(table.stdout.splitlines()[1].split()[0])


# -- serve + mlgo-clang --------------------------------------------------------
def test_serve_with_mlgo_clang_is_byte_identical(toolchain, tmp_path):
    srcs = write_sources(str(tmp_path / "src"), 2)
    ch = str(tmp_path / "ch")
    with ServerProc(ch, slots=1, policy="default", extra=("--compiler", toolchain.clang)) as srv:
        for s in srcs:
            r = mlgo_clang(["-Oz", "-c", s, "-o", s[:-2] + ".o"], ch, MLGO_CLANG=toolchain.clang)
            assert r.returncode == 0, r.stderr + srv.output()
        assert srv.terminate() == 0, srv.output()
    for s in srcs:
        subprocess.run([toolchain.clang, "-Oz", "-c", s, "-o", str(tmp_path / "plain.o")], check=True)
        assert open(s[:-2] + ".o", "rb").read() == (tmp_path / "plain.o").read_bytes(), s


# -- training (slow) ------------------------------------------------------------
def _train(toolchain, root, corpus, gin: str, *bindings: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "mlgo_host", "train", "--root_dir", str(root), "--corpus", str(corpus),
           "--gin_files", os.path.join(REPO, "configs", "inlining", gin), "--gin_bindings",
           f"clang_path='{toolchain.clang}'", f"llvm_size_path='{toolchain.llvm_size}'", "num_workers=2", "seed=0",
           *bindings, "--no_progress"]
    tmp = root.parent / "tmp"
    tmp.mkdir(exist_ok=True)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO,
                          env={**os.environ, "TMPDIR": str(tmp), "TF_CPP_MIN_LOG_LEVEL": "2"})


def _metadata(policy_dir) -> dict:
    return json.loads((policy_dir / "metadata.json").read_text())


@pytest.fixture(scope="module")
def train_corpora(tmp_path_factory):
    """One small generated corpus per version (built by that clang)."""
    made = {}

    def get(tc):
        if tc.version not in made:
            made[tc.version] = build_generated_corpus(tmp_path_factory.mktemp(f"tc{tc.version}"),
                                                      {"t0": 10, "t1": 25, "t2": 14, "t3": 18}, clang=tc.clang)
        return made[tc.version]

    return get


def _check_recorded_compiler(md: dict, toolchain) -> None:
    slot = toolchain.default_slot
    assert f"clang version {toolchain.version}." in md["compiler"]
    assert md["default_slot"] == slot == md["spec"]["default_slot"]
    assert md["feature_meanings"] == slots.feature_meanings(slot)
    # a fixed compiler's real block count is an input; clang-19's slot never is
    assert (slots.BUGGY_SLOT in md["input_features"]) == (slot == slots.FIXED_SLOT)


@pytest.mark.slow
def test_one_ppo_iteration(extra_toolchain, train_corpora, tmp_path):
    """(clang-19: tests/training/test_train.py)"""
    toolchain = extra_toolchain
    root = tmp_path / "ppo"
    p = _train(toolchain, root, train_corpora(toolchain), "ppo.gin", "num_iterations=1", "modules_per_iteration=3",
               "eval_every=1", "heldout_fraction=0.25")
    assert p.returncode == 0, p.stderr[-3000:]
    st = json.loads((root / "state.json").read_text())
    (it,) = st["history"]
    assert it["ok"] == 3 and it["failures"] == 0 and it["decisions"] > 0
    _check_recorded_compiler(_metadata(root / "saved_policy"), toolchain)
    out = _cli_json(["run", "--policy", str(root / "saved_policy"), "--", toolchain.clang, "-Oz", "-c",
                     str(train_corpora(toolchain).parent / "src" / "t0.c"), "-o", str(tmp_path / "t0.o")], tmp_path)
    assert out["returncode"] == 0 and out["observations"] > 0


@pytest.mark.slow
def test_behavioural_cloning(extra_toolchain, train_corpora, tmp_path):
    """(clang-19: tests/learning/test_bc.py)"""
    toolchain = extra_toolchain
    root = tmp_path / "bc"
    p = _train(toolchain, root, train_corpora(toolchain), "bc.gin", "bc.train_bc.epochs=2",
               "bc.train_bc.saved_model=False")
    assert p.returncode == 0, p.stderr[-3000:]
    (md_path,) = list(root.rglob("metadata.json"))
    _check_recorded_compiler(json.loads(md_path.read_text()), toolchain)
