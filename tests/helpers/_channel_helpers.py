"""Helpers of the channel tests: the host's command line, leak checks."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

from mlgo_host import procs

#: given to fake-compiler runs (MLGO_INLINE_DEFAULT_SLOT), so fakes are never probed
BUGGY_SLOT = "callee_basic_block_count"


def mlgo_host_cmd() -> list[str]:
    return [sys.executable, "-m", "mlgo_host"]


#: exists and is not a zombie (a zombie still answers kill(0))
pid_alive = procs.alive


def leftovers(tmpdir) -> list[str]:
    """Channel directories, FIFOs and temp outputs left in ``tmpdir``."""
    bad = []
    for root, dirs, files in os.walk(tmpdir):
        for n in dirs + files:
            p = os.path.join(root, n)
            if n.startswith("mlgo-ch-") or n.endswith(".tmp") or stat.S_ISFIFO(os.lstat(p).st_mode):
                bad.append(p)
    return bad


def run_cli(args: list[str], env_extra: dict | None = None, timeout: float = 60, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run(mlgo_host_cmd() + args, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
