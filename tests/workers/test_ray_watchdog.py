"""The Ray actor's watchdog (mlgo_host.workers.ray_watchdog) without Ray: a
fake actor starts a "compiler" and the watchdog, then dies by SIGKILL; the
watchdog must kill the compiler and every process naming the actor's
directory, and remove the directory. A clean shutdown (stdin closed) does
the same."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from _wait import wait_until
from mlgo_host import procs

# the actor: a compiler-like child in its own session, then the watchdog as
# NestingWorker starts it (stdin a pipe; the launcher exits at once)
FAKE_ACTOR = r"""
import os, subprocess, sys, time
from mlgo_host.workers.ray_pool import _start_watchdog
root = sys.argv[1]
comp = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
wd = _start_watchdog(root)
print(comp.pid, flush=True)
line = sys.stdin.readline()
if line.strip() == "shutdown":
    wd.stdin.close()
time.sleep(120)
"""


@pytest.mark.parametrize("how", ["killed", "shutdown"])
def test_the_watchdog_cleans_up_after_its_actor(tmp_path, how):
    root = tmp_path / "mlgo-actor-x"
    root.mkdir()
    (root / "out.o-1234.tmp").write_bytes(b"x")
    actor = subprocess.Popen([sys.executable, "-c", FAKE_ACTOR, str(root)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    # not the actor's child, but its command line points into the actor's directory
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", str(root / "ch")],
                             start_new_session=True)
    try:
        comp = int(actor.stdout.readline())
        time.sleep(0.5)  # the watchdog polls every 50 ms: it has seen the compiler
        assert procs.alive(comp) and procs.alive(stray.pid)
        if how == "killed":
            actor.send_signal(signal.SIGKILL)
        else:
            actor.stdin.write("shutdown\n")
            actor.stdin.flush()
        assert wait_until(lambda: not procs.alive(comp)), "the compiler survived its actor"
        assert wait_until(lambda: not procs.alive(stray.pid)), "a process naming the actor's directory survived"
        assert wait_until(lambda: not root.exists()), "the actor's directory was not removed"
    finally:
        for p in (actor, stray):
            p.kill()
            p.wait()


def test_the_watchdog_refuses_bad_arguments_and_imports_no_numpy_nor_ray():
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "mlgo_host.workers.ray_watchdog", "notapid"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "usage" in r.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "mlgo_host.procs" in imported
    assert not {m for m in imported if m.split(".")[0] in ("numpy", "ray", "tensorflow")}
