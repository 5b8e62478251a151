"""FIFO lifecycle: a private directory per channel, the open order clang needs (``B.in`` then
``B.out``, docs/channel.md), deadlines on every open and read, removal on every exit path.
"""

from __future__ import annotations

import contextlib
import errno
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
    """One FIFO pair ``<dir>/<name>.in`` / ``.out`` in a fresh private dir (or in ``directory``)."""

    def __init__(self, parent: str | None = None, name: str = "channel", directory: str | None = None):
        self._own_dir = directory is None
        if directory is None:
            self.dir = tempfile.mkdtemp(prefix="mlgo-ch-", dir=parent)
        else:
            os.makedirs(directory, exist_ok=True)
            self.dir = directory
        self.base = os.path.join(self.dir, name)
        self.in_path = self.base + ".in"
        self.out_path = self.base + ".out"
        self.wfd = self.rfd = -1
        try:
            for p in (self.in_path, self.out_path):
                if os.path.lexists(p):
                    os.unlink(p)
                os.mkfifo(p, 0o600)
        except BaseException:
            self.close()
            raise

    def open(self, alive: Callable[[], bool], deadline: float, max_delay: float = 0.02) -> bool:
        """Open both ends in the compiler's order; False if the compiler exited without opening
        the channel.  ``max_delay`` caps the retry back-off, which a waiting compiler pays as latency."""
        delay = min(0.0002, max_delay)
        while True:
            # non-blocking (ENXIO until the compiler opened its end): a compiler that never comes
            # cannot hang the host
            try:
                fd = os.open(self.in_path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                break
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
            if not alive():
                return False
            if time.monotonic() >= deadline:
                raise ChannelTimeout(f"the compiler did not open {self.in_path} before the deadline")
            time.sleep(delay)
            delay = min(delay * 2, max_delay)
        os.set_blocking(fd, True)
        self.wfd = fd
        self.rfd = os.open(self.out_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        return True

    def first_chunk(self, alive: Callable[[], bool], deadline: float, waiting_for: str) -> bytes:
        """The first chunk of ``.out`` (b"" at end of stream), polled for until ``deadline``."""
        poller = select.poll()
        poller.register(self.rfd, select.POLLIN | select.POLLHUP | select.POLLERR)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChannelTimeout(f"timed out waiting for {waiting_for} from the compiler")
            ready = poller.poll(min(remaining, 0.25) * 1000.0)
            if ready or not alive():  # (not alive: gone without closing its end, drain what is left)
                try:
                    return os.read(self.rfd, 1 << 16)
                except BlockingIOError:
                    if not ready:
                        return b""

    def close_fds(self) -> None:
        for fd in (self.wfd, self.rfd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.wfd = self.rfd = -1

    def close(self) -> None:
        """Close the ends and remove the FIFOs (and the directory if ours)."""
        self.close_fds()
        for p in (self.in_path, self.out_path):
            with contextlib.suppress(OSError):
                os.unlink(p)
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


class SignalExit(SystemExit):
    """Raised by :func:`install_signal_cleanup`'s handler: unwinds the stack, exits with ``128 + signum``."""

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
    """Make SIGTERM, SIGHUP (and SIGINT) raise :class:`SignalExit` so every ``finally`` cleans up;
    further signals are then ignored so a second Ctrl-C cannot cut it short.  Main thread only."""
    sigs = [signal.SIGTERM, signal.SIGHUP] + ([signal.SIGINT] if sigint else [])

    def handler(signum, frame):
        for s in sigs:
            with contextlib.suppress(ValueError, OSError):
                signal.signal(s, signal.SIG_IGN)
        if not defer_raise(SignalExit(signum)):  # (inside signals_deferred: raised when the section ends)
            raise SignalExit(signum)

    for sig in sigs:
        with contextlib.suppress(ValueError, OSError):  # not the main thread
            signal.signal(sig, handler)
