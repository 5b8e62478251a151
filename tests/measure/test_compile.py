"""llvm-size text sizes, the reward, the baseline cache and compile_module,
with the real clang-19 and llvm-size-19."""

from __future__ import annotations

import dataclasses
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from _corpus_helpers import CLANG, build_small_corpus
from mlgo_host.corpus.corpus import load_corpus
from mlgo_host.errors import CompilerError, ConfigError
from mlgo_host.measure.compile import BaselineCache, baseline_size, compile_module, compile_plain
from mlgo_host.measure.reward import MovingAverageBaseline, reward
from mlgo_host.measure.sizes import text_size
from mlgo_host.measure.sizes import llvm_tool_candidates
from mlgo_host.policies import load_policy


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return load_corpus(build_small_corpus(tmp_path_factory.mktemp("small")), strict=True)


@pytest.fixture()
def private_tmp(tmp_path, monkeypatch):
    """Route tempfile to a private directory to see what is left behind."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_reward_formula():
    assert reward(100, 100) == 0.0
    assert reward(90, 100) == pytest.approx(1 - 90.01 / 100.01)
    assert reward(110, 100) < 0 < reward(50, 100)
    assert reward(0, 0) == 0.0


def test_text_size_counts_code_and_readonly_data(tmp_path):
    def obj(name: str, code: str) -> Path:
        src = tmp_path / f"{name}.c"
        src.write_text(code)
        out = tmp_path / f"{name}.o"
        subprocess.run([CLANG, "-Oz", "-c", str(src), "-o", str(out)], check=True)
        return out

    small = text_size(obj("small", "int f(int x) { return x + 1; }\n"))
    big = text_size(obj("big", "const char table[5000] = {1};\nint f(int x) { return table[x] + 1; }\n"))
    assert small > 0 and big >= small + 5000
    # The same number llvm-size prints in its Berkeley table.
    out = subprocess.run(["llvm-size-19", str(tmp_path / "big.o")], capture_output=True, text=True).stdout
    assert int(out.splitlines()[1].split()[0]) == big


def test_text_size_errors(tmp_path):
    junk = tmp_path / "junk.o"
    junk.write_bytes(b"not an object")
    with pytest.raises(CompilerError, match="llvm-size failed on .*junk.o"):
        text_size(junk)
    with pytest.raises(ConfigError, match="llvm-size not found"):
        text_size(junk, llvm_size=str(tmp_path / "no-such-llvm-size"))


def test_baseline_is_cached_on_disk_and_reused(corpus, tmp_path):
    log = tmp_path / "calls.log"
    clang = _script(tmp_path / "clang-counting", f'case "$1" in --version) ;; *) echo x >> {log};; esac\n'
                                                   f'exec {CLANG} "$@"\n')
    m = corpus["mathx"]
    cache = tmp_path / "baselines"
    first = baseline_size(m, clang=clang, cache_dir=cache)
    assert first == compile_plain(m, clang=CLANG).text_size
    n = len(log.read_text().splitlines())
    assert baseline_size(m, clang=clang, cache_dir=cache) == first  # a new process would read the same file
    assert BaselineCache(cache).get(m, clang) == first
    assert len(log.read_text().splitlines()) == n
    files = list(cache.rglob("*"))
    assert [f.suffix for f in files if f.is_file()] == [".json"] and not list(cache.rglob("*.tmp"))
    # Another command or other bitcode is another key.
    other = dataclasses.replace(m, cmd=m.cmd + ("-mllvm", "-inline-threshold=0"))
    assert BaselineCache(cache).get(other, clang) is None
    assert BaselineCache.key(other, clang) != BaselineCache.key(m, clang)
    assert BaselineCache.key(corpus["strs"], clang) != BaselineCache.key(m, clang)


def test_default_policy_reproduces_the_plain_compile(corpus, private_tmp):
    for name in ("mathx", "strs", "shapes"):
        m = corpus[name]
        res = compile_module(m, load_policy("default"), clang=CLANG)
        assert res.ok, res.reason
        assert res.observations > 0
        assert res.text_size == compile_plain(m, clang=CLANG).text_size
    assert list(private_tmp.iterdir()) == []


def test_never_inline_changes_the_size_and_record_gives_the_episode(corpus, private_tmp):
    m = corpus["mathx"]
    base = compile_plain(m, clang=CLANG).text_size
    res = compile_module(m, load_policy("never"), clang=CLANG, record=True)
    assert res.ok and res.text_size > base and reward(res.text_size, base) < 0
    assert res.episode is not None and res.episode.n == res.observations > 0
    assert set(res.decisions) == {"0"}
    assert list(private_tmp.iterdir()) == []


def test_a_policy_with_parts_per_language_answers_a_module_with_its_languages_part(corpus):
    from mlgo_host.policies.outline import ByLanguage

    m = corpus["mathx"]
    assert m.language == "C"
    by_c = compile_module(m, ByLanguage(load_policy("never"), {"C": load_policy("default")}), clang=CLANG)
    by_base = compile_module(m, ByLanguage(load_policy("never"), {"C++": load_policy("default")}), clang=CLANG)
    assert by_c.text_size == compile_plain(m, clang=CLANG).text_size and set(by_base.decisions) == {"0"}


def test_failures_are_results_with_a_reason(corpus, tmp_path, private_tmp, monkeypatch):
    # The fake compilers never reach the channel: skip the default-slot detection.
    monkeypatch.setenv("MLGO_INLINE_DEFAULT_SLOT", "callee_basic_block_count")
    m = corpus["mathx"]
    failing = _script(tmp_path / "clang-fails", f'case "$1" in --version) exec {CLANG} --version;; esac\n'
                                                'echo "error: unsupported target" >&2; exit 3\n')
    res = compile_module(m, load_policy("default"), clang=failing)
    assert res.status == "failed" and res.text_size is None
    assert "status 3" in res.reason and "unsupported target" in res.reason
    crashing = _script(tmp_path / "clang-crashes", 'kill -SEGV $$\n')
    res = compile_module(m, load_policy("default"), clang=crashing)
    assert res.status == "failed" and res.text_size is None and res.reason
    hanging = _script(tmp_path / "clang-hangs", "exec sleep 30\n")
    res = compile_module(m, load_policy("default"), clang=hanging, timeout=1.0)
    assert res.status == "failed" and "ChannelTimeout" in res.reason
    garbage = dataclasses.replace(m, bc_path=tmp_path / "garbage.bc")
    garbage.bc_path.write_bytes(b"BC\xc0\xde garbage")
    res = compile_module(garbage, load_policy("default"), clang=CLANG)
    assert res.status == "failed" and "status 1" in res.reason
    with pytest.raises(CompilerError, match="default compile failed"):
        baseline_size(garbage, clang=CLANG, cache_dir=tmp_path / "baselines")
    broken = dataclasses.replace(m, error="missing bitcode x.bc")
    assert compile_module(broken, load_policy("default")).reason == "missing bitcode x.bc"
    assert list(private_tmp.iterdir()) == []


def test_moving_average_baseline():
    ma = MovingAverageBaseline(decay=0.8)
    assert ma.baseline("m", 100) == 100
    r = ma.reward("m", 90, 100)  # against the default first
    assert r == pytest.approx(reward(90, 100))
    assert ma.baseline("m", 100) == pytest.approx(0.8 * 100 + 0.2 * 90)
    ma.reward("m", 80, 100)
    assert ma.baseline("m", 100) == pytest.approx(0.8 * 98 + 0.2 * 80)
    assert MovingAverageBaseline.from_state(ma.state()) == ma
    with pytest.raises(ConfigError):
        MovingAverageBaseline(decay=1.5)


def test_the_size_tool_candidates_follow_the_compiler(tmp_path):
    # a versioned driver: its version's llvm-size first; a script without a
    # version and without an llvm-size beside it: llvm-size on PATH
    assert llvm_tool_candidates("clang-22")[0].endswith("llvm-size-22")
    assert "llvm-size-22" in llvm_tool_candidates("clang++-22")
    script = _script(tmp_path / "cc", "exit 0\n")
    assert llvm_tool_candidates(script) == [str(tmp_path / "llvm-size"), "llvm-size"]
