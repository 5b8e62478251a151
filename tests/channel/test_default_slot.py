"""The default-decision slot's detection: how the two slots' values are read,
and every way it can fail being a clear error naming the compiler (never a
silent guess).  The detection on real compilers is in tests/test_clang_versions.py."""

from __future__ import annotations

import os
import stat

import pytest

from _channel_helpers import pid_alive, run_cli
from mlgo_host.channel import default_slot as ds
from mlgo_host.errors import CompilerError, ConfigError

FIXED_VALUES = [{ds.FIXED_SLOT: 1, ds.BUGGY_SLOT: 6}]
BUGGY_VALUES = [{ds.FIXED_SLOT: 0, ds.BUGGY_SLOT: 1}]


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(ds.ENV_OVERRIDE, raising=False)
    monkeypatch.setattr(ds, "_MEMO", {})


def _script(path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_classify_reads_either_layout():
    assert ds.classify(FIXED_VALUES) == ds.FIXED_SLOT
    assert ds.classify(BUGGY_VALUES) == ds.BUGGY_SLOT
    assert ds.classify(BUGGY_VALUES + [{ds.FIXED_SLOT: 0, ds.BUGGY_SLOT: 0}]) == ds.BUGGY_SLOT


@pytest.mark.parametrize("values,why", [
    ([], "no inlining decision"),
    ([{ds.BUGGY_SLOT: 1}], "no inlining_default"),
    ([{ds.FIXED_SLOT: 0, ds.BUGGY_SLOT: 0}], "fit neither layout"),  # no decision to tell them apart
    ([{ds.FIXED_SLOT: 1, ds.BUGGY_SLOT: 1}], "fit neither layout"),  # a decision, but no real block count
    ([{ds.FIXED_SLOT: 0, ds.BUGGY_SLOT: 7}], "fit neither layout"),
])
def test_classify_refuses_to_guess(values, why):
    with pytest.raises(ValueError, match=why):
        ds.classify(values)


def test_a_failing_detecting_compile_is_a_config_error_naming_the_compiler(tmp_path):
    fake = _script(tmp_path / "clang-broken", "echo 'error: unknown argument' >&2; exit 1")
    with pytest.raises(ConfigError, match=r"slot of .*clang-broken: the detecting compile exited 1 'error: unknown arg"):
        ds.default_slot(fake)
    assert not os.path.exists(ds._cache_file())  # nothing cached


def test_the_cli_says_so_in_one_line(tmp_path):
    fake = _script(tmp_path / "clang-broken", "exit 3")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    r = run_cli(["run", "--", fake, "-Oz", "-c", "x.c"], env)
    assert r.returncode == 2
    assert r.stderr.startswith("mlgo-host run: error: cannot determine the inliner's default-decision slot of ")
    assert "clang-broken" in r.stderr and "exited 3" in r.stderr and "Traceback" not in r.stderr


def test_the_detection_keeps_the_users_timeout(fake_clang, tmp_path):
    """A compiler that starts but never opens the channel: its first compile
    (the detecting one, then the user's) ends within `run --timeout`, not
    after the detection's own minute, saying how to skip the detection."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "TMPDIR": str(tmp_path), "FAKE_MODE": "hang_before_open",
           "FAKE_PIDS": str(tmp_path / "pids")}
    # the 5 s deadline plus start-up and clean-up, within 10 s (measured: 5.1 s): the subprocess
    # timeout is that bound
    r = run_cli(["run", "--timeout", "5", "--", str(fake_clang), "-Oz", "-c", "x.c"], env, timeout=10)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith("mlgo-host run: error: cannot determine the inliner's default-decision slot of ")
    assert "did not open" in r.stderr and "timeout 5 s" in r.stderr and f"{ds.ENV_OVERRIDE}=" in r.stderr
    assert not any(pid_alive(int(p)) for p in (tmp_path / "pids").read_text().split())


def test_opt_without_a_clang_next_to_it_needs_the_override(tmp_path, monkeypatch):
    opt = _script(tmp_path / "opt-lonely", "exit 0")
    with pytest.raises(ConfigError, match=rf"opt-lonely: no clang next to it.*{ds.ENV_OVERRIDE}"):
        ds.default_slot(opt)
    monkeypatch.setenv(ds.ENV_OVERRIDE, ds.BUGGY_SLOT)
    assert ds.default_slot(opt) == ds.BUGGY_SLOT
    monkeypatch.setenv(ds.ENV_OVERRIDE, "num_loops")
    with pytest.raises(ConfigError, match="num_loops"):
        ds.default_slot(opt)


def test_a_missing_compiler(tmp_path):
    with pytest.raises(CompilerError, match="cannot start the compiler .*no-such-clang"):
        ds.default_slot(str(tmp_path / "no-such-clang"))


def test_meanings_of_each_slot():
    assert ds.feature_meanings(ds.BUGGY_SLOT)[ds.BUGGY_SLOT] == ds.DEFAULT_DECISION
    assert ds.feature_meanings(ds.FIXED_SLOT)[ds.BUGGY_SLOT] == ds.BLOCK_COUNT
    with pytest.raises(ConfigError):
        ds.feature_meanings("num_loops")


def test_a_compiler_that_is_not_llvm_is_named_as_such(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    gcc = _script(tmp_path / "gcc", "exit 0")
    with pytest.raises(ConfigError, match=r"gcc is not clang, opt or llc: the interactive channel is LLVM's"):
        ds.default_slot(gcc)
