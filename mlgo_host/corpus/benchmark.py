"""The benchmark corpus: the C and C++ vendored in PyPI source distributions at pinned versions, which
a source list (``mlgo_host/data/benchmark_sources.json``) names with their sha256, sources and flags.
Every step skips work already done (verified archives, extracted trees, built modules)."""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Sequence

from mlgo_host.errors import CorpusError
from mlgo_host.corpus.build import BuildReport, build_corpus, load_compile_commands, write_compile_commands
from mlgo_host.corpus.corpus import read_json

EXTRACTED_STAMP = ".mlgo-extracted"


@dataclasses.dataclass(frozen=True)
class Unit:
    """Sources of one package compiled with the same flags."""
    sources: tuple[str, ...]
    flags: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Package:
    name: str
    version: str
    filename: str
    sha256: str
    units: tuple[Unit, ...]
    # The vendored projects the units compile ("zstd"): what keeps two lists apart when different
    # packages vendor the same library.
    libraries: tuple[str, ...] = ()

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


@dataclasses.dataclass(frozen=True)
class BenchmarkSpec:
    packages: tuple[Package, ...]
    opt_level: str = "-Oz"


# Source lists shipped in mlgo_host/data, by the short name ``--sources`` takes.  "training" is the
# benchmark's packages (same module names, so the same held-out split) plus more projects; "external"
# holds projects neither contains, to measure how a policy generalizes.
PACKAGED_SPECS = {"benchmark": "benchmark_sources.json", "training": "training_sources.json",
                  "external": "external_sources.json"}
DEFAULT_SPEC = "benchmark"


def resolve_spec_path(spec: str | os.PathLike | None = None) -> Path:
    """The default list, a packaged list's short name (it wins over a same-named file: write ./NAME),
    or a path."""
    spec = DEFAULT_SPEC if spec is None else spec
    if isinstance(spec, str) and spec in PACKAGED_SPECS:
        return Path(str(resources.files("mlgo_host") / "data" / PACKAGED_SPECS[spec]))
    return Path(spec)


def load_spec(path: str | os.PathLike | None = None) -> BenchmarkSpec:
    """Read and check a benchmark source list (see :func:`resolve_spec_path`)."""
    p = resolve_spec_path(path)
    raw = read_json(p, f"benchmark source list not found (give a path or one of: {', '.join(PACKAGED_SPECS)})")
    try:
        pkgs = []
        for d in raw["packages"]:
            units = tuple(Unit(tuple(u["sources"]), tuple(u.get("flags", ())), tuple(u.get("exclude", ())))
                          for u in d["units"])
            sha = str(d["sha256"]).lower()
            if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
                raise CorpusError(f"{p}: package {d['name']}: sha256 must be 64 hex digits")
            libraries = tuple(str(x) for x in d.get("libraries", ()))
            pkgs.append(Package(str(d["name"]), str(d["version"]), str(d["filename"]), sha, units, libraries))
        return BenchmarkSpec(tuple(pkgs), str(raw.get("opt_level", "-Oz")))
    except (KeyError, TypeError) as e:
        raise CorpusError(f"{p}: malformed benchmark source list ({e!r})") from None


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mlgo_host" / "benchmark"


def sha256_of(path: str | os.PathLike) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def verify(path: Path, expected: str, what: str) -> None:
    """Raise CorpusError (and remove the file) when its sha256 differs."""
    got = sha256_of(path)
    if got != expected.lower():
        path.unlink(missing_ok=True)
        raise CorpusError(f"{what}: sha256 mismatch for {path.name}: expected {expected}, got {got} "
                          "(the file was removed; the download is not the pinned release)")


def pip_download(requirement: str, dest: Path, timeout: float = 600.0) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           "--disable-pip-version-check", "-q", "-d", str(dest), requirement]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CorpusError(f"pip download {requirement} did not finish within {timeout:g} s") from None
    if r.returncode != 0:
        msg = " | ".join(ln for ln in r.stderr.strip().splitlines() if "WARNING" not in ln)[-500:]
        raise CorpusError(f"pip download {requirement} failed (exit {r.returncode}): {msg}")


def fetch(pkg: Package, cache_dir: Path, downloader=pip_download) -> Path:
    """The verified sdist of ``pkg`` in ``cache_dir/sdists`` (downloaded once)."""
    sdists = cache_dir / "sdists"
    sdists.mkdir(parents=True, exist_ok=True)
    target = sdists / pkg.filename
    if target.exists():
        with contextlib.suppress(CorpusError):  # a corrupt or foreign cached file: download again
            verify(target, pkg.sha256, pkg.requirement)
            return target
    with tempfile.TemporaryDirectory(prefix=".dl-", dir=sdists, ignore_cleanup_errors=True) as d:
        tmp = Path(d)
        downloader(pkg.requirement, tmp)
        got = tmp / pkg.filename
        if not got.exists():
            found = sorted(x.name for x in tmp.iterdir())
            raise CorpusError(f"pip download {pkg.requirement} gave {found or 'nothing'}, expected {pkg.filename}")
        verify(got, pkg.sha256, pkg.requirement)
        os.replace(got, target)
    return target


def _check_paths(names: Iterable[str], where: str) -> None:
    for name in names:
        if name.startswith("/") or ".." in Path(name).parts:
            raise CorpusError(f"{where}: unsafe path {name!r} in archive")


def extract(archive: Path, dest_root: Path) -> Path:
    """Extract ``archive`` under ``dest_root`` once; its single top directory."""
    final = dest_root / re.sub(r"\.(tar\.gz|tgz|tar\.bz2|zip)$", "", archive.name)
    if (final / EXTRACTED_STAMP).exists():
        return final
    dest_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".x-", dir=dest_root, ignore_cleanup_errors=True) as d:
        tmp = Path(d)
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                _check_paths(zf.namelist(), archive.name)
                zf.extractall(tmp)
        else:
            try:
                with tarfile.open(archive) as tf:
                    _check_paths(tf.getnames(), archive.name)
                    # files and directories only: sources need no links, and links could point outside
                    tf.extractall(tmp, members=[m for m in tf.getmembers() if m.isfile() or m.isdir()])
            except tarfile.TarError as e:
                raise CorpusError(f"{archive.name}: not a readable archive: {e}") from None
        tops = list(tmp.iterdir())
        if len(tops) != 1 or not tops[0].is_dir():
            raise CorpusError(f"{archive.name}: expected one top directory, found {sorted(p.name for p in tops)}")
        (tops[0] / EXTRACTED_STAMP).write_text(archive.name + "\n")
        if final.exists():
            shutil.rmtree(final)
        os.replace(tops[0], final)
    return final


def compile_entries(pkg: Package, top: Path, clang: str, opt_level: str) -> list[dict[str, Any]]:
    """Compile-database entries for the sources ``pkg`` lists under its extracted tree ``top``."""
    entries = []
    for unit in pkg.units:
        files: set[str] = set()
        for pattern in unit.sources:
            matched = glob.glob(pattern, root_dir=top)
            if not matched:
                raise CorpusError(f"{pkg.requirement}: source pattern {pattern!r} matches nothing in {top.name}")
            files.update(matched)
        files.difference_update(unit.exclude)
        for rel in sorted(files):
            obj = os.path.splitext(rel)[0] + ".o"
            entries.append({"directory": str(top), "file": rel,
                            "arguments": [clang, opt_level, *unit.flags, "-c", rel, "-o", obj]})
    return entries


def build_benchmark(output: str | os.PathLike, *, cache_dir: str | os.PathLike | None = None,
                    spec_path: str | os.PathLike | None = None, clang: str = "clang-19",
                    jobs: int | None = None, progress: bool = True, downloader=pip_download,
                    packages: Sequence[str] | None = None) -> BuildReport:
    """Download, verify, extract and build the benchmark corpus (of ``packages`` only) into ``output``."""
    spec = load_spec(spec_path)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    chosen = [p for p in spec.packages if packages is None or p.name in packages]
    if not chosen:
        raise CorpusError(f"no package of the benchmark list matches {list(packages or [])}")
    entries: list[dict[str, Any]] = []
    for pkg in chosen:
        top = extract(fetch(pkg, cache, downloader=downloader), cache / "src")
        entries += compile_entries(pkg, top, clang, spec.opt_level)
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    db = out / "compile_commands.json"
    write_compile_commands(db, entries)
    names = [f"{Path(e['directory']).name}/{os.path.splitext(e['file'])[0]}" for e in entries]
    return build_corpus(load_compile_commands(db), out, clang=clang, jobs=jobs, progress=progress, names=names)
