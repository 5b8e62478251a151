"""Where the inliner's default decision really is.

With ``-inliner-interactive-include-default`` clang-19 writes the default
heuristic's decision into the ``callee_basic_block_count`` slot and leaves
``inlining_default`` at 0 (fixed upstream later).  Rather than assume it from
the version, compile a probe module whose callee has several basic blocks and
look: a compiler with the bug reports a block count of 0 or 1 for it.  The
answer is cached per compiler binary (in memory and on disk).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile

from mlgo_host.channel.advisors import InlineAdvisor, is_clang_driver
from mlgo_host.channel.session import run_session

BUGGY_SLOT = "callee_basic_block_count"
FIXED_SLOT = "inlining_default"

PROBE_C = r"""
static int probe_callee(int x) {
  if (x > 3) x = x * 7 + 1; else x = x - 2;
  for (int i = 0; i < x; i++) { if (i & 1) x ^= i; else x += i; }
  return x;
}
int probe_caller(int y) { return probe_callee(y) + 1; }
"""

_MEMO: dict[str, str] = {}


def _cache_file() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mlgo_host", "default_slot.json")


def _key(path: str) -> str:
    st = os.stat(path)
    return hashlib.sha1(f"{path}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()


def _probe_clang(compiler: str) -> str | None:
    """The clang driver to probe with: the compiler itself, or the clang next
    to an ``opt``/``llc`` binary."""
    if is_clang_driver(compiler):
        return shutil.which(compiler) or compiler
    real = os.path.realpath(shutil.which(compiler) or compiler)
    cand = os.path.join(os.path.dirname(real), "clang")
    return cand if os.path.exists(cand) else None


class _Never:
    """Answers every probe decision with 0 (a policy by shape only: the
    channel floor does not import the policies above it)."""

    name = "never"

    def bind(self, header, advisor) -> None:
        pass

    def act(self, obs) -> int:
        return 0

    def act_logp(self, obs) -> tuple[int, float]:
        return 0, 0.0


class _SlotRecorder:
    """Keeps the two candidate slots' values of each probe decision."""

    def __init__(self) -> None:
        self.values: list[dict[str, int]] = []

    def add(self, obs, action, logp) -> None:
        self.values.append({n: int(obs[n].reshape(-1)[0]) for n in (FIXED_SLOT, BUGGY_SLOT) if n in obs})

    def finish(self, header) -> None:
        return None


def probe(clang: str, timeout: float = 60.0) -> str:
    """Run the probe compile; returns the feature name holding the default."""
    d = tempfile.mkdtemp(prefix="mlgo-probe-")
    try:
        src = os.path.join(d, "probe.c")
        with open(src, "w") as f:
            f.write(PROBE_C)
        adv = InlineAdvisor(default_slot=FIXED_SLOT)
        rec = _SlotRecorder()
        res = run_session([clang, "-Oz", "-c", src, "-o", os.path.join(d, "probe.o")], adv,
                          _Never(), timeout=timeout, recorder=rec)
        if res.returncode != 0 or not rec.values:
            raise RuntimeError(f"probe compile failed (exit {res.returncode}): {res.stderr_tail[-300:]}")
        if any(v.get(FIXED_SLOT) for v in rec.values):
            return FIXED_SLOT
        if all(BUGGY_SLOT in v for v in rec.values) and max(int(v[BUGGY_SLOT]) for v in rec.values) <= 1:
            return BUGGY_SLOT
        return FIXED_SLOT
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _version_guess(compiler: str) -> str:
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return BUGGY_SLOT
    m = re.search(r"version (\d+)\.", out)
    return BUGGY_SLOT if m and int(m.group(1)) <= 20 else FIXED_SLOT


def default_slot(compiler: str) -> str:
    """Feature that carries the inliner's default decision for ``compiler``.
    ``MLGO_INLINE_DEFAULT_SLOT`` overrides the detection."""
    env = os.environ.get("MLGO_INLINE_DEFAULT_SLOT")
    if env:
        return env
    path = os.path.realpath(shutil.which(compiler) or compiler)
    if path in _MEMO:
        return _MEMO[path]
    try:
        key = _key(path)
    except OSError:
        return FIXED_SLOT  # the session will report the missing compiler
    cache = _cache_file()
    try:
        with open(cache) as f:
            data = json.load(f)
    except (OSError, ValueError):
        data = {}
    slot = data.get(key)
    if slot not in (BUGGY_SLOT, FIXED_SLOT):
        clang = _probe_clang(compiler)
        try:
            slot = probe(clang) if clang else _version_guess(compiler)
        except Exception:
            slot = _version_guess(compiler)
        data[key] = slot
        try:
            os.makedirs(os.path.dirname(cache), exist_ok=True)
            tmp = f"{cache}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(data, f)
            os.replace(tmp, cache)
        except OSError:
            pass
    _MEMO[path] = slot
    return slot
