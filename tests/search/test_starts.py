"""Threshold starts (mlgo_host.search.starts) with the real compilers: a
module whose -Oz inliner keeps a helper out of line that a higher inline
threshold inlines and folds; tune measures the thresholds, starts its search
from the smallest, and a build gets that threshold among its flags."""

from __future__ import annotations

import json
import shlex
import subprocess
import time

import pytest

from _policy_helpers import LIBSTDCXX_MODULE
from _tune_helpers import mlgo_host, read_manifest
from mlgo_host.corpus.build import build_corpus, load_compile_commands
from mlgo_host.corpus.corpus import load_corpus
from mlgo_host.measure.compile import compile_plain
from mlgo_host.measure.sizes import text_size
from mlgo_host.policies import load_policy
from mlgo_host.search.driver import search_module_batched
from mlgo_host.search.probe import probe_module
from mlgo_host.search.starts import best_start, measure_thresholds, threshold_flags, with_flags

# a helper with a constant mode at each of its three calls: -Oz keeps it out of line (174 bytes of .text
# with clang-19), inline threshold 50 inlines every call, each folds and the body goes (99 bytes)
PICK_C = r"""
static int pick(int x, int mode) {
  int s = 0;
  for (int i = 0; i < mode; i++) s += x * i + (s >> 1);
  if (mode > 3) s ^= x * 77;
  if (mode > 5) s += x / 3;
  return s + mode;
}
int a(int x) { return pick(x, 0); }
int b(int x) { return pick(x, 1); }
int c(int x) { return pick(x, 2); }
"""


def _project(root, clang: str = "clang-19", source: str = "s.c"):
    proj = root / "project"
    (proj / "src").mkdir(parents=True)
    (proj / "src" / source).write_text(PICK_C)
    cc = "c++" if source.endswith(".cpp") else "cc"
    db = [{"directory": str(proj), "file": f"src/{source}", "arguments": [cc, "-Oz", "-c", f"src/{source}", "-o", "s.o"]}]
    (proj / "compile_commands.json").write_text(json.dumps(db))
    rep = build_corpus(load_compile_commands(proj / "compile_commands.json"), root / "corpus", clang=clang, jobs=1,
                       progress=False)
    assert not rep.failures, rep.failures
    return proj, root / "corpus"


def test_the_best_start_is_the_smallest_threshold_below_Oz():
    assert best_start({50: 99, 150: 99, 450: 120}, 174) == 50  # ties: the lower threshold
    assert best_start({50: 180, 150: 174}, 174) is None  # none smaller than -Oz's own
    assert best_start({50: None, 150: 170}, 174) == 150  # a failed compile is no start
    assert best_start({50: None}, 174) is None
    assert best_start({50: 999}, 1000) == 50  # (smaller by a byte is enough)


def test_tune_starts_from_a_smaller_threshold_and_a_build_gets_it_with_its_flags(tmp_path):
    # (C++: the language whose files try the thresholds; the start policy left out, it could be smaller still)
    proj, corpus = _project(tmp_path, source="s.cpp")
    t = tmp_path / "T"
    r = mlgo_host("tune", "--corpus", str(corpus), "--output", str(t), "--compiles-per-module", "12", "--jobs", "1",
                  "--no-progress", "--start-policy", "none")
    assert r.returncode == 0, r.stderr
    m = read_manifest(t)["modules"]["s"]
    (mod,) = load_corpus(corpus).modules
    at_50 = compile_plain(mod, extra_args=threshold_flags(50)).text_size
    assert m["base_flags"] == threshold_flags(50)
    assert m["best_size"] <= at_50 < m["default_size"]
    # the flags tune prints compile the source to exactly the tuned size, the threshold among them
    pr = mlgo_host("tune", "--print-flags", str(t), str(proj / "src" / "s.cpp"))
    assert pr.returncode == 0, pr.stderr
    flags = shlex.split(pr.stdout)
    assert flags[:2] == threshold_flags(50)
    subprocess.run(["clang++-19", "-Oz", "-c", "src/s.cpp", "-o", "tuned.o", *flags], cwd=proj, check=True)
    assert text_size(proj / "tuned.o") == m["best_size"]
    # without thresholds the search starts from -Oz and a build gets no threshold
    t2 = tmp_path / "T2"
    r = mlgo_host("tune", "--corpus", str(corpus), "--output", str(t2), "--compiles-per-module", "12", "--jobs", "1",
                  "--no-progress", "--no-thresholds", "--start-policy", "none")
    assert r.returncode == 0, r.stderr
    m2 = read_manifest(t2)["modules"]["s"]
    assert m2["base_flags"] == []
    pr = mlgo_host("tune", "--print-flags", str(t2), str(proj / "src" / "s.cpp"))
    assert "-inline-threshold" not in pr.stdout


@pytest.mark.parametrize("version", [19, 22])
def test_a_start_not_searched_further_is_the_thresholds_own_object(tmp_path, version):
    """tune's starts stage alone (no flip after it): the result keeps the
    corpus module's key, its best is the threshold's plain object, and
    there is no replay: the threshold flags alone compile that object."""
    clang = f"clang-{version}"
    if subprocess.run(["which", clang], capture_output=True).returncode:
        pytest.skip(f"{clang} not installed")
    _, corpus = _project(tmp_path, clang)
    (mod,) = load_corpus(corpus).modules
    default = compile_plain(mod, clang).text_size
    policy = load_policy("default")
    probe = probe_module(mod, policy, clang=clang)
    probe_only = search_module_batched(mod, policy, {"clang": clang}, budget=probe.compiles,
                                       default_size=default)
    assert probe_only["tried"] == [] and probe_only["thresholds"] is None
    cfg = {"clang": clang, "thresholds": (50, 150, 450), "starts_only": True}
    res = search_module_batched(mod, policy, cfg, budget=probe_only["compiles"] + 5, default_size=default,
                                resume=probe_only)
    assert set(res["thresholds"]) == {50, 150, 450}
    t = best_start(res["thresholds"], default)
    assert t is not None and res["base_flags"] == threshold_flags(t)
    assert res["module_key"] == mod.key != with_flags(mod, res["base_flags"]).key
    assert res["tried"] == [] and res["inline"] is None
    assert res["best_size"] == res["thresholds"][t] == compile_plain(mod, clang, extra_args=res["base_flags"]).text_size
    # the thresholds and the second probe's channel compile (its plain compile is the threshold's)
    assert res["compiles"] == probe_only["compiles"] + 3 + 1
    # the next search goes on from it, at that threshold
    more = search_module_batched(mod, policy, {"clang": clang, "thresholds": (50, 150, 450)},
                                 budget=res["compiles"] + 6, default_size=default, resume=res)
    assert more["base_flags"] == res["base_flags"] and more["best_size"] <= res["best_size"]


def test_the_users_deadline_bounds_the_threshold_compiles(tmp_path, monkeypatch):
    """A deadline already passed: no threshold is compiled (each is no
    start); one far off: each is, as without a deadline."""
    import mlgo_host.search.starts as starts

    _, corpus = _project(tmp_path)
    (mod,) = load_corpus(corpus).modules
    timeouts = []

    real = starts.compile_with_remarks

    def counted(*args, **kw):
        timeouts.append(args[2])
        return real(*args, **kw)

    monkeypatch.setattr(starts, "compile_with_remarks", counted)
    passed = measure_thresholds(mod, (50, 150), clang="clang-19", timeout=60.0, deadline=time.time() - 1.0)
    assert passed == {50: None, 150: None} and timeouts == []
    measure_thresholds(mod, (50,), clang="clang-19", timeout=60.0, deadline=time.time() + 30.0)
    assert 0 < timeouts[0] <= 30.0  # (the compile's timeout is cut at the deadline)
    monkeypatch.undo()
    later = measure_thresholds(mod, (50, 150), clang="clang-19", timeout=60.0, deadline=time.time() + 600.0)
    assert later == measure_thresholds(mod, (50, 150), clang="clang-19", timeout=60.0)
    assert later[50] == compile_plain(mod, extra_args=threshold_flags(50)).text_size




def test_a_search_starts_from_the_shipped_policy_when_its_object_is_the_smallest(tmp_path):
    """The shipped policy's decisions are a start beside -Oz (and the
    thresholds): measured by a probe with it, taken when smaller, and the
    module never ends bigger than that start; `--start-policy none` keeps
    -Oz's start and measures no policy."""
    proj = tmp_path / "project"
    (proj / "src").mkdir(parents=True)
    (proj / "src" / "s.cpp").write_text(LIBSTDCXX_MODULE)
    db = [{"directory": str(proj), "file": "src/s.cpp",
           "arguments": ["c++", "-Oz", "-c", "src/s.cpp", "-o", "s.o"]}]
    (proj / "compile_commands.json").write_text(json.dumps(db))
    rep = build_corpus(load_compile_commands(proj / "compile_commands.json"), tmp_path / "corpus", clang="clang-19",
                       jobs=1, progress=False)
    assert not rep.failures, rep.failures
    got = {}
    for how in ("pretrained-oz", "none"):
        t = tmp_path / f"T-{how}"
        r = mlgo_host("tune", "--corpus", str(tmp_path / "corpus"), "--output", str(t), "--compiles-per-module", "8",
                      "--jobs", "1", "--no-progress", "--no-thresholds", "--start-policy", how)
        assert r.returncode == 0, r.stderr
        (got[how],) = read_manifest(t)["modules"].values()
    by_policy, by_oz = got["pretrained-oz"], got["none"]
    assert by_policy["policy_start_size"] < by_policy["default_size"] and by_policy["start"] == "policy"
    assert by_policy["policy_size"] == by_policy["policy_start_size"]  # the search's start: the policy's object
    assert by_policy["best_size"] <= by_policy["policy_start_size"]
    assert by_oz["policy_start_size"] is None and by_oz["start"] == "base"
    assert by_oz["policy_size"] == by_oz["default_size"]


def test_a_policy_start_not_searched_further_is_its_replayed_object(tmp_path):
    """tune's starts in the probe's task with the time up after them (no
    flip): the start policy's decisions are compiled by replay in that task,
    so the result is that object with its replay lines (what a build
    applies), not -Oz's.  -Oz's own size is read from the probe's plain
    compile (no compile of its own)."""
    from mlgo_host.search.worker import _shipped_policy

    proj = tmp_path / "project"
    (proj / "src").mkdir(parents=True)
    (proj / "src" / "s.cpp").write_text(LIBSTDCXX_MODULE)
    db = [{"directory": str(proj), "file": "src/s.cpp", "arguments": ["c++", "-Oz", "-c", "src/s.cpp", "-o", "s.o"]}]
    (proj / "compile_commands.json").write_text(json.dumps(db))
    rep = build_corpus(load_compile_commands(proj / "compile_commands.json"), tmp_path / "corpus", clang="clang-19",
                       jobs=1, progress=False)
    assert not rep.failures, rep.failures
    (mod,) = load_corpus(tmp_path / "corpus").modules
    cfg = {"clang": "clang-19", "starts_only": True, "start_policy": _shipped_policy("pretrained-oz")}
    res = search_module_batched(mod, load_policy("default"), cfg, budget=10, default_size=None)
    assert res["default_size"] == compile_plain(mod, "clang-19").text_size
    assert res["start"] == "policy" and res["tried"] == []
    assert res["policy_start"] < res["default_size"]
    # the probe (channel and plain compiles), the policy's channel compile and the replay of its decisions
    assert res["compiles"] == 2 + 2 and res["reference"] is not None
    assert res["best_size"] == res["replay_start_size"] < res["default_size"] and res["inline"]


def test_a_c_file_starts_from_Oz_alone(tmp_path):
    """C files try no other start (STARTS_BY_LANGUAGE): no threshold, no
    start policy is measured, though a threshold would be smaller here."""
    _, corpus = _project(tmp_path)
    t = tmp_path / "T"
    r = mlgo_host("tune", "--corpus", str(corpus), "--output", str(t), "--compiles-per-module", "8", "--jobs", "1",
                  "--no-progress")
    assert r.returncode == 0, r.stderr
    m = read_manifest(t)["modules"]["s"]
    assert m["threshold_sizes"] is None and m["policy_start_size"] is None and m["start"] == "base"
    assert m["base_flags"] == []
