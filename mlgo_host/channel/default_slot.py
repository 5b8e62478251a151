"""Where the inliner's default decision really is, per compiler (clang <= 20 sends it in
``callee_basic_block_count``, docs/channel.md): rather than trust the version, compile a call site
every heuristic inlines and look at both slots, once per compiler binary (cached).  Not knowing is a
:class:`ConfigError`: a wrong guess would silently make the default policy never inline.
``MLGO_INLINE_DEFAULT_SLOT`` overrides the detection."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil

from mlgo_host.channel.advisors import InlineAdvisor, is_clang_driver
from mlgo_host.channel.session import run_session
from mlgo_host.errors import CompilerError, ConfigError, MlgoHostError
from mlgo_host.formats import read_json_object
from mlgo_host.fsutil import atomic_write_json, scratch_dir

BUGGY_SLOT = "callee_basic_block_count"
FIXED_SLOT = "inlining_default"
SLOTS = (BUGGY_SLOT, FIXED_SLOT)
ENV_OVERRIDE = "MLGO_INLINE_DEFAULT_SLOT"

#: what a compiler-dependent inliner feature carries
DEFAULT_DECISION, ALWAYS_ZERO, BLOCK_COUNT = "default decision", "always 0", "basic block count"

DETECT_C = r"""
static int slot_callee(int x) {
  if (x > 3) x = x * 7 + 1; else x = x - 2;
  for (int i = 0; i < x; i++) { if (i & 1) x ^= i; else x += i; }
  return x;
}
int slot_caller(int y) { return slot_callee(y) + 1; }
"""

_MEMO: dict[str, str] = {}


def feature_meanings(slot: str) -> dict[str, str]:
    """Meaning of each compiler-dependent inliner feature, given the slot of the default decision."""
    if slot == BUGGY_SLOT:
        return {FIXED_SLOT: ALWAYS_ZERO, BUGGY_SLOT: DEFAULT_DECISION}
    if slot == FIXED_SLOT:
        return {FIXED_SLOT: DEFAULT_DECISION, BUGGY_SLOT: BLOCK_COUNT}
    raise ConfigError(f"unknown default-decision slot {slot!r} (expected one of {', '.join(SLOTS)})")


def _cache_file() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mlgo_host", "default_slot.json")


def _detecting_clang(compiler: str) -> str | None:
    """The compiler itself, or the clang next to an ``opt``/``llc`` binary."""
    if is_clang_driver(compiler):
        return shutil.which(compiler) or compiler
    real = os.path.realpath(shutil.which(compiler) or compiler)
    cand = os.path.join(os.path.dirname(real), "clang")
    return cand if os.path.exists(cand) else None


class _NeverAndRecord:
    """The detecting session's policy and recorder: answers 0 (so every call site is asked) and keeps
    the two candidate slots' values of each decision.  By shape only: the channel floor does not
    import the policies."""

    def __init__(self) -> None:
        self.values: list[dict[str, int]] = []

    def bind(self, header, advisor) -> None:
        pass

    def act(self, obs) -> int:
        return 0

    def act_logp(self, obs) -> tuple[int, float]:
        return 0, 0.0

    def add(self, obs, action, logp) -> None:
        self.values.append({n: int(obs[n].reshape(-1)[0]) for n in SLOTS if n in obs})

    def finish(self, header) -> None:
        return None


def classify(values: list[dict[str, int]]) -> str:
    """The slot carrying the default decision, from both slots' values at the detecting module's
    call sites; ValueError saying why when they fit neither layout."""
    if not values:
        raise ValueError("the detecting module gave no inlining decision")
    missing = [n for n in SLOTS if any(n not in v for v in values)]
    if missing:
        raise ValueError(f"the inliner header has no {' / '.join(missing)} feature")
    flags = {n: [v[n] for v in values] for n in SLOTS}
    # fixed: inlining_default is the 0/1 decision (inline: 1 somewhere), the block count is real (>1 here)
    if set(flags[FIXED_SLOT]) <= {0, 1} and 1 in flags[FIXED_SLOT] and max(flags[BUGGY_SLOT]) > 1:
        return FIXED_SLOT
    # include-default bug: inlining_default stays 0, the "block count" is the 0/1 decision
    if set(flags[FIXED_SLOT]) == {0} and set(flags[BUGGY_SLOT]) <= {0, 1} and 1 in flags[BUGGY_SLOT]:
        return BUGGY_SLOT
    raise ValueError(f"the values fit neither layout ({FIXED_SLOT}={flags[FIXED_SLOT]}, "
                     f"{BUGGY_SLOT}={flags[BUGGY_SLOT]})")


def _cannot_tell(compiler: str, why: str) -> ConfigError:
    return ConfigError(f"cannot determine the inliner's default-decision slot of {compiler}: {why}; check that "
                       f"`{compiler} -Oz -c FILE.c` compiles, or skip the detection with {ENV_OVERRIDE}={BUGGY_SLOT} "
                       f"(clang <= 20) or {ENV_OVERRIDE}={FIXED_SLOT} (clang >= 21)")


def detect_slot(clang: str, timeout: float = 60.0) -> str:
    """The slot of the default decision, from a detecting compile with ``clang`` within ``timeout``."""
    rec = _NeverAndRecord()
    with scratch_dir("mlgo-slot-") as d:
        src = os.path.join(d, "slot.c")
        with open(src, "w") as f:
            f.write(DETECT_C)
        try:
            res = run_session([clang, "-Oz", "-c", src, "-o", os.path.join(d, "slot.o")],
                              InlineAdvisor(default_slot=FIXED_SLOT), rec, timeout=timeout, recorder=rec)
        except MlgoHostError as e:
            raise _cannot_tell(clang, f"the detecting compile failed: {e}") from None
    if res.returncode != 0:
        tail = res.stderr_tail.strip().splitlines()[-1:] or [""]
        raise _cannot_tell(clang, f"the detecting compile exited {res.returncode} {tail[0][:200]!r}")
    try:
        return classify(rec.values)
    except ValueError as e:
        raise _cannot_tell(clang, str(e)) from None


def default_slot(compiler: str, timeout: float = 60.0) -> str:
    """The feature carrying the inliner's default decision for ``compiler`` (detection gets ``timeout``:
    pass what is left of the user's deadline)."""
    env = os.environ.get(ENV_OVERRIDE)
    if env:
        if env not in SLOTS:
            raise ConfigError(f"{ENV_OVERRIDE}={env!r}: expected one of {', '.join(SLOTS)}")
        return env
    found = shutil.which(compiler)
    if found is None and not os.path.exists(compiler):
        raise CompilerError(f"cannot start the compiler {compiler!r}: not found")
    path = os.path.realpath(found or compiler)
    if path in _MEMO:
        return _MEMO[path]
    st = os.stat(path)
    key = hashlib.sha1(f"{path}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
    cache = _cache_file()
    try:
        data = read_json_object(cache, "default-slot cache")
    except ConfigError:  # missing or damaged: detect again
        data = {}
    slot = data.get(key)
    if slot not in SLOTS:
        clang = _detecting_clang(compiler)
        if clang is None and os.path.basename(path).split("-")[0] not in ("opt", "llc"):
            raise ConfigError(f"{compiler} is not clang, opt or llc: the interactive channel is LLVM's "
                              "(clang 17 or newer)")
        if clang is None:
            raise ConfigError(f"cannot determine the inliner's default-decision slot of {compiler}: no clang next to "
                              f"it to detect the slot with; set {ENV_OVERRIDE} to {' or '.join(SLOTS)}")
        slot = detect_slot(clang, timeout)
        data[key] = slot
        with contextlib.suppress(OSError):  # best effort: a read-only home costs a detecting compile per process
            atomic_write_json(cache, data, indent=None)
    _MEMO[path] = slot
    return slot
