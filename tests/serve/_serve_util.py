"""Helpers of the serve tests: generated C sources, a real server process,
the mlgo-clang console script, plain reference compiles."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

from mlgo_host import procs

BIN = os.path.dirname(sys.executable)
MLGO_CLANG = os.path.join(BIN, "mlgo-clang")
CLANG = "clang-19"

needs_clang = pytest.mark.skipif(shutil.which(CLANG) is None or shutil.which("llvm-size-19") is None,
                                 reason="needs Debian clang-19 and llvm-size-19")


def c_source(seed: int, functions: int = 30) -> str:
    """A module with small and large static callees, some called several
    times, so the default inliner says yes to some and no to others."""
    rng = random.Random(seed)
    out = []
    for i in range(functions):
        body = [f"static int f{seed}_{i}(int x, int *p) {{", "  int s = x;"]
        for j in range(rng.choice((1, 1, 2, 4, 6))):
            body.append(f"  for (int j = 0; j < (x & {rng.randint(3, 15)}); j++) s = s * {rng.randint(3, 99)} + p[j & 3] + {j};")
            body.append(f"  if (s & {1 << rng.randint(0, 7)}) s ^= {rng.randint(1, 999)}; else s += p[{j % 4}];")
        body.append("  return s;\n}")
        out.append("\n".join(body))
    out.append("int mod_entry_%d(int a, int *p) {\n  int t = 0;" % seed)
    for i in range(functions):
        for _ in range(rng.choice((1, 1, 2, 3))):
            out.append(f"  t += f{seed}_{i}(a + {rng.randint(0, 99)}, p);")
    out.append("  return t;\n}\n")
    return "\n".join(out)


def big_source(n: int = 300) -> str:
    """A module that takes a second or more to compile (for kill tests)."""
    out = []
    for i in range(n):
        out.append(f"static int g{i}(int x) {{ int s = x; for (int j = 0; j < (x & 7); j++) s = s * {i % 97 + 3} + j;"
                   f" if (s & 4) s ^= {i}; return s; }}")
    out.append("int big_entry(int a) {\n  int t = 0;")
    for i in range(n):
        out.append(f"  t += g{i}(a + {i % 13});")
        if i % 3 == 0:
            out.append(f"  t ^= g{i}(t);")
    out.append("  return t;\n}\n")
    return "\n".join(out)


def write_sources(d: str, n: int, functions: int = 30, prefix: str = "m") -> list[str]:
    os.makedirs(d, exist_ok=True)
    paths = []
    for i in range(n):
        p = os.path.join(d, f"{prefix}{i}.c")
        with open(p, "w") as f:
            f.write(c_source(i + 1, functions))
        paths.append(p)
    return paths


def _is_fifo(path: str) -> bool:
    try:
        return stat.S_ISFIFO(os.lstat(path).st_mode)
    except OSError:  # removed meanwhile (a live server's temp file)
        return False


def find_fifos(root: str) -> list[str]:
    """Every FIFO under ``root``."""
    paths = (os.path.join(dirpath, f) for dirpath, _dirs, files in os.walk(root) for f in files)
    return sorted(p for p in paths if _is_fifo(p))


def plain_object(src: str, out: str, flags=("-Oz",)) -> bytes:
    subprocess.run([CLANG, *flags, "-c", src, "-o", out], check=True, timeout=120)
    with open(out, "rb") as f:
        return f.read()


def client_env(channels: str | None, fallback: str = "fail", **extra) -> dict:
    env = dict(os.environ)
    for k in ("MLGO_CHANNELS", "MLGO_CHANNELS_C", "MLGO_CHANNELS_CXX", "MLGO_FALLBACK", "MLGO_BUILD", "MLGO_QUIET",
              "MLGO_GUARD"):
        env.pop(k, None)
    if channels is not None:
        env["MLGO_CHANNELS"] = channels
    env["MLGO_FALLBACK"] = fallback
    env.update(extra)
    return env


def mlgo_clang(args: list[str], channels: str | None, fallback: str = "fail", cwd: str | None = None,
               timeout: float = 120, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([MLGO_CLANG, *args], cwd=cwd, env=client_env(channels, fallback, **extra),
                          capture_output=True, text=True, timeout=timeout)


def read_stats(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def wait_for(cond, timeout: float, what: str, interval: float = 0.02):
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


class ServerProc:
    """``mlgo-host serve`` as a real process."""

    def __init__(self, channels: str, slots: int = 2, policy: str = "default", stats: str | None = None,
                 extra: tuple[str, ...] = ()):
        self.channels = channels
        self.stats = stats
        cmd = [sys.executable, "-m", "mlgo_host", "serve", "--channels", channels, "--slots", str(slots),
               "--policy", policy, *extra]
        if stats:
            cmd += ["--stats", stats]
        self.log = os.path.join(os.path.dirname(channels), f"server-{os.path.basename(channels)}-{time.monotonic_ns()}.log")
        self._logf = open(self.log, "wb")
        env = client_env(None)
        self.proc = subprocess.Popen(cmd, stdout=self._logf, stderr=subprocess.STDOUT, env=env)
        try:
            self.info = wait_for(self._ready, 60, "the server to write server.json")
        except BaseException:
            self.kill()
            raise

    def _ready(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"server exited with {self.proc.returncode}: {self.output()}")
        try:
            with open(os.path.join(self.channels, "server.json")) as f:
                info = json.load(f)
        except (OSError, ValueError):
            return None
        return info if info.get("pid") == self.proc.pid else None

    def output(self) -> str:
        self._logf.flush()
        with open(self.log, "rb") as f:
            return f.read().decode(errors="replace")

    def terminate(self, timeout: float = 60) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._logf.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._logf.close()

    def __enter__(self) -> "ServerProc":
        return self

    def __exit__(self, *exc) -> None:
        self.kill()


def compiler_on_channel(request_path: str) -> int | None:
    """The compiler pid of the slot's request once it has the channel open."""
    try:
        with open(request_path) as f:
            req = json.load(f)
    except (OSError, ValueError):
        return None
    pid = req.get("compiler_pid")
    base = os.path.join(os.path.dirname(request_path), "ch")
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            if os.readlink(f"/proc/{pid}/fd/{fd}") in (base + ".out", base + ".in"):
                return pid
    except OSError:
        return None
    return None


#: exists and is not a zombie
pid_alive = procs.alive
