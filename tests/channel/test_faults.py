"""Fault injection with fake compilers: every way a compiler can break the
stream ends in exit status 2 with a one-line message naming what and where,
within the timeout, with no FIFO, channel directory or process left."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from _channel_helpers import BUGGY_SLOT, leftovers, mlgo_host_cmd, pid_alive, run_cli

#: the session timeout of the faults that end by it (long enough for the fake to start on a loaded machine)
TIMEOUT = 3.0
#: the others end on the fault itself: their timeout is only a bound
FAULT_BOUND = 20.0
TIMED_OUT = {"truncated", "hang_before_open", "hang_after_header", "flood"}

CASES = {
    # mode: (words the message must contain)
    "garbage_header": ("header is not JSON", "byte 0"),
    "unknown_type": ("unknown type 'bfloat16'", "weights"),
    "truncated": ("timed out", "observation 1", "10 of 49 received", "context ''"),
    "missing_newline": ("observation 1: expected '\\n' after 48 tensor bytes", "0x58", "after 1 observations"),
    "death": ("ended mid-record", "observation 1", "exit status 3"),
    "hang_before_open": ("did not open", "channel.in", f"timeout {TIMEOUT:g} s"),
    "hang_after_header": ("timed out", "event line", "stream byte"),
    "flood": ("timed out", "observations decoded"),
}


def _env(tmp_path, mode):
    tdir = tmp_path / "tmp"
    tdir.mkdir(exist_ok=True)
    return tdir, {"FAKE_MODE": mode, "FAKE_PIDS": str(tmp_path / "pids"), "TMPDIR": str(tdir),
                  "MLGO_INLINE_DEFAULT_SLOT": BUGGY_SLOT}


def _pids(tmp_path):
    return [int(x) for x in (tmp_path / "pids").read_text().split()]


def test_fake_ok_control(fake_clang, tmp_path):
    """The fake without a fault: exit 0, the advice it expects (so the
    failures below come from the faults, not from the fake)."""
    tdir, env = _env(tmp_path, "ok")
    r = run_cli(["run", "--timeout", "20", "--", str(fake_clang), "-c", "x.c"], env)
    assert r.returncode == 0, r.stderr
    assert '"observations": 3' in r.stdout and '"decisions": {"0": 2, "1": 1}' in r.stdout
    assert leftovers(tdir) == []


@pytest.mark.parametrize("mode", sorted(CASES))
def test_fault(fake_clang, tmp_path, mode):
    tdir, env = _env(tmp_path, mode)
    t0 = time.monotonic()
    timeout = TIMEOUT if mode in TIMED_OUT else FAULT_BOUND
    r = run_cli(["run", "--timeout", str(timeout), "--", str(fake_clang), "-c", "x.c"],
                env, timeout=30)
    elapsed = time.monotonic() - t0
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    msg = lines[0]
    assert msg.startswith("mlgo-host run: error: ")
    for word in CASES[mode]:
        assert word in msg, (word, msg)
    assert r.stdout == ""
    assert elapsed < 25  # bounded by the timeout, never a hang (subprocess timeout is 30)
    assert leftovers(tdir) == []
    for pid in _pids(tmp_path):
        assert not pid_alive(pid), f"{mode}: process {pid} survived"


@pytest.mark.parametrize("sig,code,name", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "SIGINT")])
def test_signal_cleans_up(fake_clang, tmp_path, sig, code, name):
    tdir, env = _env(tmp_path, "hang_after_header")
    full_env = dict(os.environ, **env)
    p = subprocess.Popen(mlgo_host_cmd() + ["run", "--timeout", "60", "--", str(fake_clang), "-c", "x.c"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env)
    try:
        # wait until the session is up: the fake wrote its pids, the channel exists
        for _ in range(400):
            if (tmp_path / "pids").exists() and (tmp_path / "pids").read_text().endswith("\n") and leftovers(tdir):
                break
            time.sleep(0.025)
        else:
            pytest.fail("the session never started")
        time.sleep(0.2)  # the fake is now asleep after its header
        p.send_signal(sig)
        out, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == code, err
    assert f"interrupted by {name}" in err
    assert leftovers(tdir) == []
    for pid in _pids(tmp_path):
        assert not pid_alive(pid)


def test_missing_compiler(tmp_path):
    tdir = tmp_path / "tmp"
    tdir.mkdir()
    r = run_cli(["run", "--", str(tmp_path / "no-such-clang"), "-c", "x.c"],
                {"TMPDIR": str(tdir), "MLGO_INLINE_DEFAULT_SLOT": BUGGY_SLOT})
    assert r.returncode == 2
    assert "cannot start the compiler" in r.stderr and "no-such-clang" in r.stderr
    assert leftovers(tdir) == []
