"""A corpus from the Debian source packages (bookworm main) of a packages file, each built as upstream
builds it (docs/corpora.md: the steps, the module names, ``packages.json`` and ``logs/``).  A source is
extracted afresh for every build: ``bear`` records only the compiles that run, so a tree left half built
would give an incomplete compile database."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Callable, Collection, Iterable, Sequence

from mlgo_host.corpus.apt import (COMPONENT, SUITE, TOOL_PACKAGES, StepFailed, ensure_deb_src, ensure_tools,
                                  log_size, log_tail, run_apt, run_logged)
from mlgo_host.corpus.build import (CXX_EXTS, BuildReport, CompileEntry, build_corpus, load_compile_commands,
                                    numbered)
from mlgo_host.corpus.corpus import write_description
from mlgo_host.formats import read_format_json
from mlgo_host.errors import ConfigError, CorpusError
from mlgo_host.fsutil import atomic_write_bytes
from mlgo_host.progress import progress_bar

REPORT = "packages.json"
REPORT_FORMAT = "mlgo_host.debian_packages/1"
LOGS = "logs"
BUILT_STAMP = ".mlgo-built"
#: bear's compile database, beside (not inside) the extracted tree
DATABASE = "compile_commands.json"

#: directory names that hold other projects' code
VENDORED_DIRS = frozenset({"third_party", "third-party", "thirdparty", "3rdparty", "vendor", "vendored",
                           "deps", "external", "contrib"})
#: the version of :func:`select_entries`' rules: a package chosen by other rules is chosen again
SELECTION = 2
#: where gnulib-tool puts its modules in the packages that import gnulib
GNULIB_DIRS = frozenset({"lib", "gl", "gnu", "gnulib"})
TEST_DIRS = frozenset({"test", "tests"})
#: source suffix -> language (Objective-C++ is not C++ for this corpus)
LANGUAGES = {".c": "C", **{e: "C++" for e in CXX_EXTS if e != ".mm"}}
BUILD_SYSTEMS = ("autotools", "cmake", "meson", "make")
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9+.-]+")


class PackageSkipped(Exception):
    """A package that cannot go into the corpus; the message is its reason."""


# -- the packages file ---------------------------------------------------------

def default_packages_file() -> Path:
    return Path(str(resources.files("mlgo_host") / "data" / "debian_packages.txt"))


def read_packages_file(path: str | os.PathLike | None = None) -> list[str]:
    """Source package names, one a line (``#`` comments; order kept, duplicates once)."""
    p = Path(path) if path is not None else default_packages_file()
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{p}: cannot read the packages file: {e.strerror or e}") from None
    names: dict[str, None] = {}  # in order, each once
    for n, line in enumerate(text.splitlines(), 1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        if not _NAME_RE.fullmatch(name):
            raise ConfigError(f"{p}:{n}: {name!r} is not a Debian source package name")
        names[name] = None
    if not names:
        raise ConfigError(f"{p}: the packages file names no package")
    return list(names)


def select_packages(allowed: Sequence[str], requested: str | Sequence[str] | None) -> list[str]:
    """The requested packages (``"a,b"`` or a list) in the order asked; all of ``allowed`` when None."""
    if requested is None:
        return list(allowed)
    if isinstance(requested, str):
        requested = requested.split(",")
    want = [n.strip() for n in requested if n.strip()]
    if not want:
        raise ConfigError("--packages names no package")
    if unknown := [n for n in want if n not in allowed]:
        raise ConfigError(f"not in the packages file: {', '.join(unknown)} (only the packages it lists may be "
                          "built; see --packages-file)")
    return list(dict.fromkeys(want))


# -- what of a compile database goes into the corpus -------------------------------

@dataclasses.dataclass
class Selection:
    entries: list[CompileEntry]
    names: list[str]  #: module names, ``PACKAGE/path/without/suffix``
    left_out: dict[str, int]  #: reason -> how many entries


def language(path: str | os.PathLike) -> str | None:
    """"C", "C++" or None (not a C or C++ source), by suffix."""
    return LANGUAGES.get(Path(path).suffix)


def is_vendored(rel: str | os.PathLike, others: Collection[str] = (), gnulib: bool = False) -> bool:
    """Whether ``rel`` (in the package tree) is another project's code: under a vendored directory or
    one named like another package (bash's ``lib/readline/``), or in gnulib's when it imports gnulib.
    Such code could be in another corpus or package and put one file on both sides of a split."""
    dirs = [part.lower() for part in Path(rel).parts[:-1]]
    if gnulib and dirs and dirs[0] in GNULIB_DIRS:
        return True
    return any(d in VENDORED_DIRS or d in others for d in dirs)


def imports_gnulib(tree: str | os.PathLike) -> bool:
    """gnulib-tool leaves m4/gnulib-comp.m4 (at the top or one level down) in the packages it copies
    modules into."""
    return any(p.is_file() for pattern in ("m4", "*/m4") for p in Path(tree).glob(f"{pattern}/gnulib-comp.m4"))


def is_test(rel: str | os.PathLike) -> bool:
    return any(part.lower() in TEST_DIRS for part in Path(rel).parts[:-1])


def select_entries(package: str, entries: Iterable[CompileEntry], tree: str | os.PathLike,
                   others: Iterable[str] = ()) -> Selection:
    """One entry per C/C++ source inside ``tree``, not vendored (``others``: the other packages' names)
    and not a test, named ``PACKAGE/path/without/suffix``.  Tests are left out because whether they are
    built depends on the build system's defaults, and they are not code that ships."""
    root = os.path.realpath(tree)
    others = frozenset(o.lower() for o in others) - {package.lower()}
    gnulib = imports_gnulib(tree)
    left_out = {"not C or C++": 0, "outside the tree": 0, "vendored": 0, "tests": 0, "compiled again": 0}
    by_file: dict[str, CompileEntry] = {}
    # sorted: which of a file's compiles is kept does not depend on the order a parallel build ran them in
    for e in sorted(entries, key=lambda e: (str(e.file), e.arguments)):
        if language(e.file) is None:
            left_out["not C or C++"] += 1
            continue
        real = os.path.realpath(e.file)
        if os.path.commonpath([root, real]) != root:
            left_out["outside the tree"] += 1
            continue
        rel = os.path.relpath(real, root)
        if is_vendored(rel, others, gnulib):
            left_out["vendored"] += 1
        elif is_test(rel):
            left_out["tests"] += 1
        elif rel in by_file:
            left_out["compiled again"] += 1
        else:
            by_file[rel] = e
    names = numbered(f"{package}/{os.path.splitext(rel)[0]}" for rel in by_file)
    return Selection(list(by_file.values()), names, {k: v for k, v in left_out.items() if v})


# -- the build system ------------------------------------------------------------

def _debian_file(tree: Path, name: str) -> str:
    try:
        return (tree / "debian" / name).read_text(errors="replace")
    except OSError:
        return ""


def _debian_hint(tree: Path) -> str | None:
    """``--buildsystem=X`` in debian/rules, else a build dependency on cmake or meson."""
    if m := re.search(r"--buildsystem[= ]+(\w+)", _debian_file(tree, "rules")):
        return {"autoconf": "autotools", "cmake": "cmake", "meson": "meson", "makefile": "make"}.get(m.group(1))
    m = re.search(r"^Build-Depends(?:-Arch|-Indep)?:(.*(?:\n[ \t].*)*)", _debian_file(tree, "control"), re.M)
    deps = {re.split(r"[\s(:\[<]", d.strip(), maxsplit=1)[0] for d in m.group(1).replace("|", ",").split(",")} \
        if m else set()
    return next((system for system in ("meson", "cmake") if system in deps), None)


def source_directory(tree: str | os.PathLike) -> Path:
    """The tree, or the subdirectory debian/rules names with ``--sourcedirectory``."""
    tree = Path(tree)
    m = re.search(r"--sourcedir(?:ectory)?[= ]+([\w./+-]+)", _debian_file(tree, "rules"))
    if m and (tree / m.group(1)).is_dir() and ".." not in Path(m.group(1)).parts:
        return tree / m.group(1)
    return tree


def detect_build_system(src: str | os.PathLike) -> str | None:
    """One of :data:`BUILD_SYSTEMS`, or None.  Of several, the one Debian's packaging uses, else the
    first of :data:`BUILD_SYSTEMS`, as debhelper decides."""
    src = Path(src)
    tree = src
    while not (tree / "debian").is_dir() and tree.parent != tree and tree != src.parent.parent:
        tree = tree.parent  # the debian/ directory is at the top when src is a --sourcedirectory
    hint = _debian_hint(tree)
    has = {"autotools": any((src / f).is_file() for f in ("configure", "configure.ac", "configure.in")),
           "cmake": (src / "CMakeLists.txt").is_file(),
           "meson": (src / "meson.build").is_file(),
           "make": any((src / f).is_file() for f in ("GNUmakefile", "Makefile", "makefile"))}
    if hint and has.get(hint):
        return hint
    return next((system for system in BUILD_SYSTEMS if has[system]), None)


def _autoconf_generated(configure: Path) -> bool:
    """Hand-written configure scripts (zlib's, tcc's) may reject CC=... and --disable-static."""
    try:
        with open(configure, "rb") as f:
            return b"Generated by GNU Autoconf" in f.read(4096)
    except OSError:
        return False


@dataclasses.dataclass(frozen=True)
class Step:
    argv: tuple[str, ...]
    cwd: Path
    under_bear: bool = False  #: the build proper, whose compiles are recorded (not configure's tests)
    optional: bool = False  #: a failure is logged and the build goes on


def build_steps(system: str, src: Path, *, cc: str, cxx: str, jobs: int, opt: str = "-Oz") -> list[Step]:
    j = f"-j{max(1, jobs)}"
    if system == "autotools":
        steps = []
        shipped = (src / "configure").is_file()
        generated = not shipped or _autoconf_generated(src / "configure")  # by autoconf, or about to be
        # As debhelper does: Debian's patches touch configure.ac, and the shipped configure would then
        # make `make` rerun an automake of another version.  A failed autoreconf keeps the shipped one.
        if generated and any((src / f).is_file() for f in ("configure.ac", "configure.in")):
            steps.append(Step(("autoreconf", "-fi"), src, optional=shipped))
        configure = ["./configure"]
        # --disable-static: libtool otherwise compiles every file twice
        if generated:
            configure += [f"CC={cc}", f"CXX={cxx}", f"CFLAGS={c_flags(opt)}", f"CXXFLAGS={opt}", "--disable-static",
                          "--disable-dependency-tracking"]
        return [*steps, Step(tuple(configure), src), Step(("make", "-k", j), src, under_bear=True)]
    if system == "cmake":
        return [Step(("cmake", "-S", ".", "-B", "build", "-G", "Unix Makefiles", f"-DCMAKE_C_COMPILER={cc}",
                      f"-DCMAKE_CXX_COMPILER={cxx}", "-DCMAKE_BUILD_TYPE=None", f"-DCMAKE_C_FLAGS={c_flags(opt)}",
                      f"-DCMAKE_CXX_FLAGS={opt}", "-DBUILD_TESTING=OFF"), src),
                Step(("make", "-k", "-C", "build", j), src, under_bear=True)]
    if system == "meson":
        return [Step(("meson", "setup", "build", "--buildtype=plain"), src),
                Step(("ninja", "-k", "0", "-C", "build", j), src, under_bear=True)]
    if system == "make":
        # CC/CXX as arguments (a Makefile's `CC = gcc` beats the environment); CFLAGS only from the
        # environment, so a Makefile's own -I and -D flags are kept.
        return [Step(("make", "-k", j, f"CC={cc}", f"CXX={cxx}"), src, under_bear=True)]
    raise ValueError(f"unknown build system {system!r}")


#: C that gcc 12 builds and clang 16+ rejects builds as it did: these change diagnostics, never code
OLD_C_LENIENCE = ("-Wno-error=implicit-function-declaration", "-Wno-error=implicit-int",
                  "-Wno-error=int-conversion", "-Wno-error=incompatible-function-pointer-types",
                  "-Wno-error=strict-prototypes", "-Wno-error=deprecated-non-prototype")


def c_flags(opt: str) -> str:
    return " ".join((opt, *OLD_C_LENIENCE))


def build_env(cc: str, cxx: str, opt: str = "-Oz") -> dict[str, str]:
    unset = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "CPPFLAGS", "LDFLAGS")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(CC=cc, CXX=cxx, CFLAGS=c_flags(opt), CXXFLAGS=opt, LC_ALL="C", DEBIAN_FRONTEND="noninteractive",
               FORCE_UNSAFE_CONFIGURE="1")  # GNU configure scripts refuse to run as root without it
    return env


def cxx_driver(clang: str) -> str:
    """clang++-19 for clang-19."""
    d, base = os.path.split(clang)
    if base.startswith("clang") and not base.startswith("clang++"):
        base = "clang++" + base[len("clang"):]
    return os.path.join(d, base)


# -- the report ------------------------------------------------------------------

def load_report(path: str | os.PathLike) -> dict[str, dict]:
    if not Path(path).exists():
        return {}
    doc = read_format_json(path, REPORT_FORMAT, "package report")
    if not isinstance(doc.get("packages"), dict):
        raise CorpusError(f"{path}: not a {REPORT_FORMAT} report (no packages)")
    return doc["packages"]


def save_report(path: str | os.PathLike, packages: dict[str, dict]) -> None:
    doc = {"format": REPORT_FORMAT, "packages": dict(sorted(packages.items()))}
    atomic_write_bytes(str(path), (json.dumps(doc, indent=1) + "\n").encode("utf-8"))


def needs_work(entry: dict | None, out_dir: str | os.PathLike, retry_skipped: bool = False) -> bool:
    """Whether a package has to be (re)built: no entry, a module missing or chosen by older rules
    (only the choice is then made again), or skipped and ``retry_skipped``."""
    if not entry:
        return True
    if entry.get("status") == "ok":
        modules = entry.get("modules") or []
        present = all((Path(out_dir) / f"{m}{ext}").is_file() for m in modules for ext in (".bc", ".cmd"))
        return not modules or not present or entry.get("selection", 1) != SELECTION
    return retry_skipped


def corpus_modules(report: dict[str, dict]) -> list[str]:
    return sorted(m for e in report.values() if e.get("status") == "ok" for m in e.get("modules", ()))


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclasses.dataclass
class DebianReport:
    packages: dict[str, dict]  #: the whole report, earlier runs' packages included
    chosen: list[str]
    attempted: list[str]  #: built or skipped in this run
    failures: list[tuple[str, str]]  #: (source, reason) of modules that failed this run

    def counts(self) -> tuple[int, int, int, int]:
        """(packages ok, packages skipped, C modules, C++ modules) of the chosen packages."""
        ok = [e for e in map(self.packages.get, self.chosen) if e and e.get("status") == "ok"]
        return (len(ok), len(self.chosen) - len(ok), sum(e.get("c", 0) for e in ok),
                sum(e.get("cxx", 0) for e in ok))

    def summary(self) -> str:
        ok, skipped, c, cxx = self.counts()
        share = f"{100 * c / (c + cxx):.1f} %" if c + cxx else "-"
        return (f"{len(self.chosen)} packages: {ok} ok, {skipped} skipped; {c + cxx} modules "
                f"({c} C, {cxx} C++; C share {share}); {len(self.attempted)} attempted in this run")


# -- one package -----------------------------------------------------------------------

def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mlgo_host" / "debian" / "src"


def _dsc_of(name: str, pkg_dir: Path, log, timeout: float) -> Path:
    """Download the source package once into ``pkg_dir``; its .dsc."""
    pkg_dir.mkdir(parents=True, exist_ok=True)
    # in an empty directory: --print-uris leaves out the files already in its own
    with tempfile.TemporaryDirectory(dir=pkg_dir.parent) as empty:
        r = subprocess.run(["apt-get", "-q", "source", "--only-source", "--print-uris", name], cwd=empty,
                           capture_output=True, text=True, timeout=timeout)
    log.write(f"\n$ apt-get source --only-source --print-uris {name}\n{r.stdout}{r.stderr}")
    if r.returncode != 0:  # "E: Unable to find a source package for NAME"
        last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit status {r.returncode}"
        raise PackageSkipped(f"apt-get source: {one_line(last)}")
    files = [ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("'") and len(ln.split()) >= 2]
    dsc = [f for f in files if f.endswith(".dsc")]
    if not dsc:
        raise PackageSkipped(f"apt-get source {name} names no .dsc")
    if not all((pkg_dir / f).is_file() for f in files):
        try:
            run_logged(["apt-get", "-q", "source", "--only-source", "--download-only", name], cwd=pkg_dir,
                       env=None, log=log, timeout=timeout)
        except StepFailed as e:
            log.flush()
            # "E: Failed to fetch URL  404  Not Found [IP: ...]": which files, and why
            failed = re.findall(r"^E: Failed to fetch \S*/([^/\s]+)\s+(.*?)(?:\s*\[IP:.*)?$",
                                Path(log.name).read_text(errors="replace"), re.M)
            if failed:
                raise PackageSkipped("download failed: " + "; ".join(f"{f}: {' '.join(why.split())}"
                                                                     for f, why in failed)) from None
            raise PackageSkipped(f"download: {e}: {log_tail(log)}") from None
    return pkg_dir / dsc[0]


def _tree_name(dsc: Path) -> str:
    """``iniparser-4.1`` for ``iniparser_4.1-6.dsc``, as dpkg-source names it."""
    source, _, version = dsc.stem.partition("_")
    return f"{source}-{version.rsplit('-', 1)[0]}"


@dataclasses.dataclass
class Settings:
    output: Path
    cache: Path
    clang: str = "clang-19"
    jobs: int = 1
    opt: str = "-Oz"
    build_deps: bool = True
    build_timeout: float = 3600.0
    timeout: float = 300.0
    progress: bool = True
    packages: tuple[str, ...] = ()  #: every package of the list: a directory named so is vendored


def _build_tree(name: str, st: Settings, log, step: Callable[[str], None]) -> tuple[Path, dict]:
    """The package's built tree and its stamp, built now unless a finished build of it is there."""
    pkg_dir = st.cache / name
    step("download")
    dsc = _dsc_of(name, pkg_dir, log, st.build_timeout)
    tree = pkg_dir / _tree_name(dsc)
    stamp = tree / BUILT_STAMP
    if stamp.is_file() and (pkg_dir / DATABASE).is_file():
        with contextlib.suppress(ValueError):
            info = json.loads(stamp.read_text())
            if info.get("dsc") == dsc.name:
                return tree, info
    step("extract")
    for old in pkg_dir.iterdir():
        if old.is_dir():
            shutil.rmtree(old)  # an earlier version's tree, or this one half built
    (pkg_dir / DATABASE).unlink(missing_ok=True)
    since = log_size(log)
    try:
        run_logged(["dpkg-source", "-x", dsc.name, tree.name], cwd=pkg_dir, env=None, log=log,
                   timeout=st.build_timeout)
    except StepFailed as e:
        raise PackageSkipped(f"{e}: {log_tail(log, since)}") from None
    if st.build_deps:
        step("build-dep")
        since = log_size(log)
        try:
            run_apt(["build-dep", "-y", "--only-source", name], log, st.build_timeout)
        except StepFailed as e:
            raise PackageSkipped(f"{e}: {log_tail(log, since)}") from None
    src = source_directory(tree)
    system = detect_build_system(src)
    if system is None:
        raise PackageSkipped("no build system found (no configure, CMakeLists.txt, meson.build or Makefile)")
    cc, cxx = st.clang, cxx_driver(st.clang)
    steps = build_steps(system, src, cc=cc, cxx=cxx, jobs=st.jobs, opt=st.opt)
    tools = {"bear"} | {s.argv[0] for s in steps if s.argv[0] in TOOL_PACKAGES}
    try:
        ensure_tools(sorted(tools), log, st.build_timeout)
    except StepFailed as e:
        raise PackageSkipped(f"installing {', '.join(sorted(tools))}: {e}") from None
    env = build_env(cc, cxx, st.opt)
    partial = None
    for s in steps:
        step(f"{system}: {s.argv[0]}")
        argv = list(s.argv)
        if s.under_bear:
            argv = ["bear", "--output", str(pkg_dir / DATABASE), "--", *argv]
        since = log_size(log)
        try:
            run_logged(argv, cwd=s.cwd, env=env, log=log, timeout=st.build_timeout,
                       what=" ".join(a for a in s.argv if "=" not in a))
        except StepFailed as e:
            if s.optional:
                continue
            if s.under_bear and (pkg_dir / DATABASE).is_file():
                # kept going (-k): a program that clang cannot build leaves the package's other compiles
                partial = f"{e}: {log_tail(log, since)}"
                continue
            raise PackageSkipped(f"{e}: {log_tail(log, since)}") from None
    info = {"dsc": dsc.name, "build_system": system,
            "source_directory": os.path.relpath(src, tree)}
    if partial:
        info["build_failed"] = one_line(partial)
    stamp.write_text(json.dumps(info) + "\n")
    return tree, info


def build_package(name: str, st: Settings, step: Callable[[str], None]) -> tuple[dict, BuildReport | None]:
    """Build one package into the corpus: its report entry and the module builder's report."""
    t0 = time.monotonic()
    entry: dict = {"log": f"{LOGS}/{name}.log"}
    log_path = st.output / entry["log"]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_bytes(b"")
    report = None
    # appending: the steps write to the same file through their own descriptors
    with open(log_path, "a", encoding="utf-8", errors="replace") as log:
        try:
            tree, info = _build_tree(name, st, log, step)
            entry.update(version=info["dsc"][len(name) + 1:-len(".dsc")], build_system=info["build_system"])
            if "build_failed" in info:
                entry["build_failed"] = info["build_failed"]  # the compiles that succeeded are kept
            try:
                entries = load_compile_commands(st.cache / name / DATABASE)
            except CorpusError as e:
                raise PackageSkipped(f"unusable compile database: {e}") from None
            sel = select_entries(name, entries, tree, st.packages)
            entry.update(compiles=len(entries), left_out=sel.left_out)
            if not sel.entries:
                why = ", ".join(f"{v} {k}" for k, v in sel.left_out.items()) or "none recorded"
                raise PackageSkipped(f"the build recorded no C/C++ compile of its own ({why})")
            step("modules")
            try:
                report = build_corpus(sel.entries, st.output, clang=st.clang, jobs=st.jobs, opt_level=st.opt,
                                      timeout=st.timeout, progress=st.progress, names=sel.names)
            except CorpusError as e:
                raise PackageSkipped(one_line(str(e))) from None
            langs = {n: language(e.file) for e, n in zip(sel.entries, sel.names)}
            entry.update(status="ok", selection=SELECTION, modules=report.modules,
                         c=sum(1 for m in report.modules if langs[m] == "C"),
                         cxx=sum(1 for m in report.modules if langs[m] == "C++"),
                         failed_modules=len(report.failures))
            if report.failures:
                entry["module_failures"] = [[os.path.relpath(f, tree), one_line(r, 200)]
                                            for f, r in report.failures[:10]]
        except PackageSkipped as e:
            entry.update(status="skipped", reason=one_line(str(e)))
            log.write(f"\nskipped: {entry['reason']}\n")
    entry["seconds"] = round(time.monotonic() - t0, 1)
    return entry, report


def build_debian(output: str | os.PathLike, *, packages: str | Sequence[str] | None = None,
                 packages_file: str | os.PathLike | None = None, cache_dir: str | os.PathLike | None = None,
                 clang: str = "clang-19", jobs: int | None = None, build_deps: bool = True,
                 retry_skipped: bool = False, build_timeout: float = 3600.0, timeout: float = 300.0,
                 progress: bool = True) -> DebianReport:
    """Build (or complete) the corpus of the chosen packages in ``output``: a package ``ok`` with all its
    modules is not built again, one skipped before stays skipped unless ``retry_skipped``."""
    listed = read_packages_file(packages_file)
    chosen = select_packages(listed, packages)
    out = Path(os.path.abspath(output))
    out.mkdir(parents=True, exist_ok=True)
    report_path = out / REPORT
    report = load_report(report_path)
    st = Settings(output=out, cache=Path(os.path.abspath(cache_dir or default_cache_dir())), clang=clang,
                  jobs=max(1, jobs or os.cpu_count() or 1), build_deps=build_deps, build_timeout=build_timeout,
                  timeout=timeout, progress=progress, packages=tuple(listed))
    todo = [n for n in chosen if needs_work(report.get(n), out, retry_skipped)]
    if kept := [n for n in chosen if n not in todo and (report.get(n) or {}).get("status") != "ok"]:
        print(f"kept as skipped before (--retry-skipped to try again): {', '.join(kept)}", file=sys.stderr)
    result = DebianReport(report, chosen, [], [])
    if todo:
        with open(os.devnull, "w") as quiet:
            try:
                ensure_tools(["dpkg-source", "bear"], quiet, build_timeout)
                if added := ensure_deb_src():
                    print(f"added {added} (the sources of {SUITE} {COMPONENT}); apt-get update", file=sys.stderr)
                    run_apt(["update"], quiet, build_timeout)
            except StepFailed as e:
                raise ConfigError(f"{e} (run it by hand to see why)") from None
    st.cache.mkdir(parents=True, exist_ok=True)
    with progress_bar(total=len(todo), desc="debian", unit="package", enabled=progress) as bar:
        for name in todo:
            bar.set_postfix_str(name)
            entry, built = build_package(name, st, step=lambda s, n=name: bar.set_postfix_str(f"{n}: {s}"))
            report[name] = entry
            save_report(report_path, report)
            # build_corpus described only this package's modules
            if modules := corpus_modules(report):
                write_description(out, modules)
            result.attempted.append(name)
            if built is not None:
                result.failures += built.failures
            minutes = f"{entry['seconds'] / 60:.1f} min"
            if entry["status"] == "ok":
                bar.write(f"{name}: ok, {len(entry['modules'])} modules ({entry['c']} C, {entry['cxx']} C++), "
                          f"{entry['build_system']}, {minutes}", file=sys.stderr)
            else:
                bar.write(f"{name}: skipped: {entry['reason']} ({minutes})", file=sys.stderr)
            bar.update(1)
    return result
