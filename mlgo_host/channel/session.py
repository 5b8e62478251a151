"""One compile served over the interactive channel.

:func:`serve_channel` is the hot loop (decode, decide, validate, answer) over
an opened :class:`~mlgo_host.channel.fifo.Channel`; :func:`run_session`
starts a compiler on a fresh channel, serves it and supervises it.  Every
exit path kills the compiler's process group on host-side failure and removes
the FIFOs, the channel directory and the compiler's temp outputs.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import threading
import tempfile
import time
from typing import TYPE_CHECKING, Any, Callable, Protocol

from mlgo_host.channel import codec
from mlgo_host.channel.advisors import Advisor, InlineAdvisor, get_advisor
from mlgo_host.channel.codec import _OBS_PREFIX, Context, Decoder, Header, Observation
from mlgo_host.channel.fifo import Channel
from mlgo_host.channel.process import CompilerProcess, output_of
from mlgo_host.errors import AdviceError, ChannelTimeout, CompilerError, ConfigError, MlgoHostError, ProtocolError

if TYPE_CHECKING:  # pragma: no cover
    # not imported at run time: `mlgo-host run --policy default` starts without numpy
    from mlgo_host.policies.base import Policy


class Recorder(Protocol):
    """What a session records its decisions into (structural: the channel
    floor does not import the episode floor above it;
    :class:`mlgo_host.episode.EpisodeRecorder` is the usual one)."""

    def add(self, obs: Observation, action: Any, logp: float) -> None: ...

    def finish(self, header: Header) -> Any: ...


@dataclasses.dataclass
class SessionResult:
    advisor: str
    returncode: int
    observations: int
    contexts: int
    decisions: dict[str, int]
    wall_s: float
    stderr_tail: str = ""
    header: Header | None = None
    #: what the session's ``recorder`` made of its decisions (``recorder.finish(header)``)
    episode: Any = None
    output: str | None = None
    #: CPU seconds (user+system) of the compiler process, from wait4
    compiler_cpu_s: float | None = None
    #: CPU seconds of the host thread serving the channel (first byte to end of stream)
    serve_cpu_s: float | None = None

    def summary(self) -> dict[str, Any]:
        return {
            "advisor": self.advisor, "observations": self.observations, "contexts": self.contexts,
            "decisions": self.decisions, "returncode": self.returncode, "output": self.output,
            "wall_s": round(self.wall_s, 4),
            "compiler_cpu_s": None if self.compiler_cpu_s is None else round(self.compiler_cpu_s, 4),
            "serve_cpu_s": None if self.serve_cpu_s is None else round(self.serve_cpu_s, 4),
        }


@dataclasses.dataclass
class ServeStats:
    header: Header | None = None
    observations: int = 0
    contexts: int = 0
    decisions: dict = dataclasses.field(default_factory=dict)
    #: what the session's ``recorder`` made of its decisions (``recorder.finish(header)``)
    episode: Any = None
    #: CPU seconds of the serving thread from the first byte to the end of the stream
    serve_cpu_s: float = 0.0


class TrainingLogWriter:
    """Writes the session in clang's training-log format (the advice taken
    appended as the last feature), atomically: to ``path.tmp``, then renamed
    on :meth:`commit`."""

    def __init__(self, path: str):
        self.path = path
        self._tmp = path + f".{os.getpid()}.tmp"
        self._f = open(self._tmp, "wb", buffering=1 << 16)
        #: append already encoded bytes (the session's fast path writes the
        #: received event line and tensors, then the advice and "\n")
        self.write = self._f.write
        self._enc: Callable[[Any], bytes] | None = None

    def header(self, header: Header) -> None:
        self._f.write(codec.encode_header(header.as_training_log()))
        self._enc = codec.AdviceEncoder(header.advice).encode  # type: ignore[arg-type]

    def context(self, name: str) -> None:
        self._f.write(codec.encode_context(name))

    def observation(self, obs: Observation, advice_bytes: bytes) -> None:
        self._f.write(codec.encode_observation(obs.index, obs.raw + advice_bytes))

    def commit(self) -> None:
        self._f.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        try:
            self._f.close()
        finally:
            try:
                os.unlink(self._tmp)
            except FileNotFoundError:
                pass


_ZERO8 = bytes(8)


class _Watchdog:
    """Enforces the deadline while the session loop sits in a blocking
    ``read``: at the deadline it sets :attr:`fired` and writes one byte into
    the channel's ``.out`` FIFO, which wakes the reader; the loop then sees
    ``fired`` and raises :class:`ChannelTimeout`. Costs nothing per decision
    (the thread sleeps on an Event)."""

    def __init__(self, deadline: float, out_path: str, in_path: str | None = None):
        self.deadline = deadline
        self.out_path = out_path
        self.in_path = in_path
        self.fired = False
        self._ev = threading.Event()
        self._th = threading.Thread(target=self._run, name="mlgo-channel-watchdog", daemon=True)
        self._th.start()

    def _run(self) -> None:
        while not self._ev.wait(max(self.deadline - time.monotonic(), 0.0)):
            if time.monotonic() >= self.deadline:
                break
        else:
            return
        self.fired = True
        try:  # wake a reader blocked on .out
            fd = os.open(self.out_path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                os.write(fd, b"\0")
            finally:
                os.close(fd)
        except OSError:
            pass
        if not self.in_path:
            return
        # Unblock a session loop stuck writing to a full .in (a compiler that
        # stopped reading advice): drain it until the loop cancels us.
        try:
            fd = os.open(self.in_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        try:
            while True:
                try:
                    while os.read(fd, 1 << 16):
                        pass
                except (BlockingIOError, OSError):
                    pass
                if self._ev.wait(0.05):
                    return
        finally:
            os.close(fd)

    def cancel(self) -> None:
        self._ev.set()
        self._th.join()


def serve_channel(
    chan: Channel,
    advisor: Advisor,
    policy: Policy | None,
    *,
    deadline: float,
    alive: Callable[[], bool],
    recorder: Recorder | None = None,
    log: TrainingLogWriter | None = None,
    count_decisions: bool = True,
) -> ServeStats:
    """Serve one opened channel until the compiler closes it.

    ``policy`` None answers every decision with the advisor's default (the
    compiler's own heuristic, as the ``default`` policy does).

    Raises :class:`ProtocolError` on malformed bytes, :class:`ChannelTimeout`
    at the deadline, :class:`AdviceError` on illegal advice (never sent),
    :class:`CompilerError` when the compiler goes away mid-observation.

    Hot loop: one blocking ``read`` (normally one whole observation, framed
    by :meth:`Decoder.frame_one` without copying it into the decoder), the
    policy, the advisor's check, one ``write`` of the advice bytes (memoized
    per value for discrete advice). Any other chunking goes through
    :meth:`Decoder.feed`. The first bytes are awaited with ``poll`` (a FIFO
    whose writer has not connected yet reads as end-of-file); after that a
    watchdog thread enforces the deadline, so no timer is armed per decision.

    Default fast path: when the answer is the advisor's default and that
    default is an int64 flag of the observation (the inliner), the advice is
    one of two byte strings, each checked once with the advisor's
    :meth:`~Advisor.validate` when the header arrives, and picked by looking
    at the flag's 8 bytes in the received chunk: no :class:`Observation`
    object, no policy call, in a loop of its own with the framing test
    inlined. Its cost is mostly cache misses (the compiler runs between two
    decisions), so it touches as little as it can.
    """
    dec = Decoder()
    stats = ServeStats()
    rec = recorder
    first_chunk = chan.reader(alive, lambda: deadline, lambda: f"{dec.waiting_for} ({dec.where})")
    rfd, wfd = chan.rfd, chan.wfd
    read, write = os.read, os.write
    frame_one = dec.frame_one
    log_write = log.write if log is not None else None
    # bound when the header arrives
    hdr: Header | None = None
    ctx = ""
    act: Callable[[Observation], Any] | None = None
    act_logp: Callable[[Observation], tuple[Any, float]] | None = None
    validate = advisor.validate
    encode: Callable[[Any], bytes] | None = None
    cache: dict | None = None  # advice -> its bytes (discrete scalar advice)
    counts: dict = {}
    count = False
    flag = -1  # default fast path: offset of the default flag from the event line's '\n'
    yes_b = no_b = yes_nl = no_nl = b""
    n_flag = n_yes = 0
    n = 0
    wd = None
    base = dec.frame_base

    def decide(obs: Observation) -> bytes:
        """The advice bytes for one observation: policy, check, encoding."""
        if rec is not None:
            advice, logp = act_logp(obs)  # type: ignore[misc]
            rec.add(obs, advice, logp)
        else:
            advice = act(obs)  # type: ignore[misc]
        validate(obs, advice)
        if cache is not None:
            b = cache.get(advice)
            if b is None:
                b = encode(advice)  # type: ignore[misc]
                if len(cache) < 256:
                    cache[advice] = b
        else:
            b = encode(advice)  # type: ignore[misc]
        if count:
            counts[advice] = counts.get(advice, 0) + 1
        return b

    def broken(index: int) -> CompilerError:
        return CompilerError(f"the compiler closed the channel before reading the advice of observation {index} "
                             f"({dec.where})")

    data = first_chunk()
    cpu0 = time.thread_time()
    try:
        if data:
            fl = fcntl.fcntl(rfd, fcntl.F_GETFL)
            fcntl.fcntl(rfd, fcntl.F_SETFL, fl & ~os.O_NONBLOCK)
            wd = _Watchdog(deadline, chan.out_path, chan.in_path)
            rbuf = bytearray(65536)  # the flag loop reads into this one buffer
            rv, rmv = [rbuf], memoryview(rbuf)
            readv = os.readv
        while data:
            if flag >= 0:
                # Default-flag path: a loop of its own, as small as it gets
                # (every bytecode and cache line it touches is cold again after
                # the compiler ran), while each chunk is one whole canonical
                # observation -- Decoder.frame_one's test, inlined; the decoder
                # is told how far it got when the loop ends. It reads into one
                # preallocated buffer (no 64 KiB allocation per read).
                k = fb = 0
                cur, m = data, len(data)
                while True:
                    nl = cur.find(10, 0, m)
                    if not (m == base + nl and 16 < nl < 34 and cur[m - 1] == 10 and cur[nl - 1] == 125
                            and cur.startswith(_OBS_PREFIX) and cur[15 : nl - 1].isdigit()
                            and (cur[15] != 48 or nl == 17)):
                        break
                    p = nl + flag
                    if cur[p : p + 8] != _ZERO8:
                        b = yes_b
                        n_yes += 1
                    else:
                        b = no_b
                    try:
                        write(wfd, b)
                    except BrokenPipeError:
                        dec.skip(fb + m, k + 1)
                        raise broken(int(cur[15 : nl - 1])) from None
                    if log_write is not None:
                        # the log's record: this event line and tensors, then the advice
                        log_write(cur[: m - 1] + (yes_nl if b is yes_b else no_nl))
                    k += 1
                    fb += m
                    m = readv(rfd, rv)
                    cur = rbuf
                    if wd.fired:  # type: ignore[union-attr]
                        break
                data = cur if cur is not rbuf else bytes(rmv[:m])
                if k:
                    dec.skip(fb, k)
                    n += k
                    n_flag += k
                if wd.fired:  # type: ignore[union-attr]
                    raise ChannelTimeout(f"timed out waiting for {dec.waiting_for} from the compiler ({dec.where})")
                if not data:
                    break
            nl = frame_one(data)
            if nl >= 0:  # exactly one whole observation
                b = decide(Observation(int(data[15 : nl - 1]), ctx, data[nl + 1 : -1], hdr))  # type: ignore[arg-type]
                try:
                    write(wfd, b)
                except BrokenPipeError:
                    raise broken(int(data[15 : nl - 1])) from None
                if log_write is not None:
                    log_write(data[:-1] + b + b"\n")
                n += 1
            else:
                for r in dec.feed(data):
                    if type(r) is Observation:
                        b = decide(r)  # type: ignore[arg-type]
                        try:
                            write(wfd, b)
                        except BrokenPipeError:
                            raise broken(r.index) from None  # type: ignore[union-attr]
                        if log is not None:
                            log.observation(r, b)  # type: ignore[arg-type]
                        n += 1
                    elif type(r) is Context:
                        stats.contexts += 1
                        if log is not None:
                            log.context(r.name)  # type: ignore[union-attr]
                    elif type(r) is Header:
                        hdr = r  # type: ignore[assignment]
                        advisor.bind(hdr)  # type: ignore[arg-type]
                        if policy is None:
                            act = advisor.default_advice
                            act_logp = lambda obs: (act(obs), 0.0)  # noqa: E731
                        else:
                            policy.bind(hdr, advisor)  # type: ignore[arg-type]
                            act, act_logp = policy.act, policy.act_logp
                        encode = codec.AdviceEncoder(hdr.advice).encode  # type: ignore[union-attr]
                        discrete = advisor.num_actions(hdr) > 0  # type: ignore[arg-type]
                        count = count_decisions and discrete
                        # discrete advice is a small int: its bytes are memoized
                        cache = {} if discrete and hdr.advice.size == 1 else None  # type: ignore[union-attr]
                        off = advisor.default_flag_offset()
                        if rec is None and off is not None and act == advisor.default_advice:
                            # both possible answers, checked once here
                            zero = Observation(-1, "", bytes(hdr.observation_nbytes), hdr)  # type: ignore[union-attr]
                            validate(zero, 1)
                            validate(zero, 0)
                            flag = 1 + off
                            yes_b, no_b = encode(1), encode(0)
                            yes_nl, no_nl = yes_b + b"\n", no_b + b"\n"
                        stats.header = hdr
                        if log is not None:
                            log.header(hdr)  # type: ignore[arg-type]
                    else:
                        raise ProtocolError(f"unexpected {type(r).__name__} record in an interactive session",
                                            offset=dec.offset, context=dec.context)
                ctx = dec.context or ""
                base = dec.frame_base
            data = read(rfd, 65536)
            if wd is not None and wd.fired:
                raise ChannelTimeout(f"timed out waiting for {dec.waiting_for} from the compiler ({dec.where})")
    finally:
        if wd is not None:
            wd.cancel()
    stats.serve_cpu_s = time.thread_time() - cpu0
    stats.observations = n
    try:
        dec.close()
    except ProtocolError as e:
        raise CompilerError(f"the compiler's stream ended mid-record: {e}") from None
    if n_flag and count:
        if n_yes:
            counts[1] = counts.get(1, 0) + n_yes
        if n_flag - n_yes:
            counts[0] = counts.get(0, 0) + n_flag - n_yes
    stats.decisions = {str(k): v for k, v in sorted(counts.items(), key=lambda kv: kv[0])}
    if rec is not None and stats.header is not None:
        stats.episode = rec.finish(stats.header)
    return stats


def current_cpu() -> int:
    """The CPU this process last ran on (from /proc; 0 when unknown)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[36])
    except (OSError, ValueError, IndexError):
        return 0


def run_session(
    cmd: list[str],
    advisor: Advisor | str,
    policy: Policy | None,
    *,
    timeout: float = 300.0,
    log_path: str | None = None,
    recorder: Recorder | None = None,
    cwd: str | None = None,
    env: dict | None = None,
    tmpdir: str | None = None,
    pin_cpu: int | None = None,
) -> SessionResult:
    """Run ``cmd`` (the advisor's flags appended) and serve its channel
    (``policy`` None: the advisor's default answers, see :func:`serve_channel`).

    Host-side failures raise :class:`MlgoHostError` subclasses after the
    compiler's process group was killed (and its temp outputs removed); a
    compiler that exits non-zero on its own returns a result with that code.
    ``pin_cpu``: run this thread and the compiler on that one CPU for the
    session (the synchronous ping-pong is much cheaper without cross-CPU
    wake-ups); the thread's affinity is restored afterwards. -1 = the CPU
    this process is running on.
    """
    adv = get_advisor(advisor)
    if not cmd:
        raise CompilerError("empty compiler command")
    if isinstance(adv, InlineAdvisor) and adv.default_slot is None:
        from mlgo_host.channel.default_probe import default_slot

        adv.set_default_slot(default_slot(cmd[0]))
    t0 = time.monotonic()
    deadline = t0 + timeout
    old_affinity = None
    if pin_cpu is not None:
        cpu = current_cpu() if pin_cpu < 0 else pin_cpu
        try:
            old_affinity = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {cpu})  # the compiler inherits it
        except OSError as e:
            old_affinity = None
            raise ConfigError(f"cannot pin to CPU {cpu}: {e.strerror}") from None
    chan = None
    log = None
    proc = None
    try:
        chan = Channel(parent=tmpdir)
        argv = list(cmd) + adv.flags(chan.base, cmd[0])
        proc = CompilerProcess(argv, os.path.join(chan.dir, "compiler.log"), cwd=cwd, env=env)
        log = TrainingLogWriter(log_path) if log_path else None
        try:
            opened = chan.open(proc.alive, deadline)
            stats = serve_channel(chan, adv, policy, deadline=deadline, alive=proc.alive, recorder=recorder, log=log) \
                if opened else ServeStats()
            chan.close_fds()
            rc = proc.wait(deadline - time.monotonic())
            if rc is None:
                raise ChannelTimeout(f"the compiler did not exit within the {timeout:g} s timeout after the channel closed")
        except MlgoHostError as e:
            if isinstance(e, CompilerError):
                # the stream broke because the compiler is exiting: get its status
                proc.wait(min(2.0, max(deadline - time.monotonic(), 0.0)))
            proc.kill()
            if isinstance(e, ChannelTimeout):
                e.args = (f"{e} [timeout {timeout:g} s; compiler killed]",)
            if isinstance(e, CompilerError) and e.returncode is None:
                e.returncode = proc.returncode
                e.args = (f"{e} (compiler exit status {proc.returncode})",)
            tail = proc.stderr_tail()
            if tail.strip() and "compiler stderr" not in str(e):
                e.args = (str(e) + "; compiler stderr ends with: " + tail.strip().replace("\n", " | ")[-400:],)
            raise
        except BaseException:
            proc.kill()
            raise
        if log is not None:
            log.commit()
            log = None
        return SessionResult(
            advisor=adv.name, returncode=rc, observations=stats.observations, contexts=stats.contexts,
            decisions=stats.decisions, wall_s=time.monotonic() - t0, stderr_tail=proc.stderr_tail(),
            header=stats.header, episode=stats.episode, output=output_of(list(cmd)),
            compiler_cpu_s=proc.cpu_s, serve_cpu_s=stats.serve_cpu_s if opened else None,
        )
    finally:
        if log is not None:
            log.abort()
        if proc is not None:
            proc.close()
        if chan is not None:
            chan.close()
        if old_affinity is not None:
            try:
                os.sched_setaffinity(0, old_affinity)
            except OSError:
                pass


def plain_compile(cmd: list[str], *, timeout: float = 300.0, cwd: str | None = None, env: dict | None = None) -> tuple[int, str]:
    """Run the compiler without the channel (the default heuristic).
    Returns (returncode, stderr tail); kills the group on timeout."""
    d = tempfile.mkdtemp(prefix="mlgo-plain-")
    proc = CompilerProcess(list(cmd), os.path.join(d, "compiler.log"), cwd=cwd, env=env)
    try:
        rc = proc.wait(timeout)
        if rc is None:
            proc.kill()
            raise ChannelTimeout(f"plain compile did not finish within {timeout:g} s")
        return rc, proc.stderr_tail()
    finally:
        proc.close()
        import shutil

        shutil.rmtree(d, ignore_errors=True)
