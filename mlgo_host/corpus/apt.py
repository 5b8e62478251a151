"""The machine side of ``corpus debian``: apt's sources and tools, and build steps run with their
output in a log."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Iterable, Sequence

from mlgo_host.errors import ConfigError
from mlgo_host.fsutil import atomic_write_bytes

SUITE = "bookworm"
COMPONENT = "main"
#: in sources.list.d: makes apt know the suite's sources when nothing else does
DEB_SRC_FILE = "mlgo-host-deb-src.sources"
#: tool -> the Debian packages that bring it
TOOL_PACKAGES = {"bear": ("bear",), "autoreconf": ("autoconf", "automake", "autopoint", "libtool"), "cmake": ("cmake",),
                 "meson": ("meson",), "ninja": ("ninja-build",), "dpkg-source": ("dpkg-dev",)}
APT_OPTS = ("-q", "-o", "DPkg::Lock::Timeout=600")


def _deb822_stanzas(text: str) -> list[dict[str, str]]:
    stanzas: list[dict[str, str]] = [{}]
    last = None
    for line in text.splitlines():
        if not line.strip():
            stanzas.append({})
            last = None
        elif line.lstrip().startswith("#"):
            continue
        elif line[0] in " \t" and last:
            stanzas[-1][last] += " " + line.strip()
        elif ":" in line:
            k, _, v = line.partition(":")
            last = k.strip().lower()
            stanzas[-1][last] = v.strip()
    return [s for s in stanzas if s]


def _one_line_entries(text: str) -> list[dict[str, str]]:
    """One-line ``deb[-src] [opts] URI SUITE COMPONENT...`` entries as stanzas."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        line = re.sub(r"\[[^]]*\]", " ", line)  # [signed-by=... arch=...]
        f = line.split()
        if len(f) >= 4 and f[0] in ("deb", "deb-src"):
            out.append({"types": f[0], "uris": f[1], "suites": f[2], "components": " ".join(f[3:])})
    return out


def apt_entries(etc_apt: str | os.PathLike = "/etc/apt") -> list[tuple[Path, dict[str, str]]]:
    """(file, stanza) of every apt source, deb822 or one-line, enabled or not."""
    etc = Path(etc_apt)
    files = [etc / "sources.list"] + sorted((etc / "sources.list.d").glob("*.list")) \
        + sorted((etc / "sources.list.d").glob("*.sources"))
    out = []
    for f in files:
        try:
            text = f.read_text(errors="replace")
        except OSError:
            continue
        stanzas = _deb822_stanzas(text) if f.suffix == ".sources" else _one_line_entries(text)
        out += [(f, s) for s in stanzas]
    return out


def _serves(stanza: dict[str, str], kind: str) -> bool:
    return (kind in stanza.get("types", "").split() and SUITE in stanza.get("suites", "").split()
            and COMPONENT in stanza.get("components", "").split()
            and stanza.get("enabled", "yes").lower() != "no")


def ensure_deb_src(etc_apt: str | os.PathLike = "/etc/apt") -> Path | None:
    """When no enabled deb-src entry serves :data:`SUITE`'s :data:`COMPONENT`, write :data:`DEB_SRC_FILE`
    mirroring the suite's ``deb`` entry and return its path (then run ``apt-get update``); else None."""
    entries = apt_entries(etc_apt)
    if any(_serves(s, "deb-src") for _, s in entries):
        return None
    mirror = [(f, s) for f, s in entries if _serves(s, "deb")]
    # the Debian archive proper, not the security one nor a third party's
    mirror.sort(key=lambda fs: ("deb.debian.org" not in fs[1].get("uris", ""), "security" in fs[1].get("uris", "")))
    if not mirror:
        raise ConfigError(f"apt has no '{SUITE} {COMPONENT}' deb entry to mirror for sources; add a deb-src "
                          f"line for {SUITE} {COMPONENT} to /etc/apt/sources.list.d/")
    f, s = mirror[0]
    lines = [f"# Added by mlgo-host corpus debian: the sources of {SUITE} {COMPONENT}, mirroring {f}.",
             "Types: deb-src", f"URIs: {s['uris']}", f"Suites: {SUITE}", f"Components: {COMPONENT}"]
    if s.get("signed-by"):
        lines.append(f"Signed-By: {s['signed-by']}")
    path = Path(etc_apt) / "sources.list.d" / DEB_SRC_FILE
    try:
        atomic_write_bytes(str(path), ("\n".join(lines) + "\n").encode())
        os.chmod(path, 0o644)
    except PermissionError:
        raise ConfigError(f"apt has no {SUITE} {COMPONENT} sources and {path} needs root; write it as root: "
                          + " / ".join(lines[1:])) from None
    return path


def run_apt(args: Sequence[str], log, timeout: float) -> None:
    """``apt-get ARGS...`` as root, non-interactive."""
    argv = ["apt-get", *APT_OPTS, *args]
    if os.geteuid() != 0:
        if not shutil.which("sudo"):
            raise ConfigError("apt-get needs root (run as root or install sudo)")
        argv = ["sudo", "-n", *argv]
    run_logged(argv, cwd=None, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"), log=log, timeout=timeout,
               what=f"apt-get {args[0]}")


def ensure_tools(tools: Iterable[str], log, timeout: float) -> None:
    """Install the Debian packages of the missing tools."""
    if pkgs := sorted({p for t in tools if shutil.which(t) is None for p in TOOL_PACKAGES[t]}):
        run_apt(["install", "-y", "--no-install-recommends", *pkgs], log, timeout)


# -- running a step ------------------------------------------------------------------

class StepFailed(Exception):
    pass


def run_logged(argv: Sequence[str], *, cwd: Path | None, env: dict[str, str] | None, log, timeout: float,
               what: str | None = None) -> None:
    """Run ``argv`` with its output appended to ``log``; StepFailed when it fails or outlives ``timeout``.
    It runs in its own session so that a timeout or an interrupt kills make's compilers too."""
    what = what or " ".join(argv[:3])
    log.write(f"\n$ {' '.join(argv)}\n")
    log.flush()
    try:
        proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        raise StepFailed(f"{argv[0]}: {e.strerror or e}") from None
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise StepFailed(f"{what} did not finish within {timeout:g} s") from None
    except BaseException:
        _kill_group(proc)
        raise
    if rc != 0:
        raise StepFailed(f"{what} exited with {rc}")


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=5)
            return
        except (ProcessLookupError, PermissionError):
            return
        except subprocess.TimeoutExpired:
            continue


def log_size(log) -> int:
    log.flush()
    return os.path.getsize(log.name)


def log_tail(log, since: int = 0, n: int = 2) -> str:
    """Why a step failed, from what it logged after byte ``since``: its first compiler error (what make
    says after it follows from it), else its last error-looking lines, else its last lines."""
    log.flush()
    try:
        with open(log.name, "rb") as f:
            f.seek(since)
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("$ ")]
    if diag := [ln for ln in lines if re.search(r":\d+:(\d+:)? (fatal )?error: ", ln)]:
        return re.sub(r"^\S*/", "", diag[0])  # the file's name, not its path in the cache
    errs = [ln for ln in lines if re.search(r"\berror\b|^E: |not found|No such", ln, re.I)]
    return " | ".join((errs or lines)[-n:])
