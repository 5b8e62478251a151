"""Atomic file writes (a reader or a crash never sees half a file) and
scratch directories that a signal cannot leave behind."""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shutil
import tempfile
import threading
from typing import Any, Iterator

from mlgo_host.errors import ConfigError


def check_file_target(path: str | os.PathLike, what: str = "file") -> None:
    """ConfigError when ``path`` cannot become a file: it is a directory, or its directory cannot be made
    (checked before the work whose result it keeps, which would otherwise be lost at the end)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ConfigError(f"{path}: is a directory, where a {what} is to be written")
    d = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{path}: cannot make its directory {d}: {e.strerror or e}") from None


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[str]:
    """A hidden temporary name beside ``path``, unique per process and thread, for writers that want a
    file name (``np.savez``, a compiler's ``-o``): it replaces ``path`` when the block ends normally and
    is removed when it raises. Nothing is created before the writer does (its mode is the writer's)."""
    path = os.fspath(path)
    check_file_target(path)  # (makes its directory)
    d = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(d, f".{os.path.basename(path)}.{os.getpid()}.{threading.get_ident()}{suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def atomic_write_bytes(path: str, data: bytes) -> None:
    """``data`` as ``path`` (mode 0600, as ``tempfile.mkstemp`` made it), synced before it replaces it."""
    with atomic_path(path) as tmp, open(tmp, "wb", opener=lambda p, flags: os.open(p, flags, 0o600)) as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def atomic_write_json(path: str, obj: Any, indent: int | None = 1) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=indent, sort_keys=True) + "\n").encode())


def check_replaceable(dest: str, marker: str, what: str) -> None:
    """ConfigError unless ``dest`` is absent, an empty directory or a ``what`` written before (it holds a
    file matching ``marker``): an output path that names anything else (a corpus, the input itself, a
    file) is not replaced and lost."""
    if not os.path.lexists(dest):
        return
    if os.path.islink(dest) or not os.path.isdir(dest):
        raise ConfigError(f"{dest}: exists and is not a directory; the {what} is written as a new directory")
    names = os.listdir(dest)
    if names and not fnmatch.filter(names, marker):
        raise ConfigError(f"{dest}: not a {what} (no {marker}), and it would be replaced as a whole; "
                          "name a new or empty directory")


@contextlib.contextmanager
def dir_built_aside(dest: str, replaces: tuple[str, str] | None = None) -> Iterator[str]:
    """A private directory beside ``dest`` to write into: when the block ends normally it replaces ``dest``
    (the old one renamed aside first, so ``dest`` is always a complete directory, modulo one rename), when it
    raises it is removed.  ``replaces`` = (marker, what): ``dest`` is checked by :func:`check_replaceable`
    first (a user's output path; callers that own ``dest`` leave it None)."""
    if replaces is not None:
        check_replaceable(dest, *replaces)
    dest = os.path.abspath(dest)
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="." + os.path.basename(dest) + ".", dir=parent)
    try:
        yield tmp
        old = None
        if os.path.exists(dest):
            old = dest + f".old-{os.getpid()}"
            if os.path.exists(old):
                shutil.rmtree(old)
            os.rename(dest, old)
        os.rename(tmp, dest)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class _Critical(threading.local):
    depth = 0
    pending: "BaseException | None" = None


_critical = _Critical()


def defer_raise(exc: BaseException) -> bool:
    """For an unwinding signal handler: inside :func:`signals_deferred` (in this thread), keep ``exc``
    to raise when the section ends and return True; elsewhere False (the handler raises it)."""
    if _critical.depth == 0:
        return False
    if _critical.pending is None:
        _critical.pending = exc
    return True


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """A section no unwinding signal (see :func:`defer_raise`) interrupts: it is raised at the end."""
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
    """A private temp directory for the block, removed however it ends (a SIGTERM included): it is
    made and removed in sections no signal interrupts."""
    tmp = None
    try:
        with signals_deferred():
            tmp = tempfile.mkdtemp(prefix=prefix)
        yield tmp
    finally:
        if tmp is not None:
            with signals_deferred():
                shutil.rmtree(tmp, ignore_errors=True)
