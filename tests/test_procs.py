"""mlgo_host.procs: the /proc checks, on real processes."""

from __future__ import annotations

import os
import subprocess
import sys

from _wait import wait_until
from mlgo_host import procs

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_alive_sees_a_zombie_as_dead_and_refuses_non_pids():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    assert procs.alive(os.getpid())
    # exited but not reaped: a zombie, which kill(0) still finds
    assert wait_until(lambda: procs.stat(p.pid) is not None and procs.stat(p.pid).state == "Z")
    assert not procs.alive(p.pid)
    p.wait()
    assert not procs.alive(p.pid) and procs.stat(p.pid) is None
    for bad in (None, 0, -1, "123", True, 2 ** 80):
        assert not procs.alive(bad)


def test_stat_children_and_same_process():
    p = subprocess.Popen(SLEEPER, start_new_session=True)
    try:
        st = procs.stat(p.pid)
        assert st is not None and st.sid == st.pgid == p.pid and st.start > 0
        assert procs.same_process(p.pid, st)
        assert p.pid in procs.children(os.getpid())
        assert any(pid == p.pid and b"time.sleep(60)" in cmd for pid, cmd in procs.own_processes())
        assert all(pid != os.getpid() for pid, _ in procs.own_processes())
        # another process under the same pid would have another start time
        assert not procs.same_process(p.pid, st._replace(start=st.start + 1))
    finally:
        p.kill()
        p.wait()
    assert not procs.same_process(p.pid, st)
    assert procs.children(2 ** 22 + 7) == []


def test_kill_group_or_process_takes_the_whole_group():
    # a session leader with a child of its own (a compiler driver and its cc1)
    p = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                          "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                          "print(c.pid, flush=True); time.sleep(60)"],
                         stdout=subprocess.PIPE, start_new_session=True)
    kid = int(p.stdout.readline())
    assert procs.alive(kid)
    procs.kill_group_or_process(p.pid)
    p.wait(10)
    assert wait_until(lambda: not procs.alive(kid))
    procs.kill_group_or_process(p.pid)  # gone already: nothing happens


def test_current_cpu_is_one_we_may_run_on():
    assert procs.current_cpu() in os.sched_getaffinity(0)


def test_remove_temp_outputs_takes_only_this_outputs_recent_temps(tmp_path):
    out = tmp_path / "x.o"
    mine = tmp_path / "x-06a5b045.o.tmp"
    older = tmp_path / "x-11111111.o.tmp"
    other = tmp_path / "y-06a5b045.o.tmp"
    neighbour = tmp_path / "x-y-06a5b045.o.tmp"  # the temp output of a compile of x-y.o
    for p in (mine, older, other, neighbour, out):
        p.write_bytes(b"")
    started = mine.stat().st_mtime
    os.utime(older, (started - 60, started - 60))
    procs.remove_temp_outputs(str(out), started)
    assert sorted(os.listdir(tmp_path)) == ["x-11111111.o.tmp", "x-y-06a5b045.o.tmp", "x.o", "y-06a5b045.o.tmp"]
    procs.remove_temp_outputs("-", started)  # stdout: nothing to remove
    procs.remove_temp_outputs(None, started)
