"""The Ray backend of the worker pool: the same collection, on a cluster.

:class:`RayPool` has the interface and semantics of
:class:`mlgo_host.trainers.pool.WorkerPool` (``broadcast``, ``map_unordered``
with :class:`EarlyExit`, ``on_result`` and :class:`TaskOutcome`, ``close``,
context manager, ``num_workers``, ``backend``), but its workers are Ray
actors, so they can live on any machine of a Ray cluster.

Structure
---------
* A :class:`NestingWorker` actor (one per worker slot, ``num_cpus=1``) holds
  several *inner* workers keyed by experiment id -- each is ``factory(**kwargs)``
  (the same TF-free ``CollectWorker`` the local backend uses).  Every call names
  its experiment; an unknown id raises :class:`UnknownExperimentError` with the
  id and the ids the actor holds.
* A :class:`RayCluster` owns the actors and hands out one :class:`RayPool` per
  experiment (``cluster.pool("train", factory, kwargs)``); pools of one cluster
  share the same worker processes, so e.g. a held-out evaluation (or a second
  training run) uses workers that would otherwise idle while a learner trains.
  ``RayPool(n, factory, kwargs)`` alone makes a private cluster of ``n`` actors.
* ``broadcast(method, *args)`` puts each argument in the object store once and
  passes the same reference to every actor (the policy blob travels once per
  iteration, not once per module).  The last broadcast of each method is
  replayed on replacement actors.

Fault tolerance
---------------
An actor that dies (killed, OOM, node lost) makes its task fail with
``RayActorError``: the task is queued again -- at most ``max_retries`` times
(default once) -- and runs on another actor; :attr:`RayPool.retries` counts
the retries (also per call in :attr:`RayPool.last_retried`).  The dead actor is
replaced by a new one (holding every experiment and the last broadcasts); a
replacement that is not up within ``replace_timeout_s``, or a slot whose
actors keep dying, is dropped (the pool shrinks).  With no actor left the pool
raises :class:`WorkerPoolError`; it never waits forever.

Cancellation and compiler processes
-----------------------------------
``ray.cancel`` does not interrupt a running task of a synchronous actor, and a
signal cannot reach the actor's task thread.  So the actor has a second
concurrency group ("control") whose ``cancel(experiment, tag)`` marks the
running call cancelled and kills the compiler process groups the actor started
(its session-leader children) until the call returns; the call then reports
``cancelled`` like the local pool's SIGUSR1 path.  Each actor also starts a tiny
watchdog process (its own session, no Ray, no TensorFlow) that records the
actor's compiler children and, when the actor dies without cleaning up
(``ray.kill``, SIGKILL, OOM killer), kills them and every process whose command
line points into the actor's private temporary directory (channel FIFOs and
outputs live there), then removes that directory.  Without it a compiler
blocked on its channel would be orphaned, waiting or spinning forever.

Corpus access
-------------
Either every node sees the corpus at the same path (shared filesystem: tasks
carry paths only), or tasks carry the bitcode bytes (``ship_bitcode=True``,
``Module.to_task(ship_bitcode=True)``): the worker writes them into its private
directory and compiles that copy.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Callable, Sequence

from mlgo_host.errors import ConfigError, MlgoHostError, UnknownExperimentError, WorkerPoolError
from mlgo_host.trainers.pool import Cancelled, EarlyExit, TaskOutcome, _resolve

__all__ = ["NestingWorker", "RayCluster", "RayPool", "ensure_ray"]

_CANCEL_WAIT_S = 30.0  # how long a cancelled straggler may take to answer (as the local pool)
_ASYNC_CANCEL_AFTER_S = 0.5  # still running this long after its compilers were killed: raise Cancelled in it


def _async_raise(thread_id: int, exc: type | None) -> None:
    """Raise ``exc`` in the thread ``thread_id`` at its next Python bytecode
    (None: withdraw a pending one)."""
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                               ctypes.py_object(exc) if exc is not None else None)


# -- process helpers (Linux /proc) ------------------------------------------


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (all its threads)."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
        except (OSError, ValueError):
            pass
    return out


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(session id, process group id, start time) of ``pid``, None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    # fields[0] is the state (field 3); pgrp is field 5, session 6, starttime 22
    return int(fields[3]), int(fields[2]), int(fields[19])


def _kill_tree_leader(pid: int) -> None:
    st = _stat(pid)
    if st is None:
        return
    sid, pgid, _ = st
    try:
        if pgid == pid:  # a group leader (compilers run in their own session)
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_WATCHDOG = r"""
import os, select, shutil, signal, sys
actor, root = int(sys.argv[1]), sys.argv[2]
# Detach (double fork): Ray kills an actor's direct children with it, and the
# watchdog must outlive the actor to clean up after it.
if os.fork() > 0:
    os._exit(0)
def stat(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            d = f.read()
    except OSError:
        return None
    x = d[d.rindex(b")") + 2:].split()
    return int(x[2]), int(x[19])
def children(pid):
    out = []
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for t in tids:
        try:
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                out += [int(v) for v in f.read().split()]
        except (OSError, ValueError):
            pass
    return out
def kill(pid, pgid):
    try:
        if pgid == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
signal.signal(signal.SIGINT, signal.SIG_IGN)
me = os.getpid()
seen = {}
while True:
    r, _, _ = select.select([0], [], [], 0.05)
    if r and not os.read(0, 4096):
        break
    for c in children(actor):
        if c != me and c not in seen:
            s = stat(c)
            if s:
                seen[c] = s
    for c in [c for c in seen if stat(c) != seen[c]]:
        del seen[c]
for c, (pgid, start) in seen.items():
    if stat(c) == (pgid, start):
        kill(c, pgid)
uid = os.getuid()
needle = root.encode()
for name in os.listdir("/proc"):
    if not name.isdigit() or int(name) == me:
        continue
    pid = int(name)
    try:
        if os.stat("/proc/%d" % pid).st_uid != uid:
            continue
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            cmd = f.read()
    except OSError:
        continue
    if needle in cmd:
        s = stat(pid)
        if s:
            kill(pid, s[0])
shutil.rmtree(root, ignore_errors=True)
"""


# -- the nesting worker (the body of each Ray actor) --------------------------


class NestingWorker:
    """Holds several inner workers keyed by experiment id; runs one call at a
    time (``call``) and can be cancelled from the control group (``cancel``).

    Plain class: :func:`_actor_class` wraps it with ``ray.remote``.  It never
    imports TensorFlow (nor do the inner workers it is meant for)."""

    def __init__(self, watchdog: bool = True):
        # A private temporary directory for everything the inner workers and
        # their compilers create: the watchdog recognises orphans by it.
        self.tmp = tempfile.mkdtemp(prefix=f"mlgo-actor-{os.getpid()}-")
        tempfile.tempdir = self.tmp
        os.environ["TMPDIR"] = self.tmp
        self._inner: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._running: tuple[str, str] | None = None  # (experiment, tag) of the call in progress
        self._thread: int | None = None  # the thread running it
        self._cancel_requested = False
        self._watchdog: subprocess.Popen | None = None
        if watchdog and sys.platform.startswith("linux"):
            self._watchdog = subprocess.Popen(
                [sys.executable, "-c", _WATCHDOG, str(os.getpid()), self.tmp],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True)
            self._watchdog.wait(30)  # the launcher exits at once; the detached watchdog keeps the pipe

    # -- experiments
    def add(self, experiment_id: str, factory: str, kwargs: dict | None = None) -> int:
        """Create the inner worker of ``experiment_id`` (replacing none: an id
        already held is an error). Returns this actor's pid."""
        if experiment_id in self._inner:
            raise ConfigError(f"experiment id {experiment_id!r} is already held by this worker")
        self._inner[experiment_id] = _resolve(factory)(**(kwargs or {}))
        return os.getpid()

    def remove(self, experiment_id: str) -> bool:
        w = self._inner.pop(experiment_id, None)
        if w is not None and hasattr(w, "close"):
            w.close()
        return w is not None

    def experiments(self) -> list[str]:
        return sorted(self._inner)

    def _get(self, experiment_id: str):
        try:
            return self._inner[experiment_id]
        except KeyError:
            raise UnknownExperimentError(experiment_id, list(self._inner)) from None

    # -- work
    def call(self, experiment_id: str, method: str, tag: Any, *args) -> tuple[str, Any, Any]:
        """``method(*args)`` on the experiment's inner worker. Returns
        ``(status, tag, value)`` with status ``ok``, ``error`` (value: the
        message) or ``cancelled``, as the local pool's workers answer.  An
        unknown experiment id raises :class:`UnknownExperimentError`."""
        worker = self._get(experiment_id)
        try:
            return self._call(worker, experiment_id, method, tag, args)
        except Cancelled:  # delivered just after the method returned
            self._finish()
            return "cancelled", tag, None

    def _call(self, worker, experiment_id: str, method: str, tag: Any, args: tuple) -> tuple[str, Any, Any]:
        with self._lock:
            self._running = (experiment_id, str(tag))
            self._thread = threading.get_ident()
            self._cancel_requested = False
        try:
            value = getattr(worker, method)(*args)
            status = "ok"
        except Cancelled:
            status, value = "cancelled", None
        except Exception as e:  # a failed task is reported, never fatal
            status, value = "error", f"{type(e).__name__}: {e}"
        if self._finish():
            return "cancelled", tag, None
        return status, tag, value

    def _finish(self) -> bool:
        """End of a call: returns whether it was cancelled; clears a pending
        asynchronous Cancelled so it cannot fire outside the call."""
        with self._lock:
            cancelled = self._cancel_requested
            if self._thread is not None:
                _async_raise(self._thread, None)
            self._running = None
            self._thread = None
            self._cancel_requested = False
        return cancelled

    def cancel(self, experiment_id: str, tag: Any, wait_s: float = _CANCEL_WAIT_S) -> bool:
        """(control group) Cancel the call ``(experiment_id, tag)`` if it is the
        one running: kill the compilers this actor started until it returns
        and, if it is still busy in Python after a moment, raise
        :class:`Cancelled` in its thread (as SIGUSR1 does in a local worker).
        Returns False when that call is not running (finished or not started)."""
        key = (experiment_id, str(tag))
        with self._lock:
            if self._running != key:
                return False
            self._cancel_requested = True
        t0 = time.monotonic()
        injected = False
        while time.monotonic() - t0 < wait_s:
            with self._lock:
                if self._running != key:
                    break
                if not injected and time.monotonic() - t0 > _ASYNC_CANCEL_AFTER_S and self._thread is not None:
                    _async_raise(self._thread, Cancelled)
                    injected = True
            self._kill_compilers()
            time.sleep(0.02)
        return True

    def _kill_compilers(self) -> None:
        for c in _children(os.getpid()):
            st = _stat(c)
            if st is not None and st[0] == c:  # session leader: a compiler started by CompilerProcess
                _kill_tree_leader(c)

    def ping(self) -> dict:
        return {"pid": os.getpid(), "host": os.uname().nodename, "tmp": self.tmp,
                "experiments": sorted(self._inner), "tensorflow": "tensorflow" in sys.modules}

    def shutdown(self) -> bool:
        for k in list(self._inner):
            try:
                self.remove(k)
            except Exception:  # pragma: no cover - best effort on the way out
                pass
        if self._watchdog is not None:
            try:
                self._watchdog.stdin.close()  # EOF: the watchdog cleans up and exits
            except Exception:  # pragma: no cover
                pass
            self._watchdog = None
        shutil.rmtree(self.tmp, ignore_errors=True)
        return True


_ACTOR_CLS = None


def _ray():
    try:
        import ray
    except ImportError:  # pragma: no cover - depends on the installation
        raise ConfigError("worker_backend='ray' needs Ray: pip install 'mlgo_host[ray]' "
                          "(on the learner and on every worker node)") from None
    return ray


def _actor_class():
    """``NestingWorker`` as a Ray actor class: ``cancel`` in its own
    concurrency group ("control"), everything else one call at a time."""
    global _ACTOR_CLS
    if _ACTOR_CLS is None:
        ray = _ray()

        @ray.remote(concurrency_groups={"control": 1})
        class NestingWorkerActor(NestingWorker):
            @ray.method(concurrency_group="control")
            def cancel(self, experiment_id: str, tag: Any, wait_s: float = _CANCEL_WAIT_S) -> bool:
                return NestingWorker.cancel(self, experiment_id, tag, wait_s)

        _ACTOR_CLS = NestingWorkerActor
    return _ACTOR_CLS


def ensure_ray(ray_address: str | None = None, **init_kwargs) -> None:
    """Connect to ``ray_address`` (an existing cluster, e.g. ``"auto"`` or
    ``"ray://head:10001"``) or start a local instance -- unless Ray is already
    initialized in this process, which is then used as it is."""
    ray = _ray()
    if ray.is_initialized():
        return
    opts = {"include_dashboard": False, "log_to_driver": False}
    opts.update(init_kwargs)
    if ray_address:
        opts.pop("num_cpus", None)
        ray.init(address=ray_address, **opts)
    else:
        ray.init(**opts)


class RayCluster:
    """``num_workers`` nesting-worker actors shared by several experiments.

    ``pool(experiment_id, factory, kwargs)`` gives the pool of one
    experiment; all pools use the same actors."""

    def __init__(self, num_workers: int, ray_address: str | None = None, *, num_cpus_per_worker: float = 1.0,
                 max_replacements: int = 3, replace_timeout_s: float = 120.0, watchdog: bool = True,
                 ray_init_kwargs: dict | None = None):
        if num_workers < 1:
            raise ConfigError("num_workers must be >= 1")
        ensure_ray(ray_address, **(ray_init_kwargs or {}))
        self._ray = _ray()
        self.num_cpus_per_worker = num_cpus_per_worker
        self.max_replacements = max_replacements
        self.replace_timeout_s = replace_timeout_s
        self.watchdog = watchdog
        self._lock = threading.RLock()
        self._experiments: dict[str, tuple[str, dict]] = {}
        self._replay: dict[str, "collections.OrderedDict[str, tuple]"] = {}
        self.replacements = 0
        self._deaths = [0] * num_workers
        self.actors: list[Any] = [self._new_actor() for _ in range(num_workers)]
        try:
            self._ray.get([a.ping.remote() for a in self.actors], timeout=replace_timeout_s)
        except Exception as e:
            self.close()
            raise WorkerPoolError(f"the Ray workers did not start: {e}") from None

    def _new_actor(self):
        return _actor_class().options(num_cpus=self.num_cpus_per_worker).remote(self.watchdog)

    @property
    def num_workers(self) -> int:
        return sum(a is not None for a in self.actors)

    def pool(self, experiment_id: str, factory: str, kwargs: dict | None = None, **opts) -> "RayPool":
        return RayPool.shared(self, experiment_id, factory, kwargs, **opts)

    # -- experiments (all actors, including future replacements)
    def add_experiment(self, experiment_id: str, factory: str, kwargs: dict | None) -> None:
        with self._lock:
            if experiment_id in self._experiments:
                raise ConfigError(f"experiment id {experiment_id!r} is already in use on this cluster")
            self._experiments[experiment_id] = (factory, dict(kwargs or {}))
            self._replay[experiment_id] = collections.OrderedDict()
            actors = [(i, a) for i, a in enumerate(self.actors) if a is not None]
        refs = [a.add.remote(experiment_id, factory, kwargs or {}) for _, a in actors]
        errors = []
        for (i, a), r in zip(actors, refs):
            try:
                self._ray.get(r)
            except self._ray.exceptions.RayActorError:
                self.replace(i, a)  # the replacement gets the experiment too
            except self._ray.exceptions.RayTaskError as e:
                errors.append(_cause(e))
        if errors:
            self.remove_experiment(experiment_id)
            raise WorkerPoolError(f"experiment {experiment_id!r}: the worker failed to start:\n{errors[0]}")

    def remove_experiment(self, experiment_id: str) -> None:
        with self._lock:
            self._experiments.pop(experiment_id, None)
            self._replay.pop(experiment_id, None)
            actors = [a for a in self.actors if a is not None]
        refs = [a.remove.remote(experiment_id) for a in actors]
        for r in refs:
            try:
                self._ray.get(r, timeout=30)
            except Exception:
                pass

    def remember_broadcast(self, experiment_id: str, method: str, refs: tuple) -> None:
        with self._lock:
            rep = self._replay.get(experiment_id)
            if rep is not None:
                rep.pop(method, None)
                rep[method] = refs

    # -- replacement of dead actors
    def replace(self, slot: int, dead) -> Any:
        """Replace the actor in ``slot`` if it is still ``dead``; returns the
        current actor of the slot (None once the slot is dropped)."""
        with self._lock:
            if self.actors[slot] is not dead:
                return self.actors[slot]
            try:
                self._ray.kill(dead, no_restart=True)
            except Exception:
                pass
            self._deaths[slot] += 1
            if self._deaths[slot] > self.max_replacements:
                self.actors[slot] = None
                return None
            new = self._new_actor()
            # Calls from one handle run in submission order: the experiments and
            # their last broadcasts are in place before any task reaches it.
            for exp, (factory, kwargs) in self._experiments.items():
                new.add.remote(exp, factory, kwargs)
                for method, refs in self._replay[exp].items():
                    new.call.remote(exp, method, -1, *refs)
            self.actors[slot] = new
            self.replacements += 1
            return new

    def drop(self, slot: int, actor) -> None:
        with self._lock:
            if self.actors[slot] is actor:
                self.actors[slot] = None
        try:
            self._ray.kill(actor, no_restart=True)
        except Exception:
            pass

    def close(self) -> None:
        with self._lock:
            actors = [a for a in self.actors if a is not None]
            self.actors = [None] * len(self.actors)
            self._experiments.clear()
            self._replay.clear()
        refs = [a.shutdown.remote() for a in actors]
        try:
            self._ray.wait(refs, num_returns=len(refs), timeout=15)
        except Exception:
            pass
        for a in actors:
            try:
                self._ray.kill(a, no_restart=True)
            except Exception:
                pass

    def __enter__(self) -> "RayCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _cause(e: BaseException) -> BaseException:
    """The exception raised inside the actor, for a RayTaskError."""
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, BaseException) else e


class RayPool:
    """A worker pool whose workers are Ray actors (see the module docstring).

    ``RayPool(num_workers, factory, kwargs, ray_address=None)`` makes and owns
    its actors; ``RayPool.shared(cluster, experiment_id, factory, kwargs)`` (or
    ``cluster.pool(...)``) uses the actors of a :class:`RayCluster`."""

    backend = "ray"

    def __init__(self, num_workers: int, factory: str, kwargs: dict | None = None, ray_address: str | None = None,
                 *, experiment_id: str = "default", max_retries: int = 1, num_cpus_per_worker: float = 1.0,
                 replace_timeout_s: float = 120.0, watchdog: bool = True, ray_init_kwargs: dict | None = None,
                 pin_cpus: bool = False, _cluster: RayCluster | None = None):
        # pin_cpus is accepted for make_pool compatibility; Ray places the actors.
        self._owns_cluster = _cluster is None
        if _cluster is None:
            _cluster = RayCluster(num_workers, ray_address, num_cpus_per_worker=num_cpus_per_worker,
                                  replace_timeout_s=replace_timeout_s, watchdog=watchdog,
                                  ray_init_kwargs=ray_init_kwargs)
        self.cluster = _cluster
        self._ray = _ray()
        self.experiment_id = experiment_id
        self.max_retries = max_retries
        self.replace_timeout_s = replace_timeout_s
        #: tasks re-run after their actor died (cumulative); indices of the last map_unordered
        self.retries = 0
        self.last_retried: list[int] = []
        self._token = uuid.uuid4().hex[:8]
        self._closed = False
        try:
            self.cluster.add_experiment(experiment_id, factory, kwargs)
        except BaseException:
            if self._owns_cluster:
                self.cluster.close()
            raise

    @classmethod
    def shared(cls, cluster: RayCluster, experiment_id: str, factory: str, kwargs: dict | None = None,
               **opts) -> "RayPool":
        """The pool of ``experiment_id`` on the actors of ``cluster``."""
        return cls(cluster.num_workers, factory, kwargs, experiment_id=experiment_id, _cluster=cluster, **opts)

    @property
    def num_workers(self) -> int:
        return self.cluster.num_workers

    def _live(self) -> list[tuple[int, Any]]:
        return [(i, a) for i, a in enumerate(self.cluster.actors) if a is not None]

    def _unwrap(self, e: BaseException):
        c = _cause(e)
        if isinstance(c, MlgoHostError):
            raise c from None
        return c

    def broadcast(self, method: str, *args) -> list[Any]:
        """``method(*args)`` on every worker of this experiment; each argument
        goes to the object store once. Returns the results (actor order)."""
        ray = self._ray
        refs = tuple(ray.put(a) for a in args)
        self.cluster.remember_broadcast(self.experiment_id, method, refs)
        results: dict[int, Any] = {}
        todo = self._live()
        for _attempt in range(self.cluster.max_replacements + 2):
            calls = {a.call.remote(self.experiment_id, method, -1, *refs): (i, a) for i, a in todo}
            todo = []
            for ref, (i, a) in calls.items():
                try:
                    status, _, value = ray.get(ref, timeout=self.replace_timeout_s)
                except ray.exceptions.GetTimeoutError:
                    self.cluster.drop(i, a)
                    continue
                except ray.exceptions.RayActorError:
                    new = self.cluster.replace(i, a)  # the replacement replays this broadcast
                    if new is not None:
                        todo.append((i, new))
                    continue
                except ray.exceptions.RayTaskError as e:
                    c = self._unwrap(e)
                    raise WorkerPoolError(f"worker failed in {method}: {c}") from None
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
        """Run ``method(*task)`` for every task over the actors; outcomes in
        completion order.  A task whose actor dies is retried (``max_retries``
        times) on another actor; stragglers past the early-exit point are
        cancelled (their compilers killed) and reported as cancelled."""
        ray = self._ray
        early = early_exit or EarlyExit(fraction=1.0, timeout_s=float("inf"))
        pending: collections.deque[int] = collections.deque(range(len(tasks)))
        attempts = [0] * len(tasks)
        busy: dict[Any, tuple[int, Any, int, str]] = {}  # ref -> (slot, actor, task, tag)
        starting: dict[Any, tuple[int, Any, float]] = {}  # ping ref of a replacement -> (slot, actor, since)
        idle: collections.deque[tuple[int, Any]] = collections.deque(self._live())
        out: list[TaskOutcome] = []
        self.last_retried = []
        t0 = time.monotonic()
        stop_at = t0 + early.timeout_s
        need = max(1, int(early.fraction * len(tasks) + 0.999999)) if tasks else 0
        fraction_reached = False
        exp = self.experiment_id

        def emit(res: TaskOutcome) -> None:
            out.append(res)
            if on_result:
                on_result(res)

        def dispatch() -> None:
            while idle and pending:
                slot, actor = idle.popleft()
                if self.cluster.actors[slot] is not actor:  # replaced meanwhile by another pool
                    cur = self.cluster.actors[slot]
                    if cur is None:
                        continue
                    actor = cur
                t = pending.popleft()
                tag = f"{self._token}:{t}:{attempts[t]}"
                busy[actor.call.remote(exp, method, tag, *tasks[t])] = (slot, actor, t, tag)

        def lost(slot: int, actor) -> None:
            new = self.cluster.replace(slot, actor)
            if new is not None:
                starting[new.ping.remote()] = (slot, new, time.monotonic())

        dispatch()
        while busy or (pending and starting):
            now = time.monotonic()
            if now >= stop_at:
                break
            refs = list(busy) + list(starting)
            ready, _ = ray.wait(refs, num_returns=1, timeout=min(stop_at - now, 1.0))
            for ref in ready:
                if ref in starting:
                    slot, actor, _ = starting.pop(ref)
                    try:
                        ray.get(ref)
                        idle.append((slot, actor))
                    except ray.exceptions.RayActorError:
                        lost(slot, actor)
                    continue
                slot, actor, t, tag = busy.pop(ref)
                try:
                    status, _, value = ray.get(ref)
                except ray.exceptions.RayActorError as e:
                    lost(slot, actor)
                    if attempts[t] < self.max_retries:
                        attempts[t] += 1
                        self.retries += 1
                        self.last_retried.append(t)
                        pending.appendleft(t)  # first in line for the next free (other) actor
                    else:
                        emit(TaskOutcome(t, False, None, f"worker died {attempts[t] + 1} times on this task: "
                                                         f"{str(e).splitlines()[0]}"))
                    continue
                except ray.exceptions.RayTaskError as e:
                    c = self._unwrap(e)
                    idle.append((slot, actor))
                    emit(TaskOutcome(t, False, None, f"{type(c).__name__}: {c}"))
                    continue
                idle.append((slot, actor))
                emit(TaskOutcome(t, status == "ok", value if status == "ok" else None,
                                 "" if status == "ok" else str(value), cancelled=status == "cancelled"))
            for ref, (slot, actor, since) in list(starting.items()):
                if time.monotonic() - since > self.replace_timeout_s:  # replacement never came up: shrink
                    starting.pop(ref)
                    self.cluster.drop(slot, actor)
            if not fraction_reached and len(out) >= need:
                fraction_reached = True
                stop_at = early.stop_at(t0, time.monotonic())
            dispatch()
            if pending and not busy and not idle and not starting:
                raise WorkerPoolError(f"all Ray workers died; {len(pending)} of {len(tasks)} tasks not run "
                                      f"(retries so far: {self.retries})")
        # -- cancel stragglers (running or queued on an actor) and never-started tasks
        cancels = {ref: actor.cancel.remote(exp, tag) for ref, (slot, actor, t, tag) in busy.items()}
        for ref, c in cancels.items():
            try:
                running = ray.get(c, timeout=_CANCEL_WAIT_S + 5.0)
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError, ray.exceptions.GetTimeoutError):
                running = True
            if not running:  # still queued (behind another experiment's call) or just finished
                ray.cancel(ref)
        deadline = time.monotonic() + _CANCEL_WAIT_S + 5.0
        for ref, (slot, actor, t, tag) in list(busy.items()):
            try:
                status, _, value = ray.get(ref, timeout=max(deadline - time.monotonic(), 0.1))
                ok = status == "ok"
                res = TaskOutcome(t, ok, value if ok else None,
                                  "" if ok else "cancelled: straggler past the collection deadline",
                                  cancelled=not ok)
            except ray.exceptions.GetTimeoutError:  # stuck even after cancel: replace the actor
                self.cluster.replace(slot, actor)
                res = TaskOutcome(t, False, None, "worker did not answer the cancel (replaced)", cancelled=True)
            except (ray.exceptions.TaskCancelledError, ray.exceptions.RayActorError, ray.exceptions.RayTaskError):
                res = TaskOutcome(t, False, None, "cancelled: straggler past the collection deadline",
                                  cancelled=True)
            emit(res)
        for t in pending:
            emit(TaskOutcome(t, False, None, "cancelled: not started before the collection deadline",
                             cancelled=True))
        return out

    def workers_info(self) -> list[dict]:
        """``ping`` of every actor: pid, host, private tmp dir, experiments, whether TF is loaded."""
        return self._ray.get([a.ping.remote() for _, a in self._live()])

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._owns_cluster:
            self.cluster.close()
        else:
            self.cluster.remove_experiment(self.experiment_id)

    def __enter__(self) -> "RayPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
