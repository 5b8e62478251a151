"""Atomic file writes (a reader or a crash never sees half a file) and
scratch directories that a signal cannot leave behind."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
from typing import Any, Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[str]:
    """A temporary name beside ``path`` for writers that want a file name
    (``np.savez``, ``savefig``, a compiler's ``-o``): when the block ends
    normally the file written there replaces ``path``; when it raises, the
    file is removed.  The name is hidden (``.<name>.<pid>...<suffix>``) and
    unique per process and thread; nothing is created before the writer
    creates it (its mode is the writer's).  No fsync."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, f".{os.path.basename(path)}.{os.getpid()}.{threading.get_ident()}{suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def atomic_write_bytes(path: str, data: bytes) -> None:
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_json(path: str, obj: Any, indent: int | None = 1) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=indent, sort_keys=True) + "\n").encode())


def replace_dir(tmp_dir: str, final_dir: str) -> None:
    """Move a fully written directory into place, replacing an old one.
    The old one is renamed aside first, so ``final_dir`` is at every moment
    either the old or the new complete directory (modulo one rename)."""
    old = None
    if os.path.exists(final_dir):
        old = final_dir + f".old-{os.getpid()}"
        if os.path.exists(old):
            shutil.rmtree(old)
        os.rename(final_dir, old)
    os.rename(tmp_dir, final_dir)
    if old:
        shutil.rmtree(old, ignore_errors=True)


class _Critical(threading.local):
    depth = 0
    pending: "BaseException | None" = None


_critical = _Critical()


def defer_raise(exc: BaseException) -> bool:
    """For a signal handler that unwinds the stack: inside
    :func:`signals_deferred` (in the thread the handler runs in), keep
    ``exc`` to be raised when the section ends and return True; elsewhere
    return False (the handler raises it itself)."""
    if _critical.depth == 0:
        return False
    if _critical.pending is None:
        _critical.pending = exc
    return True


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """A section no unwinding signal interrupts: one that arrives in it is
    raised when it ends (handlers that call :func:`defer_raise`)."""
    _critical.depth += 1
    try:
        yield
    finally:
        _critical.depth -= 1
    if _critical.depth == 0 and _critical.pending is not None:
        exc, _critical.pending = _critical.pending, None
        raise exc


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[str]:
    """A private temp directory for the block, removed when it ends however
    it ends, a SIGTERM to the process group included: it is made and
    removed in sections no signal interrupts, and one that arrived while it
    was made is raised inside the ``try`` that removes it."""
    tmp = None
    try:
        with signals_deferred():
            tmp = tempfile.mkdtemp(prefix=prefix)
        yield tmp
    finally:
        if tmp is not None:
            with signals_deferred():
                shutil.rmtree(tmp, ignore_errors=True)
