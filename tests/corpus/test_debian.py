"""`corpus debian`: the packages file, which compiles become modules, the
build-system detection on small fake trees, the deb-src stanza on a fake
/etc/apt, the report and what a second run rebuilds, and that an interrupt
leaves no half-written module.  One real end-to-end build of a small package
(needs root and the network: run with MLGO_DEBIAN_TESTS=1)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from mlgo_host.cli import main
from mlgo_host.corpus import build as corpus_build
from mlgo_host.corpus import apt, debian
from mlgo_host.corpus.build import CompileEntry, build_module, load_compile_commands
from mlgo_host.errors import ConfigError


# -- the packages file ------------------------------------------------------------------

def test_the_packaged_list_is_read_with_its_header(tmp_path):
    names = debian.read_packages_file()
    assert len(names) > 100 and len(set(names)) == len(names)
    assert {"iniparser", "json-c", "yajl", "gflags", "woff2"} <= set(names)
    assert debian.default_packages_file().read_text().startswith("# Debian 12 (bookworm, main)")


def test_packages_file_comments_blanks_and_duplicates(tmp_path):
    p = tmp_path / "list.txt"
    p.write_text("# header\n\nzlib\n  libfoo++  # trailing comment\nzlib\nmake-dfsg\n")
    assert debian.read_packages_file(p) == ["zlib", "libfoo++", "make-dfsg"]
    p.write_text("zlib\nBad Name\n")
    with pytest.raises(ConfigError, match=r"list.txt:2: 'Bad Name' is not a Debian source package name"):
        debian.read_packages_file(p)
    p.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="names no package"):
        debian.read_packages_file(p)
    with pytest.raises(ConfigError, match="cannot read"):
        debian.read_packages_file(tmp_path / "missing.txt")


def test_select_packages_is_a_subset_of_the_list():
    allowed = ["a", "b", "c"]
    assert debian.select_packages(allowed, None) == allowed
    assert debian.select_packages(allowed, "c, a") == ["c", "a"]
    assert debian.select_packages(allowed, ["b", "b"]) == ["b"]
    with pytest.raises(ConfigError, match="not in the packages file: x, y") as e:
        debian.select_packages(allowed, "a,x,y")
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="names no package"):
        debian.select_packages(allowed, " , ")


def test_cli_refuses_a_package_outside_the_list(tmp_path, capsys):
    assert main(["corpus", "debian", "--packages", "not-a-listed-package", "--output", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not in the packages file: not-a-listed-package" in err


# -- which compiles become modules ----------------------------------------------------------

def _entry(tree: Path, rel: str, *extra: str, out: str | None = None) -> CompileEntry:
    f = Path(os.path.normpath(tree / rel))
    o = Path(out) if out else f.with_suffix(".o")
    return CompileEntry(tree, f, ("cc", "-O2", *extra, "-c", str(f), "-o", str(o)), o)


def test_vendored_and_test_directories():
    assert debian.is_vendored("third_party/zlib/inflate.c")
    assert debian.is_vendored("src/Vendor/x.c") and debian.is_vendored("deps/lua/lapi.c")
    assert debian.is_vendored("a/3rdparty/b/c.cc") and debian.is_vendored("contrib/minizip/zip.c")
    assert debian.is_vendored("External/x.c")
    assert not debian.is_vendored("src/vendor.c")  # a file, not a directory
    assert not debian.is_vendored("src/dependencies/x.c")
    # a copy of another package of the list (bash's readline), not the package's own folder
    assert debian.is_vendored("lib/readline/bind.c", others={"readline"})
    assert not debian.is_vendored("lib/readline/bind.c")
    # gnulib's modules, in the packages that import it
    assert debian.is_vendored("lib/regex.c", gnulib=True) and not debian.is_vendored("lib/regex.c")
    assert not debian.is_vendored("src/lib/x.c", gnulib=True)
    assert debian.is_test("tests/t.c") and debian.is_test("src/test/t.cc") and not debian.is_test("src/testing.c")
    assert [debian.language(f) for f in ("a.c", "b.cc", "c.cpp", "d.cxx", "e.S", "f.mm", "g.h")] == \
        ["C", "C++", "C++", "C++", None, None, None]


def test_gnulib_and_other_packages_are_left_out_of_a_selection(tmp_path):
    tree = _tree(tmp_path / "sed-4.9", {"m4/gnulib-comp.m4": "", "lib/regex.c": "", "sed/sed.c": "",
                                        "lib/readline/bind.c": "", "sed/sed/x.c": ""})
    entries = [_entry(tree, rel) for rel in ("lib/regex.c", "sed/sed.c", "sed/sed/x.c")]
    sel = debian.select_entries("sed", entries, tree, others=["sed", "readline", "grep"])
    assert sel.names == ["sed/sed/sed", "sed/sed/sed/x"] and sel.left_out == {"vendored": 1}
    assert debian.imports_gnulib(tree) and not debian.imports_gnulib(tmp_path / "none")


def test_select_entries_counts_what_it_leaves_out(tmp_path):
    tree = tmp_path / "pkg-1.0"
    (tree / "src").mkdir(parents=True)
    entries = [
        _entry(tree, "src/a.c", "-fPIC", "-DPIC", out=str(tree / "src/.libs/a.o")),
        _entry(tree, "src/a.c"),  # libtool's second, non-PIC compile of the same file
        _entry(tree, "src/b.cc"),
        _entry(tree, "src/b.c"),  # same name without suffix: b.1
        _entry(tree, "third_party/zlib/inflate.c"),
        _entry(tree, "tests/t.c"),
        _entry(tree, "src/asm.S"),
        _entry(tmp_path / "elsewhere", "gen.c"),
        _entry(tree, "build/generated.c"),  # generated inside the tree: kept
    ]
    sel = debian.select_entries("pkg", reversed(entries), tree)
    assert sel.names == ["pkg/build/generated", "pkg/src/a", "pkg/src/b", "pkg/src/b.1"]
    assert [e.file.name for e in sel.entries] == ["generated.c", "a.c", "b.c", "b.cc"]
    # the same compile of a.c is kept whatever order the build ran them in
    assert debian.select_entries("pkg", entries, tree).entries == sel.entries
    assert sel.left_out == {"not C or C++": 1, "outside the tree": 1, "vendored": 1, "tests": 1,
                            "compiled again": 1}


def test_select_entries_follows_symlinked_trees(tmp_path):
    real = tmp_path / "real"
    (real / "src").mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    sel = debian.select_entries("p", [_entry(real, "src/x.c")], tmp_path / "link")
    assert sel.names == ["p/src/x"] and not sel.left_out


def test_select_entries_from_a_bear_database(tmp_path):
    tree = tmp_path / "t"
    (tree / "build").mkdir(parents=True)
    db = tmp_path / "compile_commands.json"
    db.write_text(json.dumps([
        {"directory": str(tree / "build"), "file": str(tree / "src/x.c"), "output": str(tree / "build/x.o"),
         "arguments": ["/usr/bin/clang-19", "-Oz", "-I../src", "-c", "../src/x.c", "-o", "x.o"]},
        {"directory": str(tree / "build"), "file": str(tree / "vendor/y.c"),
         "arguments": ["/usr/bin/clang-19", "-c", "../vendor/y.c"]}]))
    sel = debian.select_entries("t", load_compile_commands(db), tree)
    assert sel.names == ["t/src/x"] and sel.left_out == {"vendored": 1}


# -- the build system ------------------------------------------------------------------------

def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


@pytest.mark.parametrize("files, system", [
    ({"configure": "#!/bin/sh\n", "Makefile.in": ""}, "autotools"),
    ({"configure.ac": "AC_INIT\n", "Makefile.am": ""}, "autotools"),
    ({"CMakeLists.txt": "", "Makefile": ""}, "cmake"),
    ({"meson.build": ""}, "meson"),
    ({"Makefile": "all:\n"}, "make"),
    ({"README": ""}, None),
    # both: the one Debian's packaging uses
    ({"configure": "", "CMakeLists.txt": "",
      "debian/control": "Source: x\nBuild-Depends: debhelper-compat (= 13),\n cmake (>= 3.13),\n zlib1g-dev\n"},
     "cmake"),
    ({"configure": "", "meson.build": "", "debian/control": "Source: x\nBuild-Depends: meson, ninja-build\n"},
     "meson"),
    ({"configure": "", "CMakeLists.txt": "", "debian/control": "Source: x\nBuild-Depends: cmake-data\n"},
     "autotools"),
    ({"CMakeLists.txt": "", "configure.ac": "", "debian/rules": "%:\n\tdh $@ --buildsystem=autoconf\n"},
     "autotools"),
    # a hint for a build system the tree does not have is ignored
    ({"Makefile": "", "debian/control": "Source: x\nBuild-Depends: cmake\n"}, "make"),
])
def test_detect_build_system(tmp_path, files, system):
    assert debian.detect_build_system(_tree(tmp_path, files)) == system


def test_source_directory_from_debian_rules(tmp_path):
    _tree(tmp_path, {"debian/rules": "%:\n\tdh $@ --sourcedirectory=lib/src\n", "lib/src/CMakeLists.txt": "",
                     "debian/control": "Source: x\nBuild-Depends: cmake\n"})
    src = debian.source_directory(tmp_path)
    assert src == tmp_path / "lib/src"
    assert debian.detect_build_system(src) == "cmake"
    _tree(tmp_path, {"debian/rules": "%:\n\tdh $@ --sourcedirectory=../escape\n"})
    assert debian.source_directory(tmp_path) == tmp_path


def test_build_steps(tmp_path):
    kw = dict(cc="clang-19", cxx="clang++-19", jobs=2)
    steps = debian.build_steps("autotools", _tree(tmp_path / "a", {"configure.ac": ""}), **kw)
    assert [s.argv[0] for s in steps] == ["autoreconf", "./configure", "make"]
    assert "CC=clang-19" in steps[1].argv and "--disable-static" in steps[1].argv
    assert [s.under_bear for s in steps] == [False, False, True] and steps[2].argv == ("make", "-k", "-j2")
    gen = _tree(tmp_path / "g", {"configure": "#! /bin/sh\n# Generated by GNU Autoconf 2.71 for x.\n"})
    assert "CXXFLAGS=-Oz" in debian.build_steps("autotools", gen, **kw)[0].argv
    # a generated configure beside its configure.ac is made again (Debian's patches touch the
    # inputs); if that fails the shipped one is still there, so the step may fail
    both = _tree(tmp_path / "b", {"configure.ac": "", "configure": "# Generated by GNU Autoconf 2.71\n"})
    regen = debian.build_steps("autotools", both, **kw)
    assert regen[0].argv == ("autoreconf", "-fi") and regen[0].optional and not steps[0].optional
    # a hand-written configure (zlib's, tcc's) may reject options it does not know
    hand = _tree(tmp_path / "h", {"configure": "#!/bin/sh\necho hand-written\n"})
    assert debian.build_steps("autotools", hand, **kw)[0].argv == ("./configure",)
    cm = debian.build_steps("cmake", tmp_path, **kw)
    assert "-DCMAKE_C_COMPILER=clang-19" in cm[0].argv and "-DBUILD_TESTING=OFF" in cm[0].argv
    assert cm[1].argv == ("make", "-k", "-C", "build", "-j2") and cm[1].under_bear
    assert [s.argv[0] for s in debian.build_steps("meson", tmp_path, **kw)] == ["meson", "ninja"]
    assert debian.build_steps("make", tmp_path, **kw)[0].argv == ("make", "-k", "-j2", "CC=clang-19", "CXX=clang++-19")
    env = debian.build_env("clang-19", "clang++-19")
    assert env["CC"] == "clang-19" and env["CXXFLAGS"] == "-Oz" and env["CFLAGS"].split()[0] == "-Oz"
    assert all(f.startswith("-Wno-error=") for f in env["CFLAGS"].split()[1:])  # diagnostics only
    assert env["FORCE_UNSAFE_CONFIGURE"] == "1"  # coreutils' and tar's configure, run as root
    assert debian.cxx_driver("clang-19") == "clang++-19"
    assert debian.cxx_driver("/usr/lib/llvm-19/bin/clang") == "/usr/lib/llvm-19/bin/clang++"


# -- apt's deb-src entry ------------------------------------------------------------------------

DEBIAN_SOURCES = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def test_deb_src_stanza_is_added_once(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d/debian.sources").write_text(DEBIAN_SOURCES)
    (tmp_path / "sources.list.d/other.list.disabled").write_text("deb-src http://x bookworm main\n")
    added = apt.ensure_deb_src(tmp_path)
    assert added == tmp_path / "sources.list.d" / apt.DEB_SRC_FILE
    stanza = apt._deb822_stanzas(added.read_text())
    assert stanza == [{"types": "deb-src", "uris": "http://deb.debian.org/debian", "suites": "bookworm",
                       "components": "main", "signed-by": "/usr/share/keyrings/debian-archive-keyring.gpg"}]
    assert apt.ensure_deb_src(tmp_path) is None


def test_deb_src_one_line_forms_and_disabled_stanzas(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text("deb-src [arch=amd64] http://deb.debian.org/debian bookworm main\n")
    assert apt.ensure_deb_src(tmp_path) is None
    (tmp_path / "sources.list").write_text("# deb-src http://deb.debian.org/debian bookworm main\n"
                                           "deb http://ftp.de.debian.org/debian bookworm main contrib\n")
    (tmp_path / "sources.list.d/src.sources").write_text(
        "Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n")
    added = apt.ensure_deb_src(tmp_path)
    assert "URIs: http://ftp.de.debian.org/debian" in added.read_text()
    assert "Signed-By" not in added.read_text()


def test_deb_src_without_a_bookworm_entry_is_a_config_error(tmp_path):
    (tmp_path / "sources.list").write_text("deb http://deb.debian.org/debian trixie main\n")
    with pytest.raises(ConfigError, match="no 'bookworm main' deb entry"):
        apt.ensure_deb_src(tmp_path)


# -- report and resume -------------------------------------------------------------------------------

def _module(out: Path, name: str, cmd: bool = True) -> None:
    (out / name).parent.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.bc").write_bytes(b"BC")
    if cmd:
        (out / f"{name}.cmd").write_bytes(b"-cc1\0-Oz")


def test_report_round_trip_and_needs_work(tmp_path):
    path = tmp_path / debian.REPORT
    assert debian.load_report(path) == {}
    report = {"b": {"status": "skipped", "reason": "no build system"},
              "a": {"status": "ok", "selection": debian.SELECTION, "modules": ["a/x", "a/y"], "c": 1, "cxx": 1}}
    debian.save_report(path, report)
    assert debian.load_report(path) == report
    assert list(json.loads(path.read_text())["packages"]) == ["a", "b"]
    assert not debian.needs_work(report["b"], tmp_path)
    assert debian.needs_work(report["b"], tmp_path, retry_skipped=True)
    assert debian.needs_work(None, tmp_path)
    assert debian.needs_work(report["a"], tmp_path)  # no module on disk
    _module(tmp_path, "a/x")
    _module(tmp_path, "a/y", cmd=False)  # .bc without .cmd: not a module
    assert debian.needs_work(report["a"], tmp_path)
    _module(tmp_path, "a/y")
    assert not debian.needs_work(report["a"], tmp_path)
    assert debian.needs_work({**report["a"], "selection": debian.SELECTION - 1}, tmp_path)  # chosen again
    assert debian.needs_work({"status": "ok", "modules": []}, tmp_path)
    assert debian.corpus_modules(report) == ["a/x", "a/y"]
    path.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ConfigError, match="not a package report .format .other., expected .mlgo_host.debian_packages/1."):
        debian.load_report(path)


def test_summary_counts_languages_and_packages():
    r = debian.DebianReport({"a": {"status": "ok", "modules": ["a/x"] * 4, "c": 3, "cxx": 1},
                             "b": {"status": "skipped", "reason": "r"}}, ["a", "b", "c"], ["a"], [])
    assert r.summary() == "3 packages: 1 ok, 2 skipped; 4 modules (3 C, 1 C++; C share 75.0 %); 1 attempted in this run"


@pytest.fixture
def fake_builds(monkeypatch, tmp_path):
    """build_debian with build_package replaced: 'good' makes two modules,
    'bad' is skipped; which packages were built is recorded."""
    pkgs = tmp_path / "list.txt"
    pkgs.write_text("# list\ngood\nbad\nother\n")
    calls: list[str] = []

    def fake(name, st, step=lambda s: None):
        calls.append(name)
        if name == "bad":
            return {"status": "skipped", "reason": "make exited with 2", "seconds": 0.1}, None
        for m in ("src/a", "src/b"):
            _module(st.output, f"{name}/{m}")
        return {"status": "ok", "selection": debian.SELECTION, "modules": [f"{name}/src/a", f"{name}/src/b"],
                "c": 2, "cxx": 0,
                "build_system": "make", "seconds": 0.1}, None

    monkeypatch.setattr(debian, "build_package", fake)
    monkeypatch.setattr(debian, "ensure_deb_src", lambda *a, **k: None)
    monkeypatch.setattr(debian, "ensure_tools", lambda *a, **k: None)
    return pkgs, calls


def test_a_second_run_builds_only_what_is_missing(tmp_path, fake_builds, capsys):
    pkgs, calls = fake_builds
    out = tmp_path / "corpus"
    r = debian.build_debian(out, packages="good,bad", packages_file=pkgs, progress=False)
    assert calls == ["good", "bad"] and r.counts() == (1, 1, 2, 0)
    assert json.loads((out / "corpus_description.json").read_text())["modules"] == ["good/src/a", "good/src/b"]
    err = capsys.readouterr().err
    assert "good: ok, 2 modules (2 C, 0 C++)" in err and "bad: skipped: make exited with 2" in err
    calls.clear()
    r = debian.build_debian(out, packages="good,bad", packages_file=pkgs, progress=False)
    assert calls == [] and r.attempted == [] and r.counts() == (1, 1, 2, 0)
    assert "kept as skipped before (--retry-skipped to try again): bad" in capsys.readouterr().err
    (out / "good/src/b.cmd").unlink()  # e.g. interrupted after its .bc: the package is completed
    debian.build_debian(out, packages_file=pkgs, progress=False)
    assert calls == ["good", "other"]
    calls.clear()
    debian.build_debian(out, packages_file=pkgs, progress=False, retry_skipped=True)
    assert calls == ["bad"]
    report = debian.load_report(out / debian.REPORT)
    assert sorted(report) == ["bad", "good", "other"]
    assert json.loads((out / "corpus_description.json").read_text())["modules"] == \
        ["good/src/a", "good/src/b", "other/src/a", "other/src/b"]


# -- steps and interrupts ------------------------------------------------------------------------------

def test_run_logged_logs_and_kills_the_whole_group_on_timeout(tmp_path):
    log_path = tmp_path / "log"
    with open(log_path, "w") as log:
        debian.run_logged(["sh", "-c", "echo hello"], cwd=tmp_path, env=None, log=log, timeout=10)
        with pytest.raises(debian.StepFailed, match="exited with 3"):
            debian.run_logged(["sh", "-c", "exit 3"], cwd=tmp_path, env=None, log=log, timeout=10)
        pidfile = tmp_path / "grandchild"
        t0 = time.monotonic()
        with pytest.raises(debian.StepFailed, match="did not finish within 0.5 s"):
            debian.run_logged(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], cwd=tmp_path, env=None,
                              log=log, timeout=0.5)
        assert time.monotonic() - t0 < 8
    assert "$ sh -c echo hello\nhello\n" in log_path.read_text()
    if not _ends(int(pidfile.read_text())):
        pytest.fail("the build's own children outlived the timeout")


def _ends(pid: int, seconds: float = 5.0) -> bool:
    """Whether ``pid`` is gone (or a zombie) within ``seconds``."""
    for _ in range(int(seconds / 0.1)):
        if not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z":
            return True
        time.sleep(0.1)
    return False


def test_a_sigterm_to_corpus_debian_kills_the_build_steps_group(tmp_path):
    """The build step runs in its own session (a Ctrl-C at the terminal does not reach it): a SIGTERM to
    the command must unwind it and kill that group, as an interrupt does."""
    import signal
    import sys

    pidfile = tmp_path / "grandchild"
    script = (
        "import sys\n"
        "from mlgo_host.corpus import apt, debian\n"
        "def build_debian(*a, **k):\n"
        "    with open(sys.argv[2], 'w') as log:\n"
        f"        apt.run_logged(['sh', '-c', 'sleep 60 & echo $! > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; wait'],\n"
        "                       cwd=None, env=None, log=log, timeout=120)\n"
        "debian.build_debian = build_debian\n"
        "from mlgo_host.cli import main\n"
        "sys.exit(main(['corpus', 'debian', '--output', sys.argv[1], '--no-progress']))\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "out"), str(tmp_path / "log")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(200):
        if pidfile.exists() or proc.poll() is not None:
            break
        time.sleep(0.05)
    assert pidfile.exists(), proc.communicate()[1]
    grandchild = int(pidfile.read_text())
    try:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err
        if not _ends(grandchild):
            pytest.fail("the build step's children outlived the SIGTERM")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(os.getpgid(grandchild), signal.SIGKILL)  # its group: what a failing run leaves behind


def test_an_interrupt_starts_no_more_compiles(tmp_path, monkeypatch):
    started = []

    def fake_build_module(clang, entry, name, out_dir, *a):
        started.append(name)
        if len(started) == 1:
            raise KeyboardInterrupt
        time.sleep(0.01)
        return True

    monkeypatch.setattr(corpus_build, "build_module", fake_build_module)
    entries = [_entry(tmp_path, f"m{i}.c") for i in range(200)]
    with pytest.raises(KeyboardInterrupt):
        corpus_build.build_corpus(entries, tmp_path / "out", jobs=1, progress=False)
    assert len(started) < 200


def test_an_interrupted_module_leaves_no_file(tmp_path, monkeypatch):
    (tmp_path / "x.c").write_text("int x(void) { return 1; }\n")
    entry = _entry(tmp_path, "x.c")
    real_run = subprocess.run

    def interrupted(cmd, *a, **k):
        if "-emit-llvm" not in cmd:
            return real_run(cmd, *a, **k)  # clang -### for the cc1 command
        Path(cmd[cmd.index("-o") + 1]).write_bytes(b"BC half")  # the frontend was writing
        raise KeyboardInterrupt

    monkeypatch.setattr(corpus_build.subprocess, "run", interrupted)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        build_module("clang-19", entry, "x", out)
    assert list(out.iterdir()) == []


# -- a real package -------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("MLGO_DEBIAN_TESTS") != "1",
                    reason="builds a real Debian package (root, network): set MLGO_DEBIAN_TESTS=1")
def test_a_real_package_end_to_end(tmp_path):
    """yajl (bookworm's 2.1.0, CMake, C, about 30 s): iniparser, the
    smallest, has source files deb.debian.org does not always serve."""
    out, cache = tmp_path / "corpus", tmp_path / "cache"
    r = debian.build_debian(out, packages="yajl", cache_dir=cache, jobs=2, progress=False)
    entry = debian.load_report(out / debian.REPORT)["yajl"]
    assert entry["status"] == "ok", entry.get("reason")
    assert entry["build_system"] == "cmake" and entry["c"] >= 8 and entry["cxx"] == 0
    assert "yajl/src/yajl_parser" in entry["modules"]
    assert (out / entry["log"]).is_file()
    cmd = (out / "yajl/src/yajl_parser.cmd").read_bytes().split(b"\0")
    assert cmd[0] == b"-cc1" and b"-Oz" in cmd
    assert json.loads((out / "corpus_description.json").read_text())["modules"] == entry["modules"]
    assert r.counts() == (1, 0, entry["c"], 0)
    again = debian.build_debian(out, packages="yajl", cache_dir=cache, jobs=2, progress=False)
    assert again.attempted == []
