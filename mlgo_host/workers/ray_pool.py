"""The Ray backend of the worker pool: :class:`RayPool` has :class:`~mlgo_host.workers.pool.WorkerPool`'s
interface and semantics, with Ray actors (one CPU each) as workers; docs/ray.md says how failures are handled.
``cancel`` runs in a concurrency group of its own (``ray.cancel`` cannot interrupt a synchronous actor's task).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import functools
import logging
import logging.handlers
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from typing import Any, Callable, Sequence

import mlgo_host
from mlgo_host import procs
from mlgo_host.channel.process import killed_from_outside
from mlgo_host.errors import ConfigError, MlgoHostError, WorkerPoolError
from mlgo_host.workers.tasks import STRAGGLER, Cancelled, Collection, EarlyExit, Pool, TaskOutcome, new_worker

_CANCEL_WAIT_S = 30.0  # how long a cancelled straggler may take to answer (as the local pool)
_ASYNC_CANCEL_AFTER_S = 0.5  # still running this long after its compilers were killed: raise Cancelled in it
MAX_RETRIES = 1  # runs of a task after the first whose actor (or compiler) was killed
MAX_REPLACEMENTS = 3  # deaths of a slot's actors replaced before the slot is dropped
REPLACE_TIMEOUT_S = 120.0  # the longest wait for an actor to start or answer a broadcast


def _async_raise(thread_id: int, exc: type | None) -> None:
    """Raise ``exc`` in thread ``thread_id`` at its next bytecode (None: withdraw a pending one)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                               ctypes.py_object(exc) if exc is not None else None)


class RayWorker:
    """Holds the pool's inner worker and runs its calls, one at a time (a Ray actor: :func:`_actor_class`)."""

    def __init__(self):
        # everything the inner worker and its compilers create goes here: the watchdog knows orphans by it
        self.tmp = tempfile.mkdtemp(prefix=f"mlgo-actor-{os.getpid()}-")
        tempfile.tempdir = self.tmp
        os.environ["TMPDIR"] = self.tmp
        self._inner: Any = None
        self._lock = threading.Lock()
        self._running: str | None = None  # the tag of the call in progress
        self._thread: int | None = None  # the thread running it
        self._cancel_requested = False
        self._watchdog = _start_watchdog(self.tmp) if sys.platform.startswith("linux") else None

    def start(self, factory: str, kwargs: dict | None = None) -> int:
        if self._inner is not None:
            raise ConfigError("this Ray worker holds its inner worker already")
        self._inner = new_worker(factory, kwargs or {})
        return os.getpid()

    def call(self, method: str, tag: Any, *args) -> tuple[str, Any, Any]:
        """``(status, tag, value)`` as a local pool's worker answers, or status ``lost`` when a compiler of the
        call died of a SIGKILL not ours."""
        if self._inner is None:
            raise WorkerPoolError("this Ray worker was not started")
        with self._lock:
            self._running = str(tag)
            self._thread = threading.get_ident()
            self._cancel_requested = False
        try:
            killed_before = killed_from_outside()
            try:
                status, value = "ok", getattr(self._inner, method)(*args)
            except Exception as e:  # a failed task is reported, never fatal
                status, value = "error", f"{type(e).__name__}: {e}"
            if self._finish():
                return "cancelled", tag, None
        except Cancelled:  # in the method, or delivered just after it returned
            self._finish()
            return "cancelled", tag, None
        if killed_from_outside() != killed_before:
            # Ray kills an actor's children first: the pool checks the actor and runs the task again
            return "lost", tag, "a compiler of this task was killed from outside (SIGKILL)"
        return status, tag, value

    def _finish(self) -> bool:
        """End a call: whether it was cancelled; a pending asynchronous Cancelled is withdrawn."""
        with self._lock:
            cancelled = self._cancel_requested
            if self._thread is not None:
                _async_raise(self._thread, None)
            self._running = self._thread = None
            self._cancel_requested = False
        return cancelled

    def cancel(self, tag: Any) -> bool:
        """(control group) Cancel the call ``tag`` if running (else False): kill this actor's compilers until
        it returns and, if still busy in Python after a moment, raise Cancelled in its thread."""
        key = str(tag)
        with self._lock:
            if self._running != key:
                return False
            self._cancel_requested = True
        t0 = time.monotonic()
        injected = False
        while time.monotonic() - t0 < _CANCEL_WAIT_S:
            with self._lock:
                if self._running != key:
                    break
                if not injected and time.monotonic() - t0 > _ASYNC_CANCEL_AFTER_S and self._thread is not None:
                    _async_raise(self._thread, Cancelled)
                    injected = True
            for c in procs.children(os.getpid()):
                st = procs.stat(c)
                if st is not None and st.sid == c:  # session leader: a compiler started by CompilerProcess
                    procs.kill_group_or_process(c, st)
            time.sleep(0.02)
        return True

    def ping(self) -> dict:
        return {"pid": os.getpid(), "host": os.uname().nodename, "tmp": self.tmp,
                "tensorflow": "tensorflow" in sys.modules}

    def shutdown(self) -> bool:
        inner, self._inner = self._inner, None
        if inner is not None and hasattr(inner, "close"):
            with contextlib.suppress(Exception):  # best effort on the way out
                inner.close()
        if self._watchdog is not None:
            with contextlib.suppress(Exception):
                self._watchdog.stdin.close()  # EOF: the watchdog cleans up and exits
            self._watchdog = None
        shutil.rmtree(self.tmp, ignore_errors=True)
        return True


def _start_watchdog(tmp: str) -> subprocess.Popen:
    """Start this actor's watchdog (:mod:`.ray_watchdog`); closing its stdin tells it the actor shut down."""
    env = dict(os.environ)
    # the package may come from a path children do not inherit (a Ray runtime_env)
    here = os.path.dirname(os.path.dirname(os.path.abspath(mlgo_host.__file__)))
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlgo_host.workers.ray_watchdog", str(os.getpid()), tmp],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True, env=env)
    rc = proc.wait(30)  # the launcher exits at once; the detached watchdog keeps the pipe
    if rc != 0:
        raise WorkerPoolError(f"the Ray actor's watchdog did not start (exit status {rc}): try "
                              f"`{sys.executable} -m mlgo_host.workers.ray_watchdog` on the worker node")
    return proc


def _ray():
    try:
        import ray
    except ImportError:  # pragma: no cover - depends on the installation
        raise ConfigError("worker_backend='ray' needs Ray: pip install 'mlgo_host[ray]' "
                          "(on the learner and on every worker node)") from None
    return ray


@functools.cache
def _actor_class():
    """``RayWorker`` as a Ray actor class, ``cancel`` in its own concurrency group."""
    ray = _ray()

    @ray.remote(concurrency_groups={"control": 1})
    class RayWorkerActor(RayWorker):
        @ray.method(concurrency_group="control")
        def cancel(self, tag: Any) -> bool:
            return RayWorker.cancel(self, tag)

    return RayWorkerActor


#: the file, in the Ray session's logs directory, that gets Ray's own warnings and "ray" logger
RAY_DRIVER_LOG = "mlgo_host-driver.log"


def ensure_ray(ray_address: str | None = None) -> None:
    """Connect to ``ray_address`` (``"auto"``, ``"ray://head:10001"``) or start a local instance, unless Ray
    is initialized already; Ray's own messages go to :data:`RAY_DRIVER_LOG`, not the terminal."""
    with warnings.catch_warnings(record=True) as caught:
        ray = _ray()
        if ray.is_initialized():
            return
        _check_reachable(ray_address)
        ray_log = logging.getLogger("ray")
        held = logging.handlers.BufferingHandler(sys.maxsize)  # records kept until their file is known
        terminal = ray_log.handlers[:]
        ray_log.handlers[:] = [held]
        try:
            ctx = ray.init(address=ray_address or None, include_dashboard=False, log_to_driver=False)
        except BaseException as e:
            ray_log.handlers[:] = terminal
            if isinstance(e, ConnectionError):  # no cluster there: Ray's held records only repeat the attempts
                raise ConfigError(f"--ray-address {ray_address}: cannot join a Ray cluster there "
                                  f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
            for r in held.buffer:  # they say why Ray did not start
                ray_log.handle(r)
            raise
    path = _ray_driver_log(ctx)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s\t%(levelname)s %(filename)s:%(lineno)s -- %(message)s"))
    ray_log.handlers[:] = [handler]
    for r in held.buffer:
        handler.handle(r)
    for w in caught:
        handler.stream.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line))
    handler.flush()
    try:
        cpus = f" ({int(ray.cluster_resources().get('CPU', 0))} CPUs)"
    except Exception:  # a client connection may not tell
        cpus = ""
    address = (getattr(ctx, "address_info", None) or {}).get("address") or ray_address
    what = f"joined the cluster at {address}" if ray_address else "started a local Ray instance"
    sys.stderr.write(f"ray: {what}{cpus}; Ray's own messages: {path}\n")
    sys.stderr.flush()


def _check_reachable(ray_address: str | None, timeout: float = 5.0) -> None:
    """Refuse at once a ``host:port`` (or ``ray://host:port``) where nothing answers, or nothing speaking gRPC
    (as a Ray head does): Ray itself retries for minutes, printing a line per attempt."""
    if not ray_address or ray_address in ("auto", "local"):
        return
    host, sep, port = ray_address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"--ray-address {ray_address}: expected HOST:PORT, ray://HOST:PORT or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise ConfigError(f"--ray-address {ray_address}: nothing answers there ({e.strerror or e}); "
                          "is the cluster's head started (`ray start --head`)?") from None
    import grpc

    channel = grpc.insecure_channel(f"{host}:{port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
    except grpc.FutureTimeoutError:
        raise ConfigError(f"--ray-address {ray_address}: something answers there, but not a Ray head (no gRPC "
                          f"handshake in {timeout:g} s); is it the head's GCS port (6379) or client port "
                          "(ray://...:10001)?") from None
    finally:
        channel.close()


def _ray_driver_log(ctx) -> str:
    """:data:`RAY_DRIVER_LOG` in the session's logs directory, else (a ``ray://`` client) a temporary file."""
    session = (getattr(ctx, "address_info", None) or {}).get("session_dir")
    if session:
        path = os.path.join(session, "logs", RAY_DRIVER_LOG)
        with contextlib.suppress(OSError), open(path, "a", encoding="utf-8"):
            return path
    return os.path.join(tempfile.gettempdir(), f"mlgo_host-ray-{os.getpid()}.log")


class RayCluster:
    """The actors of one :class:`RayPool`; a dead one is replaced with the inner worker and the last broadcasts."""

    def __init__(self, num_workers: int, ray_address: str | None = None, num_cpus_per_worker: float = 1.0):
        if num_workers < 1:
            raise ConfigError("num_workers must be >= 1")
        ensure_ray(ray_address)
        self._ray = _ray()
        self._new_actor = _actor_class().options(num_cpus=num_cpus_per_worker).remote
        self._lock = threading.RLock()
        self._inner: tuple[str, dict] | None = None  # (factory, kwargs) of the inner worker
        self._replay: dict[str, tuple] = {}  # method -> broadcast refs, the latest last
        self._deaths = [0] * num_workers
        self.actors: list[Any] = [self._new_actor() for _ in range(num_workers)]
        try:
            self._ray.get([a.ping.remote() for a in self.actors], timeout=REPLACE_TIMEOUT_S)
        except Exception as e:
            self.close()
            raise WorkerPoolError(f"the Ray workers did not start: {e}") from None

    def live(self) -> list[tuple[int, Any]]:
        return [(i, a) for i, a in enumerate(self.actors) if a is not None]

    def start(self, factory: str, kwargs: dict | None) -> None:
        """The inner worker ``factory(**kwargs)`` in every actor (and replacement)."""
        with self._lock:
            self._inner = (factory, dict(kwargs or {}))
            actors = self.live()
        refs = [a.start.remote(factory, kwargs or {}) for _, a in actors]
        for (i, a), r in zip(actors, refs):
            try:
                self._ray.get(r)
            except self._ray.exceptions.RayActorError:
                self.replace(i, a)  # the replacement gets the inner worker too
            except self._ray.exceptions.RayTaskError as e:
                raise WorkerPoolError(f"the worker failed to start:\n{_cause(e)}") from None

    def remember_broadcast(self, method: str, refs: tuple) -> None:
        with self._lock:
            self._replay.pop(method, None)
            self._replay[method] = refs

    def replace(self, slot: int, dead) -> Any:
        """Replace the actor in ``slot`` if it is still ``dead``; the slot's actor (None once dropped)."""
        with self._lock:
            if self.actors[slot] is not dead:
                return self.actors[slot]
            with contextlib.suppress(Exception):
                self._ray.kill(dead, no_restart=True)
            self._deaths[slot] += 1
            if self._deaths[slot] > MAX_REPLACEMENTS:
                self.actors[slot] = None
                return None
            new = self._new_actor()
            # calls from one handle run in order: the inner worker and broadcasts come before any task
            if self._inner is not None:
                new.start.remote(*self._inner)
                for method, refs in self._replay.items():
                    new.call.remote(method, -1, *refs)
            self.actors[slot] = new
            return new

    def drop(self, slot: int, actor) -> None:
        with self._lock:
            if self.actors[slot] is actor:
                self.actors[slot] = None
        with contextlib.suppress(Exception):
            self._ray.kill(actor, no_restart=True)

    def close(self) -> None:
        with self._lock:
            actors = [a for _, a in self.live()]
            self.actors = [None] * len(self.actors)
            self._inner = None
            self._replay.clear()
        refs = [a.shutdown.remote() for a in actors]
        with contextlib.suppress(Exception):
            self._ray.wait(refs, num_returns=len(refs), timeout=15)
        for a in actors:
            with contextlib.suppress(Exception):
                self._ray.kill(a, no_restart=True)


def _cause(e: BaseException) -> BaseException:
    """The exception raised inside the actor, for a RayTaskError."""
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, BaseException) else e


class RayPool(Pool):
    backend = "ray"

    def __init__(self, num_workers: int, factory: str, kwargs: dict | None = None, ray_address: str | None = None,
                 *, num_cpus_per_worker: float = 1.0):
        self.cluster = RayCluster(num_workers, ray_address, num_cpus_per_worker)
        self._ray = _ray()
        #: tasks re-run after their actor died (cumulative)
        self.retries = 0
        self._token = uuid.uuid4().hex[:8]
        try:
            self.cluster.start(factory, kwargs)
        except BaseException:
            self.cluster.close()
            raise

    @property
    def num_workers(self) -> int:
        return len(self.cluster.live())

    def _unwrap(self, e: BaseException):
        c = _cause(e)
        if isinstance(c, MlgoHostError):
            raise c from None
        return c

    def broadcast(self, method: str, *args) -> list[Any]:
        """``method(*args)`` on every worker (arguments put in the object store once), in actor order."""
        ray = self._ray
        refs = tuple(ray.put(a) for a in args)
        self.cluster.remember_broadcast(method, refs)
        results: dict[int, Any] = {}
        todo = self.cluster.live()
        for _attempt in range(MAX_REPLACEMENTS + 2):
            calls = {a.call.remote(method, -1, *refs): (i, a) for i, a in todo}
            todo = []
            for ref, (i, a) in calls.items():
                try:
                    status, _, value = ray.get(ref, timeout=REPLACE_TIMEOUT_S)
                except ray.exceptions.GetTimeoutError:
                    self.cluster.drop(i, a)
                    continue
                except ray.exceptions.RayActorError:
                    new = self.cluster.replace(i, a)  # the replacement replays this broadcast
                    if new is not None:
                        todo.append((i, new))
                    continue
                except ray.exceptions.RayTaskError as e:
                    raise WorkerPoolError(f"worker failed in {method}: {self._unwrap(e)}") from None
                if status != "ok":
                    raise WorkerPoolError(f"worker failed in {method}: {value}")
                results[i] = value
            if not todo:
                break
        if not results:
            raise WorkerPoolError(f"no Ray worker left to run {method}")
        return [results[i] for i in sorted(results)]

    def map_unordered(
        self,
        method: str,
        tasks: Sequence[tuple],
        early_exit: EarlyExit | None = None,
        on_result: Callable[[TaskOutcome], None] | None = None,
    ) -> list[TaskOutcome]:
        """``method(*task)`` for every task, in completion order."""
        run = _MapRun(self, method, tasks, early_exit, on_result)
        run.dispatch()
        while run.running() and (left := run.time_left()) > 0:
            run.collect(min(left, 1.0))
            run.check_early_exit()
            run.dispatch()
            run.fail_if_no_worker_left()
        run.cancel_stragglers()
        return run.finish(run.pending)

    def workers_info(self) -> list[dict]:
        return self._ray.get([a.ping.remote() for _, a in self.cluster.live()])

    def close(self) -> None:
        self.cluster.close()  # (a second time: nothing left to close)


class _MapRun(Collection):
    """One :meth:`RayPool.map_unordered` call: tasks pending or running, actors idle or starting (waited for
    with a ``ping``)."""

    def __init__(self, pool: RayPool, method: str, tasks: Sequence[tuple], early: EarlyExit | None,
                 on_result: Callable[[TaskOutcome], None] | None):
        super().__init__(len(tasks), early, on_result)
        self.pool, self.cluster, self.ray = pool, pool.cluster, pool._ray
        self.method, self.tasks = method, tasks
        self.pending: collections.deque[int] = collections.deque(range(len(tasks)))
        self.attempts = [0] * len(tasks)
        self.busy: dict[Any, tuple[int, Any, int, str]] = {}  # ref -> (slot, actor, task, tag)
        # ping ref of a replacement (or of an actor whose compiler was killed) -> (slot, actor, since)
        self.starting: dict[Any, tuple[int, Any, float]] = {}
        self.idle: collections.deque[tuple[int, Any]] = collections.deque(pool.cluster.live())

    def dispatch(self) -> None:
        while self.idle and self.pending:
            slot, _ = self.idle.popleft()
            actor = self.cluster.actors[slot]  # the slot's current one: it may have been replaced meanwhile
            if actor is None:  # the slot was dropped
                continue
            t = self.pending.popleft()
            tag = f"{self.pool._token}:{t}:{self.attempts[t]}"
            ref = actor.call.remote(self.method, tag, *self.tasks[t])
            self.busy[ref] = (slot, actor, t, tag)

    def running(self) -> bool:
        """Tasks running, or pending with a replacement actor on its way."""
        return bool(self.busy or (self.pending and self.starting))

    def collect(self, timeout: float) -> None:
        """Take what is ready within ``timeout``; a replacement not up in :data:`REPLACE_TIMEOUT_S` is dropped."""
        ready, _ = self.ray.wait(list(self.busy) + list(self.starting), num_returns=1, timeout=timeout)
        for ref in ready:
            if ref in self.starting:
                self._replacement_answered(ref)
            else:
                self._task_answered(ref)
        for ref, (slot, actor, since) in list(self.starting.items()):
            if time.monotonic() - since > REPLACE_TIMEOUT_S:
                self.starting.pop(ref)
                self.cluster.drop(slot, actor)

    def _replacement_answered(self, ref) -> None:
        slot, actor, _ = self.starting.pop(ref)
        try:
            self.ray.get(ref)
            self.idle.append((slot, actor))
        except self.ray.exceptions.RayActorError:
            self._lost(slot, actor)

    def _task_answered(self, ref) -> None:
        slot, actor, t, _ = self.busy.pop(ref)
        exc = self.ray.exceptions
        try:
            status, _, value = self.ray.get(ref)
        except exc.RayActorError as e:
            self._lost(slot, actor)
            self._retry_or_fail(t, e)
            return
        except exc.RayTaskError as e:
            c = self.pool._unwrap(e)
            self.idle.append((slot, actor))
            self.emit(TaskOutcome(t, False, None, f"{type(c).__name__}: {c}"))
            return
        if status == "lost":  # its compiler was killed: the actor may be dying (answered by a ping, as a replacement)
            self.starting[actor.ping.remote()] = (slot, actor, time.monotonic())
            self._retry_or_fail(t, RuntimeError(value))
            return
        self.idle.append((slot, actor))
        self.answered(t, status, value)

    def _lost(self, slot: int, actor) -> None:
        new = self.cluster.replace(slot, actor)
        if new is not None:
            self.starting[new.ping.remote()] = (slot, new, time.monotonic())

    def _retry_or_fail(self, t: int, e: BaseException) -> None:
        """Task ``t``'s actor (or compiler) died: run it again first, or report it once out of retries."""
        if self.attempts[t] < MAX_RETRIES:
            self.attempts[t] += 1
            self.pool.retries += 1
            self.pending.appendleft(t)
        else:
            self.emit(TaskOutcome(t, False, None, f"worker died {self.attempts[t] + 1} times on this task: "
                                                  f"{str(e).splitlines()[0]}"))

    def fail_if_no_worker_left(self) -> None:
        if self.pending and not self.busy and not self.idle and not self.starting:
            raise WorkerPoolError(f"all Ray workers died; {len(self.pending)} of {len(self.tasks)} tasks not run "
                                  f"(retries so far: {self.pool.retries})")

    def cancel_stragglers(self) -> None:
        """Cancel the tasks still on an actor and report each (its result if it finished after all)."""
        ray, exc = self.ray, self.ray.exceptions
        cancels = {ref: actor.cancel.remote(tag) for ref, (slot, actor, t, tag) in self.busy.items()}
        for ref, c in cancels.items():
            try:
                running = ray.get(c, timeout=_CANCEL_WAIT_S + 5.0)
            except (exc.RayActorError, exc.RayTaskError, exc.GetTimeoutError):
                running = True
            if not running:  # still queued or just finished
                ray.cancel(ref)
        deadline = time.monotonic() + _CANCEL_WAIT_S + 5.0
        for ref, (slot, actor, t, tag) in list(self.busy.items()):
            try:
                status, _, value = ray.get(ref, timeout=max(deadline - time.monotonic(), 0.1))
                self.answered(t, status, value, straggler=True)
            except exc.GetTimeoutError:  # stuck even after cancel: replace the actor
                self.cluster.replace(slot, actor)
                self.cancelled(t, "worker did not answer the cancel (replaced)")
            except (exc.TaskCancelledError, exc.RayActorError, exc.RayTaskError):
                self.cancelled(t, STRAGGLER)
