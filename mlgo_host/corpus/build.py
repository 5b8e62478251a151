"""Build an mlgo-utils corpus from a compile database.  A module's ``.bc`` is the frontend's output
before any LLVM pass (never ``-O0`` bitcode, which carries ``optnone``); its ``.cmd`` is the cc1 job of
the original object compile without input and ``-o`` (the NUL-separated form mlgo-utils extracts from
``.llvmcmd``), so optimization and target flags are kept.  A module is rebuilt only when its source is
newer, so a build resumes."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Iterable, Sequence

from mlgo_host.errors import CorpusError
from mlgo_host.fsutil import atomic_path, atomic_write_bytes
from mlgo_host.progress import progress_bar
from mlgo_host.corpus.corpus import read_json, write_description
from mlgo_host.corpus.driver_flags import strip_driver_flags

CXX_EXTS = (".cc", ".cpp", ".cxx", ".c++", ".C", ".mm")


@dataclasses.dataclass(frozen=True)
class CompileEntry:
    """One compile-database entry, normalized."""
    directory: Path
    file: Path  #: absolute source path
    arguments: tuple[str, ...]  #: the original argv, compiler first
    output: Path | None  #: absolute object path (None when the entry has no -o)
    source_arg: str = ""  #: the input as spelled on the command line (keeps source_filename)

    @property
    def source(self) -> str:
        return self.source_arg or str(self.file)

    @property
    def is_cxx(self) -> bool:
        comp = os.path.basename(self.arguments[0]) if self.arguments else ""
        return self.file.suffix in CXX_EXTS or comp.endswith("++")


@dataclasses.dataclass
class BuildReport:
    modules: list[str]  #: every module now in the corpus (built now or before)
    built: int
    reused: int
    failures: list[tuple[str, str]]  #: (source file, reason)
    cxx: int = 0  #: how many of ``modules`` are C++

    def summary(self) -> str:
        return (f"{len(self.modules)} modules ({len(self.modules) - self.cxx} C, {self.cxx} C++): "
                f"{self.built} built, {self.reused} already there, {len(self.failures)} failed")


def load_compile_commands(path: str | os.PathLike) -> list[CompileEntry]:
    """Read and normalize a compile database; CorpusError names the bad entry."""
    p = Path(path)
    data = read_json(p, "compile database not found")
    if not isinstance(data, list):
        raise CorpusError(f"{p}: a compile database is a JSON list of entries")
    out = []
    for i, e in enumerate(data):
        where = f"{p}: entry {i}"
        if not isinstance(e, dict) or "directory" not in e or "file" not in e:
            raise CorpusError(f"{where}: needs 'directory', 'file' and 'command' or 'arguments'")
        if not all(isinstance(e[k], str) and e[k] for k in ("directory", "file")):
            raise CorpusError(f"{where}: 'directory' and 'file' must be non-empty strings (paths)")
        if isinstance(e.get("arguments"), list) and e["arguments"]:
            args = [str(a) for a in e["arguments"]]
        elif isinstance(e.get("command"), str) and e["command"].strip():
            try:
                args = shlex.split(e["command"])
            except ValueError as err:
                raise CorpusError(f"{where}: cannot split 'command': {err}") from None
        else:
            raise CorpusError(f"{where}: needs a non-empty 'command' string or 'arguments' list")
        directory = Path(e["directory"])
        if not directory.is_absolute():
            directory = (p.parent / directory).resolve()
        output = _output_of(args, e.get("output"))
        # an absolute file or output stays as it is (pathlib's / drops ``directory``)
        entry = CompileEntry(directory, Path(os.path.normpath(directory / e["file"])), tuple(args),
                             Path(os.path.normpath(directory / output)) if output is not None else None)
        spelled = next((a for a in args[1:] if _is_input(entry, a)), "")
        out.append(dataclasses.replace(entry, source_arg=spelled))
    return out


def _output_of(args: Sequence[str], explicit: object) -> Path | None:
    for i, a in enumerate(args):
        if a == "-o" and i + 1 < len(args):
            return Path(args[i + 1])
        if a.startswith("-o") and len(a) > 2:
            return Path(a[2:])
    return Path(explicit) if isinstance(explicit, str) and explicit else None


def _is_input(entry: CompileEntry, arg: str) -> bool:
    # an absolute path stays as it is (pathlib's / drops ``directory``)
    return not arg.startswith("-") and os.path.normpath(entry.directory / arg) == str(entry.file)


def compile_flags(entry: CompileEntry, opt_level: str | None = None) -> list[str]:
    """The entry's flags as :func:`~mlgo_host.corpus.driver_flags.strip_driver_flags` leaves them;
    ``opt_level`` replaces every ``-O``."""
    out = strip_driver_flags(entry.arguments[1:], is_input=lambda a: _is_input(entry, a))
    if opt_level:
        out = [opt_level, *(a for a in out if not a.startswith("-O"))]
    if entry.is_cxx and entry.file.suffix not in CXX_EXTS and "-x" not in out:
        out = ["-x", "c++", *out]
    return out


def module_names(entries: Sequence[CompileEntry]) -> list[str]:
    """Module names as mlgo-utils derives them: the object path relative to the common directory of all
    objects, without extension."""
    objs = [e.output if e.output is not None else e.file.with_suffix(".o") for e in entries]
    if not objs:
        return []
    base = os.path.commonpath([str(o.parent) for o in objs])
    stems = []
    for o in objs:
        rel = os.path.relpath(o, base)
        stem, ext = os.path.splitext(rel)
        if ext not in (".o", ".obj"):
            stem = rel
        stems.append("/".join("__" if part == ".." else part for part in Path(stem).parts))
    return numbered(stems)


def numbered(stems: Iterable[str]) -> list[str]:
    """``stems`` with ``.N`` added to the N-th repeat of a stem."""
    seen: dict[str, int] = {}
    names = []
    for stem in stems:
        n = seen.get(stem, 0)
        seen[stem] = n + 1
        names.append(stem if n == 0 else f"{stem}.{n}")
    return names


def cc1_command(clang: str, entry: CompileEntry, flags: Sequence[str], timeout: float = 120.0) -> list[str]:
    """The cc1 job of the object compile (``clang -###``) without program, ``-o`` and input."""
    r = subprocess.run([clang, "-###", *flags, "-c", entry.source, "-o", "mlgo-host-probe.o"], cwd=entry.directory,
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise CorpusError(_tail(r.stderr) or f"clang -### exited with {r.returncode}")
    jobs = [shlex.split(ln) for ln in map(str.strip, r.stderr.splitlines()) if ln.startswith('"') and '"-cc1"' in ln]
    if len(jobs) != 1:
        raise CorpusError(f"the driver ran {len(jobs)} cc1 jobs for this entry (expected 1: offloading, "
                          "several -arch or driver-level -fembed-bitcode are not supported)")
    job = jobs[0][1:]
    out: list[str] = []
    i = 0
    while i < len(job):
        a = job[i]
        i += 1
        if a == "-o":
            i += 1
        elif a == "-x" and i + 1 < len(job) and not job[i + 1].startswith("-"):
            i += 2  # -x <lang> <input>
        else:
            out.append(a)
    if not out or out[0] != "-cc1":
        raise CorpusError(f"unexpected cc1 job from the driver: {' '.join(job[:4])} ...")
    return out


def _tail(text: str, n: int = 400) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    errs = [ln for ln in lines if "error:" in ln]  # (a diagnostic; "error" alone matches -ferror-limit in a cc1 line)
    return " | ".join((errs or lines)[-3:])[-n:]


#: A remark filter that matches no pass: the frontend keeps every call's location (clang's
#: ``LocTrackingOnly``, which no other flag selects), which inline remarks and replay key call sites
#: by, without printing a remark or emitting debug sections.
LOCATION_TRACKING = ("-Rpass=^mlgo-host-location-tracking$",)


def _newer(source: Path, bc: Path) -> bool:
    """As make decides, headers not followed (``--force`` rebuilds everything)."""
    try:
        return source.stat().st_mtime > bc.stat().st_mtime
    except OSError:
        return False


def build_module(clang: str, entry: CompileEntry, name: str, out_dir: Path, opt_level: str | None = None,
                 timeout: float = 300.0, force: bool = False) -> bool:
    """Build one module's ``.bc`` and ``.cmd``; False when they were already there."""
    bc = out_dir / f"{name}.bc"
    cmd_file = out_dir / f"{name}.cmd"
    if not force and bc.exists() and cmd_file.exists() and not _newer(entry.file, bc):
        return False
    if not entry.file.exists():
        raise CorpusError(f"source {entry.file} does not exist")
    if not entry.directory.is_dir():
        raise CorpusError(f"directory {entry.directory} does not exist")
    flags = compile_flags(entry, opt_level)
    cc1 = cc1_command(clang, entry, flags, timeout=timeout)
    if "-O0" in cc1 or not any(a.startswith("-O") for a in cc1):
        raise CorpusError("the entry compiles at -O0 (its bitcode would carry optnone and offer no decisions); "
                          "give it an optimization level (corpus build --opt -Oz)")
    with atomic_path(bc) as tmp:
        cmd = [clang, *flags, "-emit-llvm", "-c", "-Xclang", "-disable-llvm-passes", *LOCATION_TRACKING,
               entry.source, "-o", tmp]
        try:
            r = subprocess.run(cmd, cwd=entry.directory, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CorpusError(f"the frontend did not finish within {timeout:g} s") from None
        if r.returncode != 0:
            raise CorpusError(_tail(r.stderr) or f"clang exited with {r.returncode}")
    atomic_write_bytes(str(cmd_file), "\0".join(cc1).encode("utf-8"))
    return True


def build_corpus(entries: Sequence[CompileEntry], output: str | os.PathLike, *, clang: str = "clang-19",
                 jobs: int | None = None, opt_level: str | None = None, timeout: float = 300.0,
                 progress: bool = True, force: bool = False,
                 names: Sequence[str] | None = None) -> BuildReport:
    """Build (or complete) the corpus in ``output`` and describe every module that now exists;
    ``names`` overrides :func:`module_names`.  Failed modules are reported and skipped."""
    if not entries:
        raise CorpusError("the compile database has no entries")
    # absolute: each frontend runs in its entry's directory
    out_dir = Path(os.path.abspath(output))
    out_dir.mkdir(parents=True, exist_ok=True)
    if names is None:
        names = module_names(entries)
    elif len(names) != len(entries) or len(set(names)) != len(names):
        raise CorpusError("module names must be unique, one per entry")
    jobs = max(1, jobs or os.cpu_count() or 1)
    by_name = dict(zip(names, entries))
    made: dict[str, bool] = {}  #: module -> built now (else already there)
    failures: list[tuple[str, str]] = []
    with progress_bar(total=len(entries), desc="corpus", enabled=progress) as bar, \
            cf.ThreadPoolExecutor(max_workers=jobs) as ex:
        futs = {ex.submit(build_module, clang, e, n, out_dir, opt_level, timeout, force): (e, n)
                for e, n in zip(entries, names)}
        try:
            for fut in cf.as_completed(futs):
                e, n = futs[fut]
                try:
                    made[n] = bool(fut.result())
                except (CorpusError, OSError, subprocess.SubprocessError) as err:
                    failures.append((str(e.file), str(err)))
                bar.update(1)
        except BaseException:
            # Ctrl-C: start no more compiles (leaving the block would wait for every queued one)
            ex.shutdown(wait=True, cancel_futures=True)
            raise
    if not made:
        raise CorpusError(f"no module could be built ({len(failures)} failures; first: "
                          f"{failures[0][0]}: {failures[0][1]})")
    write_description(out_dir, made)
    write_sources(out_dir, {n: entry_identity(by_name[n]) for n in made})
    built = sum(made.values())
    return BuildReport(modules=sorted(made), built=built, reused=len(made) - built, failures=sorted(failures),
                       cxx=sum(by_name[n].is_cxx for n in made))


def write_compile_commands(path: str | os.PathLike, entries: Iterable[dict]) -> None:
    atomic_write_bytes(str(path), (json.dumps(list(entries), indent=1) + "\n").encode("utf-8"))


# -- module identities (see mlgo_host.corpus.identity) ---------------------------

#: module name -> the identity of the compile it came from, kept in the corpus
SOURCES = "module_sources.json"
SOURCES_FORMAT = "mlgo_host.module_sources/1"


def entry_identity(entry: CompileEntry) -> dict:
    """What identifies an entry's compile in a build: absolute source and object paths, and flags."""
    out = entry.output if entry.output is not None else entry.file.with_suffix(".o")
    return {"source": str(entry.file), "output": os.path.normpath(str(out)), "flags": compile_flags(entry)}


def read_sources_file(path: str | os.PathLike) -> dict[str, dict]:
    """Module name -> identity from a ``module_sources.json``."""
    p = Path(path)
    doc = read_json(p, "no module sources")
    if not isinstance(doc, dict) or doc.get("format") != SOURCES_FORMAT or not isinstance(doc.get("modules"), dict):
        raise CorpusError(f"{p}: not a {SOURCES_FORMAT} file")
    return doc["modules"]


def write_sources(corpus_dir: str | os.PathLike, identities: dict[str, dict]) -> None:
    """Merge module name -> identity into the corpus's record."""
    path = Path(corpus_dir) / SOURCES
    have = read_sources_file(path) if path.exists() else {}
    have.update(identities)
    doc = {"format": SOURCES_FORMAT, "modules": dict(sorted(have.items()))}
    atomic_write_bytes(str(path), (json.dumps(doc, indent=1) + "\n").encode("utf-8"))
