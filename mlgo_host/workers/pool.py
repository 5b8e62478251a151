"""Worker pools: long-lived worker processes for training, tracing and evaluation, started with ``spawn``
(never ``fork``: the learner has TensorFlow threads).  The learner broadcasts state, then streams tasks with
:meth:`WorkerPool.map_unordered`, which cancels the stragglers past the deadline (:class:`EarlyExit`).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import time
import traceback
from multiprocessing.connection import Connection, wait
from typing import Any, Callable

from mlgo_host.channel.fifo import install_signal_cleanup
from mlgo_host.errors import ConfigError, WorkerPoolError
from mlgo_host.fsutil import defer_raise
from mlgo_host.progress import progress_bar
from mlgo_host.workers.tasks import Cancelled, Collection, EarlyExit, Pool, TaskOutcome, new_worker


def _worker_main(conn: Connection, factory: str, kwargs: dict) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the learner decides when to stop

    running = [False]

    def on_cancel(signum, frame):
        if running[0] and not defer_raise(Cancelled()):
            raise Cancelled()

    signal.signal(signal.SIGUSR1, on_cancel)
    # SIGTERM (a kill of the process group) unwinds: the compile dies by its cleanup, close() removes the files
    install_signal_cleanup()
    try:
        worker = new_worker(factory, kwargs)
    except BaseException:
        conn.send(("init_error", traceback.format_exc()))
        return
    try:
        # (ready inside the try: a SIGTERM right after it still closes the worker)
        conn.send(("ready", os.getpid()))
        _serve(conn, worker, running)
    finally:
        if hasattr(worker, "close"):
            worker.close()


def _serve(conn: Connection, worker, running: list[bool]) -> None:
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        if msg is None:
            break
        tag, method, args = msg
        try:
            running[0] = True
            try:
                value = getattr(worker, method)(*args)
            finally:
                running[0] = False
            reply = ("ok", tag, value)
        except Cancelled:
            reply = ("cancelled", tag, None)
        except Exception as e:  # a failed task is reported, never fatal
            reply = ("error", tag, f"{type(e).__name__}: {e}")
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            break


#: how long a closing pool waits for its workers to leave on their own (an idle one does at once)
STOP_IDLE_S = 2.0
#: how long a worker stopped by SIGTERM may take to kill its compile and remove its files
STOP_TERM_S = 10.0


class WorkerPool(Pool):
    """N worker processes, each holding ``factory(**kwargs)``."""

    backend = "local"

    def __init__(self, num_workers: int, factory: str, kwargs: dict | None = None):
        if num_workers < 1:
            raise ConfigError(f"a worker pool needs at least one worker, got {num_workers}")
        ctx = mp.get_context("spawn")
        self._conns: list[Connection] = []
        self._procs = []
        for i in range(num_workers):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker_main, args=(child, factory, kwargs or {}), daemon=True,
                            name=f"mlgo-worker-{i}")
            p.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(p)
        for i, c in enumerate(self._conns):
            tag, info = c.recv()
            if tag != "ready":
                self.close()
                err = WorkerPoolError(f"worker {i} failed to start: {info.strip().splitlines()[-1]}")
                err.details = info  # the worker's whole traceback, for debugging
                raise err

    @property
    def num_workers(self) -> int:
        return len(self._conns)

    def broadcast(self, method: str, *args) -> list[Any]:
        """``method(*args)`` on every worker; their results."""
        for c in self._conns:
            c.send((-1, method, args))
        out = []
        for c in self._conns:
            status, _, value = c.recv()
            if status != "ok":
                raise WorkerPoolError(f"a worker failed in {method}: {value}")
            out.append(value)
        return out

    def map_unordered(
        self,
        method: str,
        tasks: list[tuple],
        early_exit: EarlyExit | None = None,
        on_result: Callable[[TaskOutcome], None] | None = None,
    ) -> list[TaskOutcome]:
        """``method(*task)`` for every task, in completion order; stragglers past the early exit cancelled."""
        run = Collection(len(tasks), early_exit, on_result)
        pending = list(range(len(tasks)))[::-1]
        busy: dict[int, int] = {}  # worker index -> task index
        idle = list(range(self.num_workers))[::-1]

        def dispatch():
            while idle and pending:
                w, t = idle.pop(), pending.pop()
                busy[w] = t
                self._conns[w].send((t, method, tuple(tasks[t])))

        dispatch()
        while busy and (left := run.time_left()) > 0:
            for conn in wait([self._conns[w] for w in busy], timeout=min(left, 1.0)):
                w = self._conns.index(conn)  # type: ignore[arg-type]
                try:
                    status, tag, value = conn.recv()
                except EOFError:
                    raise WorkerPoolError(f"worker {w} died (exit code {self._procs[w].exitcode})") from None
                del busy[w]
                idle.append(w)
                run.answered(tag, status, value)
            run.check_early_exit()
            dispatch()
        for w in busy:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._procs[w].pid, signal.SIGUSR1)
        for w, t in busy.items():
            conn = self._conns[w]
            if conn.poll(30):
                status, tag, value = conn.recv()
                run.answered(tag, status, value, straggler=True)
            else:  # pragma: no cover - a worker stuck even after cancel
                run.cancelled(t, "worker did not answer the cancel")
        return run.finish(pending)

    def close(self) -> None:
        """Stop the workers: an idle one by message, one in a task by SIGTERM, which unwinds it (a SIGKILL would
        leave its compile and temp files), and by SIGKILL only after that."""
        for c in self._conns:
            with contextlib.suppress(BrokenPipeError, OSError):
                c.send(None)
        deadline = time.monotonic() + STOP_IDLE_S
        for p in self._procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        busy = [p for p in self._procs if p.is_alive()]
        for p in busy:
            p.terminate()
        for p in busy:
            p.join(timeout=STOP_TERM_S)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        for c in self._conns:
            c.close()
        self._conns = []
        self._procs = []


def make_pool(backend: str, num_workers: int, factory: str, kwargs: dict | None = None, **opts):
    """A 'local' or 'ray' pool of ``factory`` (``"module:Class"``) instances made with ``kwargs``; ``opts``
    are Ray's (``ray_address``, ...), ignored by the local pool."""
    if backend == "local":
        return WorkerPool(num_workers, factory, kwargs)
    if backend == "ray":
        from mlgo_host.workers.ray_pool import RayPool  # lazily: imports Ray

        return RayPool(num_workers, factory, kwargs, **opts)
    raise ConfigError(f"unknown worker backend {backend!r} (choose 'local' or 'ray')")


def map_with_progress(pool, method: str, tasks: list[tuple], *, desc: str, progress: bool = True,
                      early_exit: EarlyExit | None = None, leave: bool = False) -> list[TaskOutcome]:
    """``pool.map_unordered`` under a progress bar (drawn on a terminal only)."""
    with progress_bar(total=len(tasks), desc=desc, enabled=progress, leave=leave) as bar:
        return pool.map_unordered(method, tasks, early_exit, on_result=lambda r: bar.update(1))
