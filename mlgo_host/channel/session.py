"""One compile served over the interactive channel: :func:`serve_channel` answers an opened
channel, :func:`run_session` starts, serves and supervises a compiler and cleans up on every exit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from typing import Any, Callable, Protocol

from mlgo_host import procs
from mlgo_host.channel import codec
from mlgo_host.channel.advisors import Advisor, InlineAdvisor, get_advisor
from mlgo_host.channel.codec import _OBS_PREFIX, Context, Decoder, Header, Observation
from mlgo_host.channel.fifo import Channel
from mlgo_host.channel.process import CompilerProcess, output_of
from mlgo_host.errors import ChannelTimeout, CompilerError, ConfigError, MlgoHostError, ProtocolError
from mlgo_host.fsutil import scratch_dir


class Policy(Protocol):
    """Who answers (structural: the channel floor does not import :mod:`mlgo_host.policies`)."""

    def bind(self, header: Header, advisor: Advisor) -> None: ...
    def act(self, obs: Observation) -> Any: ...
    def act_logp(self, obs: Observation) -> tuple[Any, float]: ...


class Recorder(Protocol):
    """What records the decisions (structural, e.g. :class:`mlgo_host.episode.EpisodeRecorder`)."""

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
        return {"advisor": self.advisor, "observations": self.observations, "contexts": self.contexts,
                "decisions": self.decisions, "returncode": self.returncode, "output": self.output,
                "wall_s": round(self.wall_s, 4),
                "compiler_cpu_s": None if self.compiler_cpu_s is None else round(self.compiler_cpu_s, 4),
                "serve_cpu_s": None if self.serve_cpu_s is None else round(self.serve_cpu_s, 4)}


@dataclasses.dataclass
class StreamTally:
    header: Header | None = None
    observations: int = 0
    contexts: int = 0
    decisions: dict = dataclasses.field(default_factory=dict)
    episode: Any = None
    #: CPU seconds of the serving thread from the first byte to the end of the stream
    serve_cpu_s: float = 0.0


class TrainingLogWriter:
    """Writes the session as clang's training log (advice as last feature), renamed into place on :meth:`commit`."""

    def __init__(self, path: str):
        self.path = path
        self._tmp = path + f".{os.getpid()}.tmp"
        self._f = open(self._tmp, "wb", buffering=1 << 16)
        #: append encoded records (an observation's tensors followed by its advice)
        self.write = self._f.write

    def commit(self) -> None:
        self._f.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        try:
            self._f.close()
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._tmp)


_ZERO8 = bytes(8)


class _Watchdog:
    """Enforces the deadline of blocking reads: at the deadline it sets :attr:`fired` and writes a byte
    into ``.out`` to wake the reader (no timer armed per decision)."""

    def __init__(self, deadline: float, out_path: str, in_path: str):
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
        with contextlib.suppress(OSError):  # wake a reader blocked on .out
            fd = os.open(self.out_path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                os.write(fd, b"\0")
            finally:
                os.close(fd)
        # unblock a loop stuck writing to a full .in (a compiler that stopped reading): drain it
        try:
            fd = os.open(self.in_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        try:
            while True:
                with contextlib.suppress(OSError):  # (BlockingIOError: drained)
                    while os.read(fd, 1 << 16):
                        pass
                if self._ev.wait(0.05):
                    return
        finally:
            os.close(fd)

    def cancel(self) -> None:
        self._ev.set()
        self._th.join()


def serve_channel(chan: Channel, advisor: Advisor, policy: Policy | None, *, deadline: float,
                  alive: Callable[[], bool], recorder: Recorder | None = None,
                  log: TrainingLogWriter | None = None) -> StreamTally:
    """Serve an opened channel until the compiler closes it (``policy`` None: the advisor's default).
    The first bytes are awaited with ``poll`` (an unconnected FIFO reads as end-of-file); later reads
    block and a :class:`_Watchdog` keeps the deadline."""
    dec = Decoder()
    data = chan.first_chunk(alive, deadline, f"{dec.waiting_for} ({dec.where})")
    cpu0 = time.thread_time()
    session = None
    if data:
        os.set_blocking(chan.rfd, True)
        wd = _Watchdog(deadline, chan.out_path, chan.in_path)
        try:
            header, records = _read_header(dec, data, chan.rfd, wd)
            if header is not None:
                session = _Session(chan, dec, wd, header, advisor, policy, recorder, log)
                session.answer_records(records)
                session.run()
        finally:
            wd.cancel()
    return _finish(dec, session, recorder, time.thread_time() - cpu0)


def _timed_out(dec: Decoder) -> ChannelTimeout:
    return ChannelTimeout(f"timed out waiting for {dec.waiting_for} from the compiler ({dec.where})")


def _read_header(dec: Decoder, data: bytes, rfd: int, wd: _Watchdog) -> tuple[Header | None, list]:
    """The header and the records after it in its chunk; (None, []) when the stream ended before."""
    while data:
        records = dec.feed(data)
        if records:  # the decoder yields the header first, always
            return records[0], records[1:]
        data = os.read(rfd, 65536)
        if wd.fired:
            raise _timed_out(dec)
    return None, []


def _finish(dec: Decoder, session: _Session | None, recorder: Recorder | None, serve_cpu_s: float) -> StreamTally:
    """The tally of an ended stream (a record cut short is the compiler's failure)."""
    tally = StreamTally(serve_cpu_s=serve_cpu_s)
    try:
        dec.close()
    except ProtocolError as e:
        raise CompilerError(f"the compiler's stream ended mid-record: {e}") from None
    if session is None:
        return tally
    tally.header, tally.observations, tally.contexts = session.header, session.n, session.contexts
    counts = session.counts
    if session.count:  # the default-flag loop counts the 1s only: add both to the counts
        for advice, k in ((1, session.n_yes), (0, session.n_flag - session.n_yes)):
            if k:
                counts[advice] = counts.get(advice, 0) + k
    tally.decisions = {str(k): v for k, v in sorted(counts.items())}
    if recorder is not None:
        tally.episode = recorder.finish(session.header)
    return tally


class _Session:
    """One channel served once its header is known: :attr:`decide` answers an observation; when the
    answer is the advisor's default int64 flag (the inliner), :meth:`flag_loop` answers from the raw bytes."""

    def __init__(self, chan: Channel, dec: Decoder, wd: _Watchdog, header: Header, advisor: Advisor,
                 policy: Policy | None, recorder: Recorder | None, log: TrainingLogWriter | None):
        self.rfd, self.wfd = chan.rfd, chan.wfd
        self.dec, self.wd, self.header = dec, wd, header
        self.log_write = log.write if log is not None else None
        self.n = 0  # observations answered
        self.contexts = 0
        self.n_flag = self.n_yes = 0  # answered by the default-flag loop; of which 1
        self.counts: dict[Any, int] = {}  # advice -> how often (discrete advice, when counting)
        advisor.bind(header)
        if policy is None:
            act = advisor.default_advice
            act_logp: Callable[[Observation], tuple[Any, float]] = lambda obs: (act(obs), 0.0)  # noqa: E731
        else:
            policy.bind(header, advisor)
            act, act_logp = policy.act, policy.act_logp
        spec = header.advice  # advisor.bind refused a header without one
        encode = codec.AdviceEncoder(spec).encode
        self.count = advisor.discrete
        validate = advisor.validate
        counts = self.counts if self.count else None
        # discrete advice is a small int: its bytes are memoized
        memo: dict[Any, bytes] | None = {} if self.count and spec.size == 1 else None

        def decide(obs: Observation) -> bytes:
            """The advice bytes of an observation: policy, record, check, encoding (memoized), count."""
            if recorder is not None:
                advice, logp = act_logp(obs)
                recorder.add(obs, advice, logp)
            else:
                advice = act(obs)
            validate(obs, advice)
            if memo is not None:
                b = memo.get(advice)
                if b is None:
                    b = encode(advice)
                    if len(memo) < 256:
                        memo[advice] = b
            else:
                b = encode(advice)
            if counts is not None:
                counts[advice] = counts.get(advice, 0) + 1
            return b

        self.decide = decide
        #: default-flag loop: offset of the default flag from the event line's "\n" (-1: no such loop)
        self.flag = -1
        off = advisor.default_flag_offset()
        if recorder is None and off is not None and act == advisor.default_advice:
            zero = Observation(-1, "", bytes(header.observation_nbytes), header)
            advisor.validate(zero, 1)
            advisor.validate(zero, 0)
            self.flag = 1 + off
            self.yes, self.no = encode(1), encode(0)
            self.rbuf = bytearray(65536)  # the flag loop reads into this one buffer
        if log is not None:
            log.write(codec.encode_header(header.as_training_log()))

    def broken(self, index: int) -> CompilerError:
        return CompilerError(f"the compiler closed the channel before reading the advice of observation {index} "
                             f"({self.dec.where})")

    def run(self) -> None:
        """The hot loop: one blocking ``read`` (normally one whole observation), :attr:`decide`, one ``write``."""
        rfd, wfd, dec, wd = self.rfd, self.wfd, self.dec, self.wd
        read, write = os.read, os.write
        frame_one = dec.frame_one
        log_write = self.log_write
        decide, header, flag = self.decide, self.header, self.flag
        ctx = dec.context or ""
        n = 0
        while True:
            data = read(rfd, 65536)
            if wd.fired:
                raise _timed_out(dec)
            if flag >= 0 and data:
                data = self.flag_loop(data)
            if not data:
                break
            nl = frame_one(data)
            if nl >= 0:  # exactly one whole observation
                b = decide(Observation(int(data[15 : nl - 1]), ctx, data[nl + 1 : -1], header))
                try:
                    write(wfd, b)
                except BrokenPipeError:
                    raise self.broken(int(data[15 : nl - 1])) from None
                if log_write is not None:
                    log_write(data[:-1] + b + b"\n")
                n += 1
            else:
                self.answer_records(dec.feed(data))
                ctx = dec.context or ""
        self.n += n

    def answer_records(self, records: list) -> None:
        """The general path: records the decoder made of any chunking."""
        for r in records:
            if type(r) is Observation:
                b = self.decide(r)
                try:
                    os.write(self.wfd, b)
                except BrokenPipeError:
                    raise self.broken(r.index) from None
                if self.log_write is not None:
                    self.log_write(codec.encode_observation(r.index, r.raw + b))
                self.n += 1
            elif type(r) is Context:
                self.contexts += 1
                if self.log_write is not None:
                    self.log_write(codec.encode_context(r.name))
            else:  # a second header, an outcome
                raise ProtocolError(f"unexpected {type(r).__name__} record in an interactive session",
                                    offset=self.dec.offset, context=self.dec.context)

    def flag_loop(self, data: bytes) -> bytes:
        """Answer from the flag's 8 bytes while each chunk is one canonical observation
        (:meth:`Decoder.frame_one`'s test, inlined); returns the first chunk it did not take.
        Kept minimal: after each compile step its code and data are cold in the cache."""
        rfd, wfd, dec, wd = self.rfd, self.wfd, self.dec, self.wd
        write, readv = os.write, os.readv
        flag, yes_b, no_b = self.flag, self.yes, self.no
        yes_nl, no_nl = yes_b + b"\n", no_b + b"\n"
        log_write = self.log_write
        base = dec.frame_base
        rbuf = self.rbuf
        rv = [rbuf]
        n_yes = k = fb = 0
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
                raise self.broken(int(cur[15 : nl - 1])) from None
            if log_write is not None:
                log_write(cur[: m - 1] + (yes_nl if b is yes_b else no_nl))
            k += 1
            fb += m
            m = readv(rfd, rv)
            cur = rbuf
            if wd.fired:
                break
        if k:
            dec.skip(fb, k)
            self.n += k
            self.n_flag += k
            self.n_yes += n_yes
        if wd.fired:
            raise _timed_out(dec)
        return cur if cur is not rbuf else bytes(memoryview(rbuf)[:m])


def run_session(cmd: list[str], advisor: Advisor | str, policy: Policy | None, *, timeout: float = 300.0,
                log_path: str | None = None, recorder: Recorder | None = None, tmpdir: str | None = None,
                pin_cpu: int | None = None, start: float | None = None) -> SessionResult:
    """Run ``cmd`` with the advisor's flags and serve its channel.  An inliner advisor must come with
    its default slot set (:func:`~mlgo_host.channel.problems.ready_advisor`).

    Host-side failures raise :class:`MlgoHostError` after the compiler's group was killed; a compiler
    exiting non-zero on its own gives a result with that code.  ``pin_cpu``: run this thread and
    the compiler on one CPU (-1: the current one; the ping-pong avoids cross-CPU wake-ups).
    ``start``: the ``time.monotonic()`` from which ``timeout`` counts (default: now).
    """
    adv = get_advisor(advisor)
    if not cmd:
        raise CompilerError("empty compiler command")
    if isinstance(adv, InlineAdvisor) and adv.default_slot is None:
        # guessing would turn the default policy into never-inline on clang-19
        raise ValueError("the inliner's default-decision slot is not set: get the advisor from "
                         "problems.ready_advisor, or run with problems.ready_and_run")
    t0 = time.monotonic()
    deadline = (t0 if start is None else start) + timeout
    old_affinity = _pin(pin_cpu)
    chan = proc = log = None
    try:
        chan = Channel(parent=tmpdir)
        argv = list(cmd) + adv.flags(chan.base, cmd[0])
        proc = CompilerProcess(argv, os.path.join(chan.dir, "compiler.log"))
        log = TrainingLogWriter(log_path) if log_path else None
        try:
            opened = chan.open(proc.alive, deadline)
            tally = serve_channel(chan, adv, policy, deadline=deadline, alive=proc.alive, recorder=recorder, log=log) \
                if opened else StreamTally()
            chan.close_fds()
            rc = proc.wait(deadline - time.monotonic())
            if rc is None:
                raise ChannelTimeout(f"the compiler did not exit within the {timeout:g} s timeout after the channel closed")
        except MlgoHostError as e:
            _stop_after_failure(proc, e, deadline, timeout)
            raise
        except BaseException:
            proc.kill()
            raise
        if log is not None and opened:  # a compile that opened no channel has nothing to log
            log.commit()
            log = None
        return SessionResult(advisor=adv.name, returncode=rc, observations=tally.observations, contexts=tally.contexts,
                             decisions=tally.decisions, wall_s=time.monotonic() - t0, stderr_tail=proc.stderr_tail(),
                             header=tally.header, episode=tally.episode, output=output_of(list(cmd)),
                             compiler_cpu_s=proc.cpu_s, serve_cpu_s=tally.serve_cpu_s if opened else None)
    finally:
        if log is not None:
            log.abort()
        if proc is not None:
            proc.close()
        if chan is not None:
            chan.close()
        if old_affinity is not None:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, old_affinity)


def _pin(pin_cpu: int | None) -> set[int] | None:
    """Pin this thread (and the compiler started next) to a CPU; the affinity to restore, or None."""
    if pin_cpu is None:
        return None
    cpu = procs.current_cpu() if pin_cpu < 0 else pin_cpu
    try:
        old_affinity = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {cpu})  # the compiler inherits it
    except OSError as e:
        raise ConfigError(f"cannot pin to CPU {cpu}: {e.strerror}") from None
    return old_affinity


def _stop_after_failure(proc: CompilerProcess, e: MlgoHostError, deadline: float, timeout: float) -> None:
    """Kill the compiler after a host-side failure and add its exit status and stderr to ``e``."""
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


def run_without_channel(cmd: list[str], *, timeout: float = 300.0) -> tuple[int, str]:
    """Run the compiler without the channel: (returncode, stderr tail)."""
    with scratch_dir("mlgo-plain-") as d:
        proc = CompilerProcess(list(cmd), os.path.join(d, "compiler.log"))
        try:
            rc = proc.wait(timeout)
            if rc is None:
                proc.kill()
                raise ChannelTimeout(f"plain compile did not finish within {timeout:g} s")
            return rc, proc.stderr_tail()
        finally:
            proc.close()
