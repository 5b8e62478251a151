"""Progress bars draw on a terminal only: a log file gets nothing from them."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

CODE = ("from mlgo_host.progress import progress_bar\n"
        "for _ in progress_bar(range(50), desc='work', enabled={enabled}):\n"
        "    pass\n")


def _stderr_of(enabled: bool, tty: bool) -> bytes:
    """stderr of a 50-step bar, written to a pipe or to a pseudo-terminal."""
    if not tty:
        return subprocess.run([sys.executable, "-c", CODE.format(enabled=enabled)], capture_output=True,
                              check=True).stderr
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # a new pty is 0 columns wide
    try:
        subprocess.run([sys.executable, "-c", CODE.format(enabled=enabled)], stderr=slave, check=True)
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other side is closed
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        os.close(master)


def test_a_bar_is_silent_in_a_pipe_or_file():
    assert _stderr_of(True, tty=False) == b""


def test_a_bar_draws_on_a_terminal_unless_turned_off():
    assert b"work" in _stderr_of(True, tty=True)
    assert _stderr_of(False, tty=True) == b""
