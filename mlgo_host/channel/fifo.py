"""FIFO lifecycle: a private directory per channel, the open order clang
needs, deadlines on every open and read, removal on every exit path.

Open order (docs/channel.md, "Opening the FIFOs"): the compiler opens ``B.in`` for reading first, then
``B.out`` for writing.  The host opens ``B.in`` for writing with
``O_NONBLOCK`` (retrying on ``ENXIO`` until the compiler is there, has exited,
or the deadline passes), then ``B.out`` for reading, also non-blocking, so a
compiler that never comes cannot hang the host.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import shutil
import signal
import tempfile
import time
from typing import Callable

from mlgo_host.errors import ChannelTimeout
from mlgo_host.fsutil import defer_raise


class Channel:
    """One FIFO pair ``<dir>/<name>.in`` / ``.out`` in a fresh private dir
    (or in ``directory`` when given, e.g. a serve slot)."""

    def __init__(self, parent: str | None = None, name: str = "channel", directory: str | None = None):
        if directory is None:
            self.dir = tempfile.mkdtemp(prefix="mlgo-ch-", dir=parent)
            self._own_dir = True
        else:
            os.makedirs(directory, exist_ok=True)
            self.dir = directory
            self._own_dir = False
        self.base = os.path.join(self.dir, name)
        self.in_path = self.base + ".in"
        self.out_path = self.base + ".out"
        self.wfd = -1
        self.rfd = -1
        try:
            for p in (self.in_path, self.out_path):
                if os.path.lexists(p):
                    os.unlink(p)
                os.mkfifo(p, 0o600)
        except BaseException:
            self.close()
            raise

    # -- opening ---------------------------------------------------------
    def open(self, alive: Callable[[], bool], deadline: float, max_delay: float = 0.02) -> bool:
        """Open both ends in the compiler's order. Returns False if the
        compiler finished without ever opening the channel (``alive()`` went
        False); raises :class:`ChannelTimeout` at ``deadline``.

        The write end is retried with a back-off up to ``max_delay`` s: a
        compiler that is already waiting in its blocking ``open`` waits that
        long at most (a server whose compiles start before it gets there
        passes a short one: the back-off is compile latency)."""
        self.wfd = self._open_write_end(alive, deadline, max_delay)
        if self.wfd < 0:
            return False
        self.rfd = os.open(self.out_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        return True

    def _open_write_end(self, alive: Callable[[], bool], deadline: float, max_delay: float) -> int:
        """``.in`` opened for writing (blocking), or -1 when the compiler went
        away first. Opened non-blocking, which fails with ENXIO until the
        compiler has opened its read end, so a compiler that never comes
        cannot hang the host."""
        delay = min(0.0002, max_delay)
        while True:
            try:
                fd = os.open(self.in_path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                break
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
            if not alive():
                return -1
            if time.monotonic() >= deadline:
                raise ChannelTimeout(f"the compiler did not open {self.in_path} before the deadline")
            time.sleep(delay)
            delay = min(delay * 2, max_delay)
        fl = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, fl & ~os.O_NONBLOCK)
        return fd

    # -- reading ---------------------------------------------------------
    def reader(self, alive: Callable[[], bool], deadline_ref: Callable[[], float], describe: Callable[[], str],
               chunk: int = 1 << 16):
        """A function returning the next chunk of bytes (b"" at end of
        stream), waiting with ``poll`` until the deadline.

        One ``poll`` and one ``read`` per wake-up; the compiler writes a whole
        observation before it waits for advice, so one wake-up normally
        returns one complete observation."""
        rfd = self.rfd
        poller = select.poll()
        poller.register(rfd, select.POLLIN | select.POLLHUP | select.POLLERR)
        poll = poller.poll
        read = os.read
        mono = time.monotonic

        def next_chunk() -> bytes:
            while True:
                remaining = deadline_ref() - mono()
                if remaining <= 0:
                    raise ChannelTimeout(f"timed out waiting for {describe()} from the compiler")
                if poll(min(remaining, 0.25) * 1000.0):
                    try:
                        return read(rfd, chunk)
                    except BlockingIOError:
                        continue
                if not alive():
                    # The compiler is gone without closing its end (or never
                    # opened it): end of stream. Drain what is left.
                    try:
                        return read(rfd, chunk)
                    except BlockingIOError:
                        return b""

        return next_chunk

    # -- cleanup ---------------------------------------------------------
    def close_fds(self) -> None:
        for attr in ("wfd", "rfd"):
            fd = getattr(self, attr)
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
                setattr(self, attr, -1)

    def close(self) -> None:
        """Close the ends and remove the FIFOs (and the directory if ours)."""
        self.close_fds()
        for p in (self.in_path, self.out_path):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
            except OSError:
                pass
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Channel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SignalExit(SystemExit):
    """Raised by the handler of :func:`install_signal_cleanup`: unwinds the
    stack (every ``finally`` runs) and exits with ``128 + signum``."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(128 + signum)

    @property
    def signame(self) -> str:
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"


def install_signal_cleanup(sigint: bool = False) -> None:
    """Make SIGTERM and SIGHUP (and SIGINT when ``sigint``) unwind the stack
    with :class:`SignalExit`, so every ``finally`` runs: compilers are
    killed, FIFOs and temp files removed. The first signal makes further ones
    ignored, so a second Ctrl-C cannot cut the cleanup short. Call once in a
    CLI entry point (main thread only)."""
    sigs = [signal.SIGTERM, signal.SIGHUP] + ([signal.SIGINT] if sigint else [])

    def handler(signum, frame):
        for s in sigs:
            try:
                signal.signal(s, signal.SIG_IGN)
            except (ValueError, OSError):
                pass
        if not defer_raise(SignalExit(signum)):  # (inside signals_deferred: raised when the section ends)
            raise SignalExit(signum)

    for sig in sigs:
        try:
            signal.signal(sig, handler)
        except (ValueError, OSError):  # not the main thread
            pass
