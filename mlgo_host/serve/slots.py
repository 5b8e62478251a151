"""The channel directory shared by ``mlgo-host serve`` and ``mlgo-clang`` (the user's own, see
:mod:`mlgo_host.serve.trust`; empty after the server stopped)::

    DIR/server.lock      flock held by the live server for its life; removed on stop (a starting
                         server checks the file it locked is still the one in DIR)
    DIR/server.json      {"id", "pid", "slots", "advisor", "flags", "policy", ...}, once slots are ready
    DIR/heartbeat        its mtime refreshed every second by the server
    DIR/slot-K/lock      flock held by the client that owns slot K
    DIR/slot-K/ctl       FIFO to the server, one JSON line per message {"op": "start"|"done", "gen", ...}
    DIR/slot-K/ready     the slot's generation, while fresh channel FIFOs wait for a compiler
    DIR/slot-K/request.json  the compile the client started (argv, output, pids)
    DIR/slot-K/aborted   the generation whose session the server ended: its client falls back
    DIR/slot-K/ch.in, ch.out  the channel FIFOs of the current generation
    DIR/reports/<pid>-<ns>.json  a compile made with a tune directory's flags (no slot), for the
                         server's --stats (while server.json says "reports": true)

The server is alive while ``server.lock`` is locked, ``server.json`` names the same id and the
heartbeat is fresh: a SIGKILLed server is gone at once, a stopped or wedged one after ``stale_s``.
Imported by ``mlgo-clang`` on every compile: standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time

SERVER_LOCK = "server.lock"
SERVER_JSON = "server.json"
HEARTBEAT = "heartbeat"
SLOT_PREFIX = "slot-"
LOCK = "lock"
CTL = "ctl"
READY = "ready"
REQUEST = "request.json"
ABORTED = "aborted"
CHANNEL_NAME = "ch"
REPORTS = "reports"
#: the FIFO base in server.json's "flags"
BASE_PLACEHOLDER = "{base}"


def slot_dir(root: str, k: int) -> str:
    return os.path.join(root, f"{SLOT_PREFIX}{k}")


def channel_base(root: str, k: int) -> str:
    return os.path.join(slot_dir(root, k), CHANNEL_NAME)


def write_atomic(path: str, data: bytes) -> None:
    """temp + os.replace (no fsync: coordination state is worthless after a reboot)."""
    tmp = f"{path}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


def parse_json(text: str | bytes | None):
    """The JSON value of ``text``; None when there is none or it is no JSON."""
    try:
        return None if text is None else json.loads(text)
    except ValueError:
        return None


def read_json(path: str):
    return parse_json(read_text(path))


def unlink_quiet(path: str) -> None:
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        os.unlink(path)


def try_lock(path: str) -> int | None:
    """The fd holding a non-blocking flock of ``path`` (created if missing); None when someone else holds it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise
    return fd


def same_file(fd: int, path: str) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except OSError:
        return False


def lock_server(root: str, wait_s: float) -> int | None:
    """The fd holding ``root/server.lock``, or None when another server keeps it for ``wait_s`` s. A
    stopping server removes the file while holding it: a lock on a removed file is retaken."""
    path = os.path.join(root, SERVER_LOCK)
    end = time.monotonic() + wait_s
    while True:
        fd = try_lock(path)
        if fd is not None:
            if same_file(fd, path):
                return fd
            unlock(fd)
            continue
        if time.monotonic() > end:
            return None
        time.sleep(0.05)


def unlock(fd: int | None) -> None:
    if fd is not None and fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)  # closing the last fd releases the flock


def server_lock_held(root: str) -> bool:
    """Whether a process holds ``server.lock`` (tested with a shared lock; never creates it)."""
    path = os.path.join(root, SERVER_LOCK)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return True
        raise
    finally:
        os.close(fd)  # releases our test lock, if we got it
    return False


def server_status(root: str, stale_s: float, expect_id: str | None = None,
                  in_flight: bool = False) -> tuple[dict | None, str]:
    """(server.json, "") when a live server owns ``root``, else (None, why). A stopping server (in its
    grace period) takes no new compile but still serves those in flight (``in_flight=True``)."""
    if not os.path.isdir(root):
        return None, f"no channel directory {root}"
    info = read_json(os.path.join(root, SERVER_JSON))
    if not isinstance(info, dict) or "id" not in info:
        return None, f"no server.json in {root} (server not started, or stopping)"
    if expect_id is not None and info["id"] != expect_id:
        return None, f"the server of {root} was replaced (id {info['id']} instead of {expect_id})"
    if info.get("stopping") and not in_flight:
        return None, f"the server of {root} (pid {info.get('pid')}) is stopping"
    if not server_lock_held(root):
        return None, f"the server of {root} (pid {info.get('pid')}) is gone (its lock is free)"
    try:
        age = time.time() - os.stat(os.path.join(root, HEARTBEAT)).st_mtime
    except OSError:
        return None, f"the server of {root} has no heartbeat file"
    if age > stale_s:
        return None, f"the server of {root} (pid {info.get('pid')}) has not answered for {age:.0f} s"
    return info, ""
