"""Compiler-process supervision.

The compiler runs in its own process group, with stdin closed and its
stdout/stderr going to a file in the channel directory (no pipe to drain, no
deadlock); on any host-side failure the whole group is killed and the
``<output>-*.tmp`` files a killed compile leaves behind are removed.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import time
import weakref

_LIVE: "weakref.WeakSet[CompilerProcess]" = weakref.WeakSet()


def output_of(argv: list[str]) -> str | None:
    """The ``-o`` file of a compiler command line (None when absent)."""
    out = None
    for i, a in enumerate(argv):
        if a == "-o" and i + 1 < len(argv):
            out = argv[i + 1]
        elif a.startswith("-o") and len(a) > 2 and not a.startswith("-opt"):
            out = a[2:]
    return out


class CompilerProcess:
    def __init__(self, argv: list[str], log_path: str, cwd: str | None = None, env: dict | None = None):
        self.argv = argv
        self.cwd = cwd
        self.log_path = log_path
        self.started = time.time()
        self._log = open(log_path, "w+b")
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                cwd=cwd, env=env, start_new_session=True, close_fds=True,
            )
        except FileNotFoundError:
            self._log.close()
            from mlgo_host.errors import CompilerError

            raise CompilerError(f"compiler not found: {argv[0]!r}") from None
        except BaseException:
            self._log.close()
            raise
        _LIVE.add(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float | None) -> int | None:
        try:
            return self.proc.wait(timeout=max(timeout, 0.0) if timeout is not None else None)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """Kill the whole process group and reap it; remove temp outputs."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable
            pass
        self.remove_temp_outputs()
        _LIVE.discard(self)

    def remove_temp_outputs(self) -> list[str]:
        """Remove the ``<output>-XXXX.tmp`` files of a killed compile
        (only those created since this compile started)."""
        out = output_of(self.argv)
        if not out:
            return []
        if self.cwd and not os.path.isabs(out):
            out = os.path.join(self.cwd, out)
        stem, ext = os.path.splitext(out)
        removed = []
        for pat in (glob.escape(out) + "-*.tmp", glob.escape(stem) + "-*" + glob.escape(ext) + ".tmp"):
            for p in glob.glob(pat):
                try:
                    if os.stat(p).st_mtime >= self.started - 1:
                        os.unlink(p)
                        removed.append(p)
                except OSError:
                    pass
        return removed

    def stderr_tail(self, nbytes: int = 2000) -> str:
        try:
            self._log.flush()
            size = os.fstat(self._log.fileno()).st_size
            self._log.seek(max(0, size - nbytes))
            return self._log.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        _LIVE.discard(self)
        try:
            self._log.close()
        except OSError:
            pass


def kill_all_compilers() -> None:
    for p in list(_LIVE):
        p.kill()
