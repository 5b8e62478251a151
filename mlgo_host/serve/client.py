"""``mlgo-clang`` / ``mlgo-clang++``: a drop-in compiler whose optimization decisions a running
``mlgo-host serve`` answers (docs/serving.md).  Never hangs: every wait is bounded and checks the
server's liveness (a compiler left blocking on its FIFOs is killed, then the fallback applies); the
compiler dies with the client (PR_SET_PDEATHSIG).  Runs once per compile: nothing heavy is imported."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time
from collections.abc import Callable

from mlgo_host import procs
from mlgo_host.languages import command_language
from mlgo_host.serve import slots as S
from mlgo_host.serve.trust import untrusted, untrusted_tune_dir

PROG = "mlgo-clang"

#: driver options whose value is the next argument
_SEPARATE = {
    "-o", "-x", "-I", "-D", "-U", "-include", "-imacros", "-isystem", "-iquote", "-idirafter", "-iprefix",
    "-iwithprefix", "-iwithprefixbefore", "-isysroot", "-isystem-after", "-cxx-isystem", "-ivfsoverlay",
    "-MF", "-MT", "-MQ", "-MJ", "-Xclang", "-mllvm", "-Xlinker", "-Xassembler", "-Xpreprocessor", "-arch",
    "-target", "-L", "-T", "-u", "-z", "-e", "-F", "-framework", "--sysroot", "-gcc-toolchain",
    "--gcc-toolchain", "-working-directory", "-serialize-diagnostics", "-dependency-file",
    "-dependency-dot", "-A", "--param", "-Xopenmp-target", "-Xcuda-ptxas", "-Xcuda-fatbinary",
    "-resource-dir", "-B", "--prefix", "-I-", "-install_name", "-aux-info", "-Xoffload-linker",
}
#: options that make the command something else than "compile to an object"
_NOT_OBJECT = {"-E", "-S", "-M", "-MM", "-fsyntax-only", "-emit-llvm", "-###", "-emit-ast", "-P",
               "--precompile", "-fdriver-only", "--analyze", "-print-search-dirs"}
_SOURCE_EXT = {".c", ".i", ".cc", ".cp", ".cxx", ".cpp", ".CPP", ".c++", ".C", ".ii", ".m", ".mi", ".mm",
               ".M", ".mii", ".bc", ".ll"}


def classify(argv: list[str], cwd: str | None = None) -> dict:
    """{"compile", "reason", "source", "output"} of a command line: "compile" only for one source
    compiled to an object with optimization on (the only commands that reach an advisor)."""
    inputs: list[str] = []
    output = None
    lang = None
    opt = "0"
    has_c = False
    args = iter(argv)
    for a in args:
        if a in _SEPARATE:
            value = next(args, None)
            if value is not None and a == "-o":
                output = value
            elif value is not None and a == "-x":
                lang = value
        elif a == "-c":
            has_c = True
        elif a in _NOT_OBJECT or a.startswith(("-print-", "-dump")) or a in ("--version", "--help", "-help"):
            return {"compile": False, "reason": f"{a} does not compile to an object"}
        elif a.startswith("-O"):
            opt = a[2:] or "1"
        elif a.startswith("-o") and len(a) > 2:
            output = a[2:]
        elif a.startswith("-x") and len(a) > 2:
            lang = a[2:]
        elif a == "-" or not a.startswith("-"):
            inputs.append(a)
    if not has_c:
        return {"compile": False, "reason": "no -c (linking or preprocessing)"}
    if len(inputs) != 1:
        return {"compile": False, "reason": f"{len(inputs)} inputs (one source per served compile)"}
    src = inputs[0]
    if src == "-":
        return {"compile": False, "reason": "source on stdin"}
    if lang is not None and lang != "none":
        if lang.startswith("assembler"):
            return {"compile": False, "reason": f"-x {lang}"}
    elif os.path.splitext(src)[1] not in _SOURCE_EXT:
        return {"compile": False, "reason": f"{src} is not a C/C++/IR source"}
    if opt == "0":
        return {"compile": False, "reason": "-O0 runs no advisor"}
    if output is None:
        output = os.path.splitext(os.path.basename(src))[0] + ".o"
    if output == "-":
        return {"compile": False, "reason": "object written to stdout"}
    cwd = cwd or os.getcwd()
    return {"compile": True, "reason": "", "source": os.path.join(cwd, src),
            "output": os.path.normpath(os.path.join(cwd, output))}


def _which(name: str) -> str | None:
    if os.sep in name:
        return os.path.abspath(name) if os.access(name, os.X_OK) else None
    for d in os.get_exec_path():
        p = os.path.join(d, name)
        if os.access(p, os.X_OK) and not os.path.isdir(p):
            return p
    return None


def _say(kind: str, msg: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"{PROG}: {kind}: {msg}\n".encode())


def _tuned_flags(tuned: str, plain: list[str], plan: dict, quiet: bool,
                 label: str = "MLGO_REPLAY") -> tuple[list[str], str, dict]:
    """(this compile's tuned module's flags or [], why ``tuned`` is unusable or "" (after ``label``),
    its report's fields)."""
    from mlgo_host.search.tunedir import TunedDir, identity_of
    from mlgo_host.errors import MlgoHostError

    if why := untrusted_tune_dir(tuned):
        return [], f"{label}: {why}", {}
    try:
        t = TunedDir(tuned)
        ident = identity_of(plain, os.getcwd(), plan["source"], plan["output"])
        name = None if ident is None else t.index.match(ident)
        changed = name is not None and t.changed(name, plan["source"])
        flags = t.flags_for(name, changed)  # (its replay file checked: clang fails on a missing one)
    except MlgoHostError as e:
        return [], f"{label}: {e}", {}
    if name is None and ident is not None and not quiet:
        _note_other_flags(t, ident, plan)
    if flags and changed and not quiet:
        _say("note", f"{plan['source']} changed since it was tuned ({t.path}): its tuned sites that still match "
                     "are inlined, the compiler decides the rest (tune it again to refresh them)")
    m = t.modules.get(name or "", {})
    return flags, "", {"tune_dir": t.path, "module": name, "changed": changed,
                       "default_size": m.get("default_size"), "best_size": m.get("best_size")}


def _note_other_flags(t, ident: dict, plan: dict) -> None:
    """One note when this compile (``ident``) is a tuned module's (its source and object) with other flags:
    its tuned decisions are not applied (a build reconfigured without the tuned flags gets nothing)."""
    if (miss := t.index.other_flags(ident)) is None:
        return
    name, here, there = miss
    if not (t.modules[name].get("inline_replay") or t.modules[name].get("base_flags")):  # what flags_for adds
        return
    shown = "; ".join(f"{what}: {' '.join(fl[:4])}{' ...' if len(fl) > 4 else ''}"
                      for what, fl in (("only here", here), ("only when tuned", there)) if fl)
    shown = shown or "flags in another order"
    _say("note", f"{plan['source']} was tuned ({t.path}) with other flags ({shown}): compiled without its tuned "
                 "decisions")


def _by_flags(cmd: list[str], plan: dict, tuned: dict, root: str | None, info: dict | None) -> int:
    """Compile ``cmd`` (with a tune directory's flags): exec'd, unless a live server records compiles;
    then as our child, reported to the server (``DIR/reports``)."""
    if root is None or not (info or {}).get("reports"):
        return _exec(cmd)
    t0 = time.time()
    try:
        proc = _Spawned(cmd)
    except FileNotFoundError as e:
        _say("error", f"{e} (set MLGO_CLANG / MLGO_CLANGXX)")
        return 127
    try:
        rc = proc.wait(None)  # plain flags, no FIFO to block on; the compiler dies with us (PDEATHSIG)
    finally:
        if proc.returncode is None:
            proc.kill()
            procs.remove_temp_outputs(plan["output"], t0)
    doc = {"time": t0, "client_pid": os.getpid(), "cwd": os.getcwd(), "source": plan["source"],
           "output": plan["output"], "compiler": _which(cmd[0]) or cmd[0],
           "build": os.environ.get("MLGO_BUILD") or None, "returncode": rc,
           "wall_s": round(time.time() - t0, 4), **tuned}
    d = os.path.join(root, S.REPORTS)
    if not untrusted(d):  # (a report that cannot be written never fails the compile)
        with contextlib.suppress(OSError):
            S.write_atomic(os.path.join(d, f"{os.getpid()}-{time.monotonic_ns()}.json"), json.dumps(doc).encode())
    return rc if rc >= 0 else 128 - rc


def _exec(cmd: list[str]) -> int:
    try:
        os.execvp(cmd[0], cmd)
    except OSError as e:
        _say("error", f"cannot run {cmd[0]!r}: {e.strerror} (set MLGO_CLANG / MLGO_CLANGXX)")
    return 127


class _Spawned:
    """The real compiler as our child; it is SIGKILLed if we die."""

    def __init__(self, cmd: list[str], cpu: int | None = None, quiet: bool = False):
        libc_prctl = None
        with contextlib.suppress(OSError, AttributeError, ImportError):
            import ctypes

            libc_prctl = ctypes.CDLL(None, use_errno=True).prctl
        parent = os.getpid()
        r, w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # child
            try:
                os.close(r)
                if libc_prctl is not None:
                    libc_prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
                    if os.getppid() != parent:
                        os._exit(137)
                if cpu is not None:
                    with contextlib.suppress(OSError):
                        os.sched_setaffinity(0, {cpu})
                for sig in (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM):
                    signal.signal(sig, signal.SIG_DFL)
                if quiet:  # the guard's second compile: its diagnostics were printed once already
                    null = os.open(os.devnull, os.O_WRONLY)
                    os.dup2(null, 1)
                    os.dup2(null, 2)
                os.execvp(cmd[0], cmd)
            except BaseException as e:
                try:
                    os.write(w, str(getattr(e, "strerror", None) or e).encode())
                finally:
                    os._exit(127)
        os.close(w)
        with os.fdopen(r, "rb") as f:  # EOF at the exec (CLOEXEC), or the child's error
            err = f.read()
        self.pid = pid
        self.returncode: int | None = None
        self.pidfd = -1  # (wait() below reaps a child that could not exec)
        if err:
            self.wait(None)
            raise FileNotFoundError(f"cannot run {cmd[0]!r}: {err.decode(errors='replace')}")
        with contextlib.suppress(AttributeError, OSError):
            self.pidfd = os.pidfd_open(pid)

    def wait(self, timeout: float | None) -> int | None:
        """Exit status (negative = killed by that signal) or None on timeout."""
        if self.returncode is not None:
            return self.returncode
        if timeout is not None:
            if self.pidfd >= 0:
                p = select.poll()
                p.register(self.pidfd, select.POLLIN)
                if not p.poll(timeout * 1000.0):
                    return None
            else:  # no pidfd (an old kernel): poll, leaving the exit to be reaped below
                end = time.monotonic() + timeout
                while not os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                    if time.monotonic() >= end:
                        return None
                    time.sleep(0.002)
        _, st = os.waitpid(self.pid, 0)  # EINTR is retried (PEP 475)
        self.returncode = os.waitstatus_to_exitcode(st)
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.wait(None)


def _env_float(name: str, default: float) -> float:
    """Seconds from the environment: a finite number, 0 or more (else a warning and ``default``)."""
    v = os.environ.get(name)
    if not v:
        return default
    try:
        seconds = float(v)
    except ValueError:
        seconds = -1.0
    if not 0.0 <= seconds < float("inf"):  # (also false for nan)
        _say("warning", f"{name}={v!r} is not a number of seconds, 0 or more; using {default:g}")
        return default
    return seconds


def _guard(plain: list[str], output: str) -> dict:
    """After a served compile: compile ``plain`` beside ``output`` and keep the smaller valid object;
    the stats fields. On any failure the policy's object stays."""
    from mlgo_host.serve import guard as G

    t0 = time.time()
    tmp = G.temp_output(output)
    cmd, why = G.guard_command(plain, tmp)
    if cmd is None:
        return {"guard": "skipped", "guard_reason": why}
    proc = None
    try:
        proc = _Spawned(cmd, quiet=True)
        rc = proc.wait(None)  # no FIFO to block on, and the compiler dies with us (PDEATHSIG)
        if rc != 0:
            return {"guard": "policy", "guard_reason": f"the default compile failed (exit status {rc})"}
        got = G.keep_smaller(output, tmp, plain[0])
    except OSError as e:  # cannot run it, or the rename failed: the policy's object stays
        return {"guard": "policy", "guard_reason": f"{type(e).__name__}: {e}"}
    finally:
        if proc is not None and proc.returncode is None:
            proc.kill()
        S.unlink_quiet(tmp)
        procs.remove_temp_outputs(tmp, t0)
    got["guard_s"] = round(time.time() - t0, 4)
    return got


def _acquire(root: str, info: dict, wait_s: float, stale_s: float):
    """(slot, lock fd, generation) or (None, None, reason)."""
    n = int(info.get("slots", 0))
    if n < 1:
        return None, None, f"server.json in {root} lists no slots"
    sid = info["id"]
    first = os.getpid() % n
    delay = 0.0005
    t0 = time.monotonic()
    next_check = t0 + 0.5
    while True:
        for i in range(n):
            k = (first + i) % n
            sdir = S.slot_dir(root, k)
            if why := untrusted(sdir):
                return None, None, f"MLGO_CHANNELS: {why}"
            fd = S.try_lock(os.path.join(sdir, S.LOCK)) if os.path.isdir(sdir) else None
            if fd is None:
                continue
            gen = S.read_text(os.path.join(sdir, S.READY))
            if gen and gen.startswith(sid + ":"):
                return k, fd, gen
            S.unlock(fd)  # locked but not ready: the server is still recording the last compile
        now = time.monotonic()
        if now - t0 > wait_s:
            return None, None, f"no free slot in {root} within {wait_s:g} s (MLGO_WAIT)"
        if now > next_check:
            next_check = now + 0.5
            live, why = S.server_status(root, stale_s, sid)
            if live is None:
                return None, None, why
        time.sleep(delay)
        delay = min(delay * 2, 0.02)


def main(kind: str = "c", argv: list[str] | None = None) -> int:
    """Compile ``argv``: served, with a tune directory's flags, or plainly. Returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    var, default = ("MLGO_CLANGXX", "clang++-19") if kind == "cxx" else ("MLGO_CLANG", "clang-19")
    plain = [os.environ.get(var) or default] + argv
    mode = os.environ.get("MLGO_FALLBACK") or "plain"
    if mode not in ("plain", "fail"):
        _say("error", f"MLGO_FALLBACK={mode!r}: must be 'plain' or 'fail'")
        return 2
    quiet = os.environ.get("MLGO_QUIET", "") not in ("", "0")
    fallback = _fallback_to(mode, quiet, plain)
    plan = classify(argv)
    if not plan["compile"]:
        return _exec(plain)
    channels, root = _channels_of(plain, plan)
    tuned = os.environ.get("MLGO_REPLAY")
    if tuned:
        flags, why, module = _tuned_flags(tuned, plain, plan, quiet)
        if why:
            return fallback(why, "the tuned flags")
        if flags:  # the compile's server serves none of it, but it records the build's compiles
            stale_s = _env_float("MLGO_STALE", 10.0)
            root = os.path.abspath(root) if root else None
            info = S.server_status(root, stale_s)[0] if root and not untrusted(root) else None
            return _by_flags(plain + flags, plan, module, root, info)
    if not root:
        if mode == "fail" and not tuned:
            return fallback("MLGO_CHANNELS is not set")
        return _exec(plain)
    root = os.path.abspath(root)
    if why := untrusted(root):
        return fallback(f"{channels}: {why}")
    stale_s = _env_float("MLGO_STALE", 10.0)
    info, why = S.server_status(root, stale_s)
    if info is None:
        return fallback(why)
    if info.get("replay") and not tuned:  # serve --replay T: T's compiler replays need no slot
        flags, why, module = _tuned_flags(info["replay"], plain, plan, quiet, "serve --replay")
        if flags:
            return _by_flags(plain + flags, plan, module, root, info)
        if why and not quiet:  # (damaged since the server started): the server's policy serves it
            _say("warning", f"{why}; compiling without the tuned flags")
    k, lock_fd, gen = _acquire(root, info, _env_float("MLGO_WAIT", 600.0), stale_s)
    if k is None:
        return fallback(gen)
    return _SlotCompile(plain, plan, root, info, k, lock_fd, gen, stale_s).run(fallback)


def _channels_of(plain: list[str], plan: dict) -> tuple[str, str | None]:
    """(the variable, the server directory) for this compile: ``MLGO_CHANNELS_C`` or ``MLGO_CHANNELS_CXX``
    by its language when set, so that C and C++ can each have a server of their own, else ``MLGO_CHANNELS``."""
    language = command_language(plain, plan.get("source") or "")
    own = {"C": "MLGO_CHANNELS_C", "C++": "MLGO_CHANNELS_CXX"}.get(language or "")
    if own and os.environ.get(own):
        return own, os.environ[own]
    return "MLGO_CHANNELS", os.environ.get("MLGO_CHANNELS")


def _fallback_to(mode: str, quiet: bool, plain: list[str]) -> Callable[..., int]:
    """What a compile that cannot be served does: MLGO_FALLBACK=fail returns 2, else the plain command."""

    def fallback(reason: str, without: str = "the server") -> int:
        if mode == "fail":
            _say("error", f"{reason}; not compiling (MLGO_FALLBACK=fail; set MLGO_FALLBACK=plain to compile without {without})")
            return 2
        if not quiet:
            _say("warning", f"{reason}; compiling without {without}")
        return _exec(plain)

    return fallback


class _SlotCompile:
    """The compile served by slot ``k`` (held by ``lock_fd``, offered as generation ``gen``)."""

    def __init__(self, plain: list[str], plan: dict, root: str, info: dict, k: int, lock_fd: int, gen: str,
                 stale_s: float):
        self.plain, self.plan, self.root, self.info, self.k = plain, plan, root, info, k
        self.lock_fd, self.gen, self.stale_s = lock_fd, gen, stale_s
        self.sdir = S.slot_dir(root, k)
        self.sid = info["id"]
        self.proc: _Spawned | None = None
        self.ctl = -1
        self.t0 = time.time()

    def run(self, fallback: Callable[..., int]) -> int:
        """The exit status (or the fallback's); every way out kills a compiler still running and
        releases the slot."""
        k, root = self.k, self.root
        try:
            S.unlink_quiet(os.path.join(self.sdir, S.READY))  # the slot is ours now
            try:
                self.ctl = os.open(os.path.join(self.sdir, S.CTL), os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as e:
                return fallback(f"slot {k} of {root} does not answer ({e.strerror})")
            try:
                self.proc = self._spawn()
            except FileNotFoundError as e:
                _say("error", f"{e} (set MLGO_CLANG / MLGO_CLANGXX)")
                return 127
            self._write_request()
            try:
                os.write(self.ctl, (json.dumps({"op": "start", "gen": self.gen}) + "\n").encode())
            except OSError as e:
                self._kill()
                return fallback(f"slot {k} of {root} stopped answering ({e.strerror})")
            rc, why = self._wait()
            if rc is None:
                return fallback(why)
            self._send_done(rc)
            if rc != 0 and (why := self._given_up()) is not None:
                return fallback(why)
            return rc if rc >= 0 else 128 - rc
        finally:
            if self.proc is not None and self.proc.returncode is None:
                self._kill()
            if self.ctl >= 0:
                os.close(self.ctl)
            S.unlock(self.lock_fd)

    def _spawn(self) -> _Spawned:
        """The real compiler with the slot's channel flags, on the slot's CPU when the server pins it."""
        base = S.channel_base(self.root, self.k)
        flags = [f.replace(S.BASE_PLACEHOLDER, base) for f in self.info.get("flags", [])]
        cpu = (self.info.get("pin") or {}).get(str(self.k))
        return _Spawned(self.plain + flags, cpu if isinstance(cpu, int) else None)

    def _write_request(self) -> None:
        """What the server records of this compile (read once "start" arrives)."""
        plan = self.plan
        S.write_atomic(os.path.join(self.sdir, S.REQUEST), json.dumps({
            "gen": self.gen, "client_pid": os.getpid(), "compiler_pid": self.proc.pid, "argv": self.plain,
            "cwd": os.getcwd(), "source": plan["source"], "output": plan["output"],
            "compiler": _which(self.plain[0]) or self.plain[0],
            "build": os.environ.get("MLGO_BUILD") or None, "time": self.t0,
        }).encode())

    def _kill(self) -> None:
        self.proc.kill()
        procs.remove_temp_outputs(self.plan["output"], self.t0)

    def _wait(self) -> tuple[int | None, str]:
        """(exit status, ""), or (None, why) with the compiler killed when the server went away."""
        while True:
            if (rc := self.proc.wait(0.5)) is not None:
                return rc, ""
            live, why = S.server_status(self.root, self.stale_s, self.sid, in_flight=True)
            nxt = S.read_text(os.path.join(self.sdir, S.READY))
            if live is None or (nxt and nxt != self.gen):
                # the server is gone, or moved on without our compiler (which may block in open() forever)
                self._kill()
                return None, (f"{why} during the compile" if live is None else
                              f"slot {self.k} of {self.root} gave up on this compile")

    def _send_done(self, rc: int) -> None:
        """Tell the server how the compile ended (and the guard's outcome, when it runs one)."""
        done = {"op": "done", "gen": self.gen, "returncode": rc, "wall_s": round(time.time() - self.t0, 4)}
        if rc == 0:
            from mlgo_host.serve.guard import wanted

            if wanted(self.info):
                done["guard"] = _guard(self.plain, self.plan["output"])
        with contextlib.suppress(OSError):
            os.write(self.ctl, (json.dumps(done) + "\n").encode())

    def _given_up(self) -> str | None:
        """Why a failed compile falls back (the server aborted or went away; slot released, outputs
        removed); None when the failure is the compile's own."""
        aborted = S.read_text(os.path.join(self.sdir, S.ABORTED)) == self.gen
        live, why = S.server_status(self.root, self.stale_s, self.sid, in_flight=True)
        if aborted or live is None:
            procs.remove_temp_outputs(self.plan["output"], self.t0)
            S.unlock(self.lock_fd)
            self.lock_fd = None
            return "the server aborted the session (see its log)" if aborted else f"{why} during the compile"
        return None


def _main(kind: str) -> int:
    try:
        return main(kind)
    except KeyboardInterrupt:  # the compiler was killed in _SlotCompile.run's finally
        return 130


def main_c() -> int:
    return _main("c")


def main_cxx() -> int:
    global PROG
    PROG = "mlgo-clang++"
    return _main("cxx")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main_c())
