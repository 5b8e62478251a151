"""Process checks through Linux ``/proc``: liveness (a zombie is not alive), group, session, start
time (``(pid, start)`` names one process: a pid can be reused), children, command lines. Imported by
the ``mlgo-clang`` client and the Ray watchdog on every start: standard library only."""

from __future__ import annotations

import collections
import contextlib
import os
import signal
from collections.abc import Iterator

# not typing.NamedTuple: typing costs the mlgo-clang client milliseconds per compile
#: ``state`` (R, S, D, Z, T, ...), ``pgid``, ``sid`` and ``start`` (clock ticks after boot) of /proc/PID/stat
ProcStat = collections.namedtuple("ProcStat", "state pgid sid start")


def _stat_fields(pid: int | str) -> list[bytes]:
    """The fields of /proc/PID/stat from field 3 of proc(5) on; OSError if it is gone."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    # the command name (field 2) is in parentheses and may hold spaces or ")"
    return data[data.rindex(b")") + 2:].split()


def stat(pid: int) -> ProcStat | None:
    """``pid``'s stat; None if it is gone (or cannot be read)."""
    try:
        fields = _stat_fields(pid)
        # fields[0] is field 3 of proc(5): state; pgrp is 5, session 6, starttime 22
        return ProcStat(fields[0].decode(), int(fields[2]), int(fields[3]), int(fields[19]))
    except (OSError, IndexError, ValueError):
        return None


def alive(pid: object) -> bool:
    """True while ``pid`` (an int > 0; anything else is no process) exists and is not a zombie."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        pass  # another user's process: it exists
    st = stat(pid)
    # unreadable stat (e.g. /proc mounted hidepid) but kill(0) saw it: alive
    return st is None or st.state != "Z"


def same_process(pid: int, seen: ProcStat) -> bool:
    """Whether ``pid`` is still the live process ``seen`` was read from (its pid not reused)."""
    now = stat(pid)
    return now is not None and now.start == seen.start and now.state != "Z"


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (those of all its threads)."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/task/{tid}/children") as f:
            out.extend(int(x) for x in f.read().split())
    return out


def own_processes() -> Iterator[tuple[int, bytes]]:
    """``(pid, NUL-separated command line)`` of every process of this user but this one."""
    uid, me = os.getuid(), os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for e in entries:
        if not e.isdigit() or int(e) == me:
            continue
        try:
            if os.stat(f"/proc/{e}").st_uid != uid:
                continue
            with open(f"/proc/{e}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue  # exited meanwhile
        yield int(e), cmd


def kill_group_or_process(pid: int, st: ProcStat | None = None) -> None:
    """SIGKILL ``pid``'s process group when it leads one (a compiler in its own session), else ``pid``
    alone; ``st``: its stat, if already read."""
    st = st or stat(pid)
    if st is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        (os.killpg if st.pgid == pid else os.kill)(pid, signal.SIGKILL)


def current_cpu() -> int:
    """The CPU this process last ran on (0 when unknown)."""
    try:
        return int(_stat_fields("self")[36])  # field 39 of proc(5), "processor"
    except (OSError, ValueError, IndexError):
        return 0


def remove_temp_outputs(output: str | None, since: float) -> None:
    """Remove the temporary outputs a killed compiler left for ``output`` (clang writes ``x.o``
    through ``x-XXXXXXXX.o.tmp``, 8 hex digits), only those modified since ``since`` (its start,
    ``time.time()``) minus a second."""
    if not output or output == "-":
        return
    import glob  # only after a kill: the client's start-up stays without it

    # exactly 8 hex digits: a looser ``x-*.o.tmp`` would also take the temp file of a compile of ``x-y.o``
    unique = "-" + "[0-9a-f]" * 8
    stem, ext = os.path.splitext(output)
    for pat in (glob.escape(output) + unique + ".tmp", glob.escape(stem) + unique + glob.escape(ext) + ".tmp"):
        for p in glob.glob(pat):
            with contextlib.suppress(OSError):
                if os.stat(p).st_mtime >= since - 1:
                    os.unlink(p)
