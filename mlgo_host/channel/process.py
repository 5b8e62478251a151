"""Compiler-process supervision: its own process group, dying with the host, output to a file
(no pipe to drain), the group killed and its temp outputs removed on any host-side failure.

Exits are observed with ``WNOWAIT`` (or a pidfd), so the pid -- the group id -- stays reserved
until :meth:`CompilerProcess._reap` and ``killpg`` never hits a group that reused it.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import time

from mlgo_host import procs
from mlgo_host.errors import CompilerError

#: compilers that died of a SIGKILL the host did not send (the OOM killer, a user, Ray killing an actor's children)
_killed_from_outside = 0


def killed_from_outside() -> int:
    return _killed_from_outside


def output_of(argv: list[str]) -> str | None:
    """The ``-o`` file of a compiler command line."""
    out = None
    for i, a in enumerate(argv):
        if a == "-o" and i + 1 < len(argv):
            out = argv[i + 1]
        elif a.startswith("-o") and len(a) > 2 and not a.startswith("-opt"):
            out = a[2:]
    return out


#: util-linux's setpriv sets PR_SET_PDEATHSIG: the compiler dies with a SIGKILLed host instead of
#: blocking forever on a FIFO nobody opens (preexec_fn is unsafe with threads).
_SETPRIV = shutil.which("setpriv")


def _dies_with_host(argv: list[str]) -> list[str]:
    """``argv`` behind setpriv, its program resolved first so a missing compiler fails to start
    (not as setpriv's exit 127)."""
    if _SETPRIV is None:
        return argv
    prog = argv[0]
    if os.sep in prog:
        full = os.path.join(os.getcwd(), prog)  # prog itself when absolute
        if not os.path.exists(full):
            raise FileNotFoundError(2, "No such file or directory", prog)
        if os.path.isdir(full) or not os.access(full, os.X_OK):
            raise PermissionError(13, "Permission denied", prog)
    else:
        full = shutil.which(prog, path=os.environ.get("PATH", os.defpath))
        if full is None:
            raise FileNotFoundError(2, "No such file or directory", prog)
    return [_SETPRIV, "--pdeathsig", "KILL", "--", full, *argv[1:]]


class CompilerProcess:
    def __init__(self, argv: list[str], log_path: str):
        self.argv = argv
        self.started = time.time()
        #: ``resource.struct_rusage`` of the compiler, once reaped
        self.rusage = None
        self._pidfd = -1
        self._log = open(log_path, "w+b")
        try:
            self.proc = subprocess.Popen(_dies_with_host(argv), stdin=subprocess.DEVNULL, stdout=self._log,
                                         stderr=self._log, start_new_session=True, close_fds=True)
        except (FileNotFoundError, PermissionError, NotADirectoryError) as e:
            self._log.close()
            raise CompilerError(f"cannot start the compiler {argv[0]!r}: {e.strerror or e}") from None
        except BaseException:
            self._log.close()
            raise
        with contextlib.suppress(AttributeError, OSError):  # (no pidfd: wait() polls)
            self._pidfd = os.pidfd_open(self.proc.pid)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    @property
    def cpu_s(self) -> float | None:
        return None if self.rusage is None else self.rusage.ru_utime + self.rusage.ru_stime

    def _exited(self) -> bool:
        try:
            return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def alive(self) -> bool:
        """True while the compiler has not exited (does not reap it)."""
        return self.proc.returncode is None and not self._exited()

    def _reap(self) -> int:
        """Kill what is left of the group (the leader is at most a zombie: its id is still ours),
        then reap the leader with ``wait4`` (the compiler's own CPU time)."""
        if self.proc.returncode is None:
            by_host = not self._exited()  # the leader still runs: the SIGKILL below is the host's
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            try:
                _, status, ru = os.wait4(self.proc.pid, 0)
                self.rusage = ru
                self.proc.returncode = os.waitstatus_to_exitcode(status)
            except ChildProcessError:  # reaped elsewhere (should not happen)
                self.proc.returncode = -255
            if self.proc.returncode == -signal.SIGKILL and not by_host:
                global _killed_from_outside
                _killed_from_outside += 1
        self._close_pidfd()
        return self.proc.returncode

    def _close_pidfd(self) -> None:
        if self._pidfd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = -1

    def wait(self, timeout: float) -> int | None:
        """The exit status (reaped, its group killed) within ``timeout`` s, else None."""
        if self.proc.returncode is not None:
            return self.proc.returncode
        deadline = time.monotonic() + max(timeout, 0.0)
        poller = None
        if self._pidfd >= 0:  # readable once the compiler exited; without a pidfd, sleep and look
            poller = select.poll()
            poller.register(self._pidfd, select.POLLIN)
        delay = 0.0005
        while not self._exited():
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if poller is not None:
                poller.poll(left * 1000.0)
            else:
                time.sleep(min(delay, left))
                delay = min(delay * 2, 0.02)
        return self._reap()

    def kill(self) -> None:
        """Kill the whole process group and reap it; remove temp outputs."""
        if self.proc.returncode is None:
            self._reap()  # SIGKILLs the group first
        procs.remove_temp_outputs(output_of(self.argv), self.started)

    def stderr_tail(self) -> str:
        try:
            self._log.flush()
            size = os.fstat(self._log.fileno()).st_size
            self._log.seek(max(0, size - 2000))
            return self._log.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def close(self) -> None:
        """Kill the group if the compiler still runs; otherwise reap it."""
        if self.proc.returncode is None:
            if self._exited():
                self._reap()
            else:
                self.kill()
        self._close_pidfd()
        with contextlib.suppress(OSError):
            self._log.close()
