"""The long-running host behind ``mlgo-clang``: N slots served concurrently, one thread each
(files in :mod:`mlgo_host.serve.slots`)::

    fresh FIFOs ch.in/ch.out  ->  write "ready" = generation
    wait for {"op":"start","gen":G} on ctl      (the client took the slot)
    open the channel, serve_channel(...)        (the policy answers; the open gives up when the compiler ends)
    close + remove the FIFOs, wait for {"op":"done"} (the compiler's exit status)
    hand the record to the recorder thread      (llvm-size, stats line, episode)

Every wait polls with a deadline and the compiler's and client's liveness; a session the host side
gives up on ends as :meth:`Slot.end_session` says (its client falls back to a plain compile).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import shutil
import signal
import sys
import threading
import time
import uuid

from mlgo_host import procs
from mlgo_host.channel.advisors import get_advisor
from mlgo_host.channel.problems import get_problem, ready_advisor
from mlgo_host.channel.fifo import Channel
from mlgo_host.channel.session import serve_channel
from mlgo_host.collected import save_episode
from mlgo_host.languages import command_language
from mlgo_host.episode import EpisodeRecorder
from mlgo_host.errors import ConfigError, MlgoHostError
from mlgo_host.policies import check_meanings, load_policy
from mlgo_host.serve import slots as S
from mlgo_host.serve.guard import object_text_size
from mlgo_host.serve.trust import untrusted, untrusted_tune_dir

#: the longest back-off between tries to open a slot's channel (the compiler waits in open() meanwhile)
OPEN_MAX_DELAY_S = 0.001
#: the stats fields a compile's request (or a client's report of a compile by flags) names
COMPILE_FIELDS = ("build", "output", "source", "cwd", "compiler", "client_pid")
#: what a guarding client reports in its "done" message
GUARD_FIELDS = ("guard", "guard_policy_text", "guard_default_text", "guard_s", "guard_reason")


class Ctl:
    """A slot's control FIFO, read end (and a write end of ours: no EOF when clients close theirs)."""

    def __init__(self, path: str):
        self.path = path
        S.unlink_quiet(path)
        os.mkfifo(path, 0o600)
        self.rfd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self.keep = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self.buf = b""
        self.poller = select.poll()
        self.poller.register(self.rfd, select.POLLIN)

    def messages(self, op: str, gen: str, timeout: float = 0.0) -> list[dict]:
        """The messages ``{"op": op, "gen": gen, ...}`` available now (waiting up to ``timeout`` s for
        one); the others, and lines that are no JSON object (a confused writer), are dropped."""
        if timeout > 0 and b"\n" not in self.buf:
            self.poller.poll(timeout * 1000.0)
        with contextlib.suppress(BlockingIOError):
            while data := os.read(self.rfd, 65536):
                self.buf += data
                if len(data) < 65536:
                    break
        *lines, self.buf = self.buf.split(b"\n")
        msgs = [S.parse_json(line) for line in lines]
        return [m for m in msgs if isinstance(m, dict) and m.get("op") == op and m.get("gen") == gen]

    def close(self) -> None:
        for fd in (self.rfd, self.keep):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.rfd = self.keep = -1
        S.unlink_quiet(self.path)


class Slot(threading.Thread):
    def __init__(self, server: "Server", k: int):
        super().__init__(name=f"slot-{k}", daemon=True)
        self.server = server
        self.k = k
        self.dir = S.slot_dir(server.root, k)
        self.base = S.channel_base(server.root, k)
        self.n = 0
        self.gen: str | None = None
        self.busy = False  # a compile is in flight
        self.abort = threading.Event()
        self.started = threading.Event()  # first generation offered
        self.policy = None
        self.tuned = None  # TunedPolicies with serve --replay T
        self.chan = None
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.dir, 0o700)  # mlgo-clang refuses a slot others can write to
        # the lock file first, so a client never sees a slot without one
        os.close(os.open(os.path.join(self.dir, S.LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
        self.ctl = Ctl(os.path.join(self.dir, S.CTL))

    def _p(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def end_session(self, gen: str | None = None) -> None:
        """Tell the client of generation ``gen`` (default: the current one) to fall back, then kill its
        compilers (the marker first: the client looks right after its compiler died)."""
        gen = gen or self.gen
        if gen:
            with contextlib.suppress(OSError):
                S.write_atomic(self._p(S.ABORTED), gen.encode())
        self.kill_compilers()

    def kill_compilers(self) -> None:
        """SIGKILL our processes with an argument ``...=BASE`` of this slot's channel (the session's compilers)."""
        arg_end = b"=" + self.base.encode() + b"\0"
        for pid, cmd in procs.own_processes():
            if arg_end in cmd + b"\0":
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def run(self) -> None:
        srv = self.server
        try:
            self.policy = srv.make_policy(self.k)
            if srv.tuned_dir is not None:
                from mlgo_host.search.tunedir import TunedPolicies

                self.tuned = TunedPolicies(srv.tuned_dir, self.policy, seed=srv.seed + self.k, greedy=not srv.sample)
            if (cpu := srv.pin_cpu(self.k)) is not None:
                os.sched_setaffinity(0, {cpu})  # this thread only (Linux)
            while not srv.stopping.is_set():
                self.n += 1
                gen = self.gen = f"{srv.id}:{self.k}:{self.n}"
                self.chan = Channel(directory=self.dir, name=S.CHANNEL_NAME)
                S.write_atomic(self._p(S.READY), gen.encode())
                self.started.set()
                if not self._wait_start(gen):
                    break
                self.busy = True
                try:
                    self._session(gen)
                except Exception as e:  # a bug of ours: never take the server down
                    srv.log(f"slot {self.k}: internal error in generation {gen}: {e!r}")
                    self.end_session(gen)
                finally:
                    self.busy = False
                    self._close_chan()
        except Exception as e:
            srv.log(f"slot {self.k}: stopped by an internal error: {e!r}")
        finally:
            self.started.set()
            S.unlink_quiet(self._p(S.READY))
            self._close_chan()

    def _close_chan(self) -> None:
        if self.chan is not None:
            self.chan.close()
            self.chan = None

    def _wait_start(self, gen: str) -> bool:
        """Whether generation ``gen``'s client sent "start" (False: the server is stopping)."""
        ready = self._p(S.READY)
        last_check = time.monotonic()
        while not self.server.stopping.is_set():
            if self.ctl.messages("start", gen, 0.25):
                return True
            if time.monotonic() - last_check > 1.0:
                last_check = time.monotonic()
                # a client that took "ready" and died before "start": re-offer the slot once it is free
                fd = None if os.path.exists(ready) else S.try_lock(self._p(S.LOCK))
                if fd is not None:
                    try:
                        if self.ctl.messages("start", gen):
                            return True
                        S.write_atomic(ready, gen.encode())
                    finally:
                        S.unlock(fd)
        S.unlink_quiet(ready)
        return False

    def _session(self, gen: str) -> None:
        """Serve the compile of generation ``gen`` (its client sent "start") and record it."""
        t_start = time.time()
        req = S.read_json(self._p(S.REQUEST)) or {}
        if req.get("gen") != gen:
            req = {"gen": gen}
        done: list[dict] = []

        def poll_done(timeout: float = 0.0) -> None:
            done.extend(self.ctl.messages("done", gen, timeout))

        def alive() -> bool:
            if self.abort.is_set():
                return False
            poll_done()
            return not done and procs.alive(req.get("compiler_pid"))

        deadline = time.monotonic() + self.server.timeout
        policy, tuned = self._policy_for(req)
        tally, opened, error, session_s = self._answer_channel(req, policy, alive, deadline)
        if error is not None or self.abort.is_set():
            # the host side gave up: its compiler may spin or block forever
            error = error or "server shutting down"
            self.end_session(gen)
            self.server.log(f"slot {self.k}: session {gen} aborted: {error}")
        self._close_chan()  # FIFOs removed: the next generation gets fresh ones
        error = self._await_done(gen, req.get("client_pid"), done, poll_done, error)
        status = _status(error, done, opened)
        if status == "client_died":
            self.kill_compilers()
            procs.remove_temp_outputs(req.get("output"), t_start)
        self._hand_record(gen, req, t_start, status, done, tally, session_s, error, policy, tuned)

    def _answer_channel(self, req: dict, policy, alive, deadline: float):
        """(tally or None, whether it opened, the host-side error or None, seconds it was open)."""
        srv = self.server
        tally = error = None
        opened = False
        try:
            advisor = srv.make_advisor(req.get("compiler") or srv.compiler, deadline - time.monotonic())
            opened = self.chan.open(alive, deadline, max_delay=OPEN_MAX_DELAY_S)
            t_open = time.monotonic()
            if opened:
                tally = serve_channel(self.chan, advisor, policy, deadline=deadline, alive=alive,
                                      recorder=EpisodeRecorder() if srv.collect_dir is not None else None)
        except (MlgoHostError, OSError, ValueError) as e:
            error = f"{type(e).__name__}: {e}"
        return tally, opened, error, time.monotonic() - t_open if opened else 0.0

    def _await_done(self, gen: str, client_pid, done: list[dict], poll_done, error: str | None) -> str | None:
        """Wait for the client's "done" (into ``done``) as long as it lives: its compiler finishes
        codegen after the channel closed. A shutdown meanwhile aborts the session (the compiler is
        killed, so the client reports at once). Returns the session's error (None: not aborted)."""
        abort_seen = None
        while not done:
            poll_done(0.25)
            if done or not procs.alive(client_pid):
                poll_done()
                break
            if self.abort.is_set():
                if abort_seen is None:
                    abort_seen = time.monotonic()
                    error = error or "server shutting down"
                    self.end_session(gen)
                elif time.monotonic() - abort_seen > 10:
                    break
        return error

    def _hand_record(self, gen: str, req: dict, t_start: float, status: str, done: list[dict], tally,
                     session_s: float, error: str | None, policy, tuned) -> None:
        """The session's stats line (and episode) to the recorder thread."""
        end = done[0] if done else {}
        rec = self.server.base_record(
            req, time=round(t_start, 3), slot=self.k, gen=gen, status=status, returncode=end.get("returncode"),
            observations=tally.observations if tally else 0, contexts=tally.contexts if tally else 0,
            decisions=tally.decisions if tally else {},
            duration_s=round(float(end.get("wall_s", 0.0)), 4) if done else round(time.time() - t_start, 4),
            session_s=round(session_s, 4), error=error,
        )
        guard = end.get("guard")
        if isinstance(guard, dict):
            rec.update((k, guard[k]) for k in GUARD_FIELDS if k in guard)
        if self.tuned is not None:
            rec.update(self.tuned.outcome(policy, tuned))
        elif tally is not None and hasattr(policy, "report"):  # a replay file as the policy: forced, applied, stale
            rec["replay"] = policy.report()
        self.server.records.put((rec, tally.episode if tally is not None else None))

    def _policy_for(self, req: dict):
        """(policy, tuned module or None) of a compile, in the compile's language."""
        policy, tuned = self.policy, None
        if self.tuned is not None:
            try:
                policy, tuned = self.tuned.for_compile(req.get("argv") or [], req.get("cwd") or "/",
                                                       req.get("source") or "", req.get("output") or "")
            except (MlgoHostError, OSError) as e:
                self.server.log(f"slot {self.k}: {req.get('output')}: tuned replay unusable, served by the policy: {e}")
        if policy is not None:  # (as ready_and_run does for the compiles it starts)
            policy = policy.for_language(command_language(req.get("argv") or [], req.get("source") or ""))
        return policy, tuned


def _status(error: str | None, done: list[dict], opened: bool) -> str:
    if error is not None:
        return "aborted"
    if not done:
        return "client_died"
    if done[0].get("returncode") != 0:
        return "compile_error"
    if not opened:
        return "no_channel"
    return "ok"


#: files a slot keeps open (its control FIFO's two ends) and what a served compile opens beside them
FILES_PER_SLOT = 6


def max_slots() -> int:
    """The most slots the open-file limit leaves room for (the slots' FIFOs, a session's files each)."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return max(1, (soft - 64) // FILES_PER_SLOT) if soft != resource.RLIM_INFINITY else 1 << 20


class Server:
    def __init__(self, root: str, slots: int = 2, policy: str = "default", advisor: str = "inline",
                 stats_path: str | None = None, collect_dir: str | None = None, timeout: float = 600.0,
                 grace: float = 10.0, seed: int = 0, sample: bool = False, compiler: str | None = None,
                 verbose: bool = False, pin: bool = False, guard: bool = False, replay_dir: str | None = None):
        if slots < 1:
            raise ConfigError(f"--slots must be at least 1, got {slots}")
        if slots > max_slots():
            raise ConfigError(f"--slots {slots}: more slots than this process may open files for "
                              f"(at most {max_slots()} under its open-file limit)")
        get_problem(advisor)  # an unknown one: ConfigError
        self.root = os.path.abspath(root)
        self.nslots = slots
        self.policy_name = policy
        self.advisor_name = advisor
        self.stats_path = os.path.abspath(stats_path) if stats_path else None
        self.collect_dir = os.path.abspath(collect_dir) if collect_dir else None
        self.timeout = timeout
        self.grace = grace
        self.seed = seed
        self.sample = sample or collect_dir is not None
        self.compiler = compiler or os.environ.get("MLGO_CLANG") or "clang-19"
        self.verbose = verbose
        self.pin = pin
        self.guard = guard
        self.replay_dir = os.path.abspath(replay_dir) if replay_dir else None
        #: clients report the compiles they make with a tune directory's flags (no slot) to be recorded
        self.reports = bool(self.stats_path or verbose)
        self._check_trusted()
        self.tuned_dir = None
        self.id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.stopping = threading.Event()
        self.signalled: int | None = None  # the stop signal received (see install_signals)
        self.slots: list[Slot] = []
        #: off the slots' critical path: llvm-size, the episode file, one stats line (one O_APPEND write)
        self.records: queue.Queue = queue.Queue()
        self.recorder = threading.Thread(target=self._record_loop, name="recorder", daemon=True)
        self._lock_fd: int | None = None
        self._slot_lock = threading.Lock()

    def _check_trusted(self) -> None:
        """ConfigError unless --channels (when it exists) and --replay are the user's own: every client
        of the build trusts them."""
        if why := untrusted(self.root):
            raise ConfigError(f"--channels: {why}")
        if self.replay_dir and (why := untrusted_tune_dir(self.replay_dir)):
            raise ConfigError(f"--replay: {why}")

    def make_policy(self, k: int):
        return load_policy(self.policy_name, seed=self.seed + k, greedy=not self.sample)

    def make_advisor(self, compiler: str, timeout: float):
        """The session's advisor; the first one of ``compiler`` detects what its problem needs (the
        inliner's default slot) within ``timeout``, one detection at a time (then cached)."""
        with self._slot_lock:
            return ready_advisor(self.advisor_name, compiler, timeout)

    def pin_cpu(self, k: int) -> int | None:
        """With --pin: slot ``k``'s CPU, shared with its compilers (no cross-CPU wake-ups)."""
        if not self.pin:
            return None
        cpus = sorted(os.sched_getaffinity(0))
        return cpus[k % len(cpus)]

    def _warn_unusable_replays(self) -> None:
        """One line per tuned module whose replay file cannot be applied: its compiles are served by the
        policy (each client says so too), not failed by clang."""
        from mlgo_host.search.tunedir import UnusableReplay

        for name in self.tuned_dir.modules:
            try:
                self.tuned_dir.flags_for(name)
            except UnusableReplay as e:
                self.log(f"warning: --replay: {e}; its compiles are served by the policy")

    def log(self, msg: str) -> None:
        sys.stderr.write(f"mlgo-host serve: {msg}\n")
        sys.stderr.flush()

    def _record_loop(self) -> None:
        while (item := self.records.get()) is not None:
            rec, episode = item
            try:
                self._record(rec, episode)
            except Exception as e:  # never lose the server over one record
                self.log(f"recorder: {rec.get('output')}: {e!r}")

    def _record(self, rec: dict, episode) -> None:
        out = rec.get("output")
        if rec["status"] == "ok" and out and os.path.exists(out):
            try:
                rec["text_size"] = object_text_size(out, rec.get("compiler") or self.compiler)
            except Exception as e:  # still write the line
                rec["error"] = f"llvm-size failed: {e!r}"
        if episode is not None and self.collect_dir and rec["status"] == "ok" and episode.n > 0:
            try:
                rec["episode"] = save_episode(self.collect_dir, rec, episode)
            except OSError as e:
                rec["error"] = f"episode not saved: {e}"
        if self.stats_path:
            with open(self.stats_path, "ab") as f:  # created by start(); one write of the whole line
                f.write((json.dumps(rec, sort_keys=True) + "\n").encode())
        if self.verbose:
            where = f"slot {rec['slot']}" if rec.get("slot") is not None else f"by {rec.get('by')}"
            self.log(f"{where}: {rec['status']} {out} obs={rec['observations']} "
                     f"text={rec['text_size']} {rec['duration_s']}s")

    def collect_reports(self) -> None:
        """Record the compiles clients made with a tune directory's flags (``DIR/reports``)."""
        d = os.path.join(self.root, S.REPORTS)
        try:
            names = sorted(os.listdir(d))
        except OSError:
            return
        for fn in names:
            if not fn.endswith(".json"):  # a report being written (write_atomic's temp file)
                continue
            p = os.path.join(d, fn)
            doc = S.read_json(p)
            S.unlink_quiet(p)
            if isinstance(doc, dict):
                self.records.put((self.flags_record(doc), None))

    def base_record(self, doc: dict, **fields) -> dict:
        """A stats line: ``doc``'s COMPILE_FIELDS (a request or a report), this server's and ``fields``."""
        return dict({k: doc.get(k) for k in COMPILE_FIELDS}, server=self.id, advisor=self.advisor_name,
                    policy=self.policy_name, text_size=None, **fields)

    def flags_record(self, doc: dict) -> dict:
        """The stats line of a compile a client made with a tune directory's flags (no channel)."""
        rc = doc.get("returncode")
        return self.base_record(
            doc, time=doc.get("time"), slot=None, gen=None, by="flags", status="ok" if rc == 0 else "compile_error",
            returncode=rc, observations=0, contexts=0, decisions={}, duration_s=doc.get("wall_s"), session_s=0.0,
            error=None, tuned="stale" if doc.get("changed") else "tuned", tuned_module=doc.get("module"),
            tuned_applied=None, tuned_default_text=doc.get("default_size"), tuned_best_text=doc.get("best_size"),
            tune_dir=doc.get("tune_dir"),
        )

    def start(self) -> None:
        try:
            os.makedirs(os.path.dirname(self.root), exist_ok=True)
            os.mkdir(self.root, 0o700)
        except FileExistsError:
            pass
        except OSError as e:
            raise ConfigError(f"--channels: cannot create {self.root}: {e.strerror}") from None
        self._check_trusted()  # again: it may have appeared since __init__
        try:
            self._lock_fd = S.lock_server(self.root, 5.0)  # clients test the lock for microseconds
        except OSError as e:
            raise ConfigError(f"--channels: cannot lock {os.path.join(self.root, S.SERVER_LOCK)}: {e.strerror}") from None
        if self._lock_fd is None:
            info = S.read_json(os.path.join(self.root, S.SERVER_JSON)) or {}
            raise ConfigError(f"another server (pid {info.get('pid', '?')}) already serves {self.root}")
        try:
            self.clean_stale()
            # fail early on a bad policy or compiler, before any client comes
            pol = self.make_policy(0)
            if self.replay_dir:
                from mlgo_host.search.tunedir import TunedDir

                self.tuned_dir = TunedDir(self.replay_dir)
                if self.advisor_name != "inline":
                    raise ConfigError(f"--replay {self.replay_dir}: tuned replays are inlining decisions, "
                                      f"not {self.advisor_name}")
                self._warn_unusable_replays()
            if self.collect_dir and not getattr(pol, "stochastic", False):
                self.log(f"--collect with the deterministic policy {self.policy_name!r}: episodes carry "
                         "log-probability 0 (usable for behavioural cloning, not for PPO)")
            flags = get_advisor(self.advisor_name).flags(S.BASE_PLACEHOLDER, "clang")
            adv = self.make_advisor(self.compiler, self.timeout)  # its slot detected at start, within one session's timeout
            # a policy input this compiler cannot supply: one error now, not one per compile of the build
            check_meanings(pol, getattr(adv, "default_slot", None), self.advisor_name)
            if self.collect_dir:
                try:
                    os.makedirs(self.collect_dir, exist_ok=True)
                except OSError as e:
                    raise ConfigError(f"--collect: cannot make the directory {self.collect_dir}: "
                                      f"{e.strerror}") from None
            if self.stats_path:
                # there from the start: a build whose compiles all bypass the slots still has a stats file
                try:
                    os.makedirs(os.path.dirname(self.stats_path), exist_ok=True)
                    os.close(os.open(self.stats_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644))
                except OSError as e:
                    raise ConfigError(f"--stats: cannot write {self.stats_path}: {e.strerror}") from None
            if self.reports:
                os.makedirs(os.path.join(self.root, S.REPORTS), 0o700, exist_ok=True)
            self.recorder.start()
            for k in range(self.nslots):
                self.slots.append(Slot(self, k))
            for s in self.slots:
                s.start()
            for s in self.slots:  # server.json appears once every slot is offered
                s.started.wait(30)
                if not s.is_alive() and not self.stopping.is_set():
                    raise ConfigError(f"slot {s.k} failed to start (see the messages above)")
            self.heartbeat()
            S.write_atomic(os.path.join(self.root, S.SERVER_JSON), json.dumps({
                "id": self.id, "pid": os.getpid(), "slots": self.nslots, "advisor": self.advisor_name,
                "policy": self.policy_name, "flags": flags, "started": time.time(),
                "pin": {str(s.k): self.pin_cpu(s.k) for s in self.slots} if self.pin else None,
                "guard": self.guard, "replay": self.replay_dir, "reports": self.reports,
            }).encode())
        except BaseException:
            self.shutdown()
            raise

    def clean_stale(self) -> None:
        """Remove what a killed server left (slots, server.json, heartbeat, temp files); lock held."""
        for e in sorted(os.listdir(self.root)):
            p = os.path.join(self.root, e)
            if (e.startswith(S.SLOT_PREFIX) or e == S.REPORTS) and os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            elif e in (S.SERVER_JSON, S.HEARTBEAT) or e.endswith(".tmp"):
                S.unlink_quiet(p)

    def heartbeat(self) -> None:
        p = os.path.join(self.root, S.HEARTBEAT)
        try:
            os.utime(p)
        except FileNotFoundError:
            os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))

    def install_signals(self) -> None:
        """SIGTERM/SIGINT/SIGHUP stop the server cleanly (main thread only). The handler only records
        the signal: ``Event.set`` takes a lock that the interrupted main thread may be holding inside
        ``Event.wait``, and would then wait for itself forever."""
        def on_signal(signum, frame):
            self.signalled = signum

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, on_signal)

    def serve_forever(self) -> int:
        next_beat = time.monotonic()
        while self.signalled is None and not self.stopping.is_set():
            time.sleep(0.1)
            if time.monotonic() < next_beat:
                continue
            next_beat = time.monotonic() + 1.0
            self.heartbeat()
            self.collect_reports()
            for i, s in enumerate(self.slots):
                if not s.is_alive() and not self.stopping.is_set():
                    self.log(f"slot {s.k} died; restarting it")
                    s.ctl.close()
                    shutil.rmtree(s.dir, ignore_errors=True)
                    self.slots[i] = Slot(self, s.k)
                    self.slots[i].start()
        self.shutdown()
        return 0

    def shutdown(self) -> None:
        """No new compiles, ``grace`` s for those in flight, then abort them and remove everything."""
        self.stopping.set()
        sj = os.path.join(self.root, S.SERVER_JSON)
        info = S.read_json(sj)
        if isinstance(info, dict) and info.get("id") == self.id and any(s.busy for s in self.slots):
            # new compiles go plain; those in flight keep being served
            S.write_atomic(sj, json.dumps(dict(info, stopping=True)).encode())
        else:
            S.unlink_quiet(sj)
        end = time.monotonic() + self.grace
        while any(s.busy for s in self.slots) and time.monotonic() < end:
            time.sleep(0.05)
            self.heartbeat()
        for s in self.slots:
            if s.busy:
                s.abort.set()
                s.end_session()
        for s in self.slots:
            if s.is_alive():
                s.join(timeout=15)
        self.collect_reports()  # those that came in since the last second
        if self.recorder.is_alive():
            self.records.put(None)
            self.recorder.join(timeout=60)
        for s in self.slots:
            s.ctl.close()
            s._close_chan()
            shutil.rmtree(s.dir, ignore_errors=True)
        if (S.read_json(sj) or {}).get("id") == self.id:
            S.unlink_quiet(sj)
        S.unlink_quiet(os.path.join(self.root, S.HEARTBEAT))
        if self._lock_fd is not None:
            self.clean_stale()  # temp files of writes cut short
            # removed while still held: a starting server checks that the file it locked is still there
            S.unlink_quiet(os.path.join(self.root, S.SERVER_LOCK))
            S.unlock(self._lock_fd)
            self._lock_fd = None
