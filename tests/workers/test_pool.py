import os
import signal
import time

import pytest

from mlgo_host.errors import ConfigError, WorkerPoolError
from mlgo_host.workers.pool import EarlyExit, WorkerPool, make_pool

FACTORY = "_toy_worker:ToyWorker"


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool(2, FACTORY, {"scale": 3})
    yield p
    p.close()


def test_broadcast_reaches_every_long_lived_worker(pool):
    pids = pool.broadcast("set_policy", {"w": 1})
    assert len(set(pids)) == 2 and os.getpid() not in pids
    out = pool.map_unordered("work", [(i,) for i in range(6)])
    assert sorted(o.value["x"] for o in out) == [0, 3, 6, 9, 12, 15]
    assert all(o.value["policy"] == {"w": 1} for o in out)
    # the same processes serve the next iteration (workers are reused)
    assert {o.value["pid"] for o in out} <= set(pids)
    assert not any(o.value["tf"] for o in out)


def test_a_failing_task_is_reported_not_fatal(pool):
    out = pool.map_unordered("work", [(1,), (-5,), (2,)])
    bad = [o for o in out if not o.ok]
    assert len(bad) == 1 and "negative input -5" in bad[0].error and not bad[0].cancelled
    assert sorted(o.value["x"] for o in out if o.ok) == [3, 6]


def test_stragglers_are_cancelled_after_the_early_exit_point(pool):
    tasks = [(1, 0.0), (2, 0.0), (3, 0.0), (4, 30.0)]
    early = EarlyExit(fraction=0.75, grace_s=0.5, grace_factor=10.0, timeout_s=60.0)
    out = pool.map_unordered("work", tasks, early)
    assert len(out) == 4
    straggler = [o for o in out if o.index == 3][0]
    assert straggler.cancelled and not straggler.ok
    assert sorted(o.value["x"] for o in out if o.ok) == [3, 6, 9]
    # the worker that was cancelled still serves
    again = pool.map_unordered("work", [(5,), (6,)])
    assert sorted(o.value["x"] for o in again) == [15, 18]


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ConfigError, match="unknown worker backend"):
        make_pool("carrier-pigeon", 1, FACTORY)


def test_worker_that_cannot_start_is_reported():
    with pytest.raises(WorkerPoolError, match="failed to start: AttributeError") as e:
        WorkerPool(1, "_toy_worker:NoSuchClass")
    assert "\n" not in str(e.value) and "Traceback" in e.value.details


@pytest.mark.parametrize("busy", [False, True])
def test_a_worker_sent_sigterm_unwinds_and_closes(tmp_path, busy):
    # (a user's kill of tune's process group: the worker's close() removes its temp files)
    marker = tmp_path / "closed"
    p = WorkerPool(1, FACTORY, {"closed": str(marker)})
    try:
        proc = p._procs[0]
        if busy:
            p._conns[0].send((0, "work", (1, 30.0)))
            time.sleep(0.5)
        os.kill(proc.pid, signal.SIGTERM)
        proc.join(10)
        assert not proc.is_alive() and proc.exitcode == 128 + signal.SIGTERM
        assert marker.read_text() == "closed\n"
    finally:
        p.close()


def test_a_pool_closed_while_a_task_runs_unwinds_the_worker(tmp_path):
    # (tune interrupted mid-search: SIGKILL would leave the worker's compile running and its temp files behind)
    marker = tmp_path / "closed"
    p = WorkerPool(1, FACTORY, {"closed": str(marker)})
    proc = p._procs[0]
    p._conns[0].send((0, "work", (1, 60.0)))
    time.sleep(0.5)
    p.close()
    assert not proc.is_alive() and proc.exitcode == 128 + signal.SIGTERM  # unwound, not killed
    assert marker.read_text() == "closed\n"
