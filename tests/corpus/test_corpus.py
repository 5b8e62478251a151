"""Corpus reading, command rebuild, building from compile databases, sampling,
split and the benchmark download logic, with the real clang-19."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from collections import Counter
from pathlib import Path

import pytest

from _corpus_helpers import CLANG, build_small_corpus, write_project
from mlgo_host.errors import CorpusError
from mlgo_host.corpus import benchmark
from mlgo_host.corpus.corpus import (DESCRIPTION, Corpus, Module, Sampler, clean_cc1, load_corpus,
                                    project_of, split_names, split_three,
                                       write_description)
from mlgo_host.corpus.build import LOCATION_TRACKING, CompileEntry, build_corpus, compile_flags, load_compile_commands, module_names
from mlgo_host.corpus.driver_flags import strip_driver_flags


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> Path:
    return build_small_corpus(tmp_path_factory.mktemp("small"))


@pytest.fixture(scope="module")
def project(corpus_dir) -> Path:
    return corpus_dir.parent / "project"


# -- compile database ----------------------------------------------------------

def test_compile_database_both_forms_are_normalized(project):
    entries = load_compile_commands(project / "compile_commands.json")
    assert [e.file.name for e in entries] == ["mathx.c", "strs.c", "tiny.c", "shapes.cc"]
    for e in entries:
        assert e.file.is_absolute() and e.file.exists()
        assert e.output is not None and e.output.is_absolute()
        assert e.output.parent == project / "build" / "obj"  # relative -o resolved against directory
    assert [e.is_cxx for e in entries] == [False, False, False, True]
    flags = compile_flags(entries[0])
    assert "-MD" not in flags and "-MF" not in flags and "-o" not in flags and "-c" not in flags
    assert not any(f.endswith("mathx.c") for f in flags) and "-Oz" in flags
    assert module_names(entries) == ["mathx", "strs", "tiny", "shapes"]


def test_bad_compile_databases_raise_corpus_error(tmp_path):
    p = tmp_path / "cc.json"
    p.write_text("[{")
    with pytest.raises(CorpusError, match="not valid JSON.*line 1"):
        load_compile_commands(p)
    p.write_text(json.dumps({"directory": "/"}))
    with pytest.raises(CorpusError, match="JSON list"):
        load_compile_commands(p)
    p.write_text(json.dumps([{"directory": "/", "file": "a.c"}]))
    with pytest.raises(CorpusError, match="entry 0.*command"):
        load_compile_commands(p)
    p.write_text(json.dumps([{"directory": 5, "file": "a.c", "command": "cc -c a.c"}]))
    with pytest.raises(CorpusError, match="entry 0: 'directory' and 'file' must be non-empty strings"):
        load_compile_commands(p)
    with pytest.raises(CorpusError, match="not found"):
        load_compile_commands(tmp_path / "missing.json")


# -- building ------------------------------------------------------------------

def test_built_modules_are_cc1_and_optimizable_bitcode(corpus_dir):
    c = load_corpus(corpus_dir, strict=True)
    assert sorted(m.name for m in c.modules) == ["mathx", "shapes", "strs", "tiny"]
    for m in c.modules:
        raw = (corpus_dir / f"{m.name}.cmd").read_bytes().split(b"\0")
        assert raw[0] == b"-cc1" and b"-Oz" in raw and b"-o" not in raw
        ir = subprocess.run(["llvm-dis-19", str(m.bc_path), "-o", "-"], capture_output=True, text=True, check=True)
        assert "optnone" not in ir.stdout and "minsize" in ir.stdout
    # The bitcode is what mlgo-utils extracts from -Xclang -fembed-bitcode=all objects.


def test_bitcode_and_cmd_match_mlgo_utils_extraction(corpus_dir, project, tmp_path):
    src = project / "src" / "mathx.c"
    obj = tmp_path / "emb.o"
    # the corpus keeps locations (call-site keys need them): the same flag on the embedding compile
    subprocess.run([CLANG, "-Oz", "-I../src", "-c", "../src/mathx.c", "-o", str(obj), "-Xclang",
                    "-fembed-bitcode=all", *LOCATION_TRACKING], cwd=project / "build", check=True)
    subprocess.run(["llvm-objcopy-19", f"--dump-section=.llvmbc={tmp_path / 'x.bc'}",
                    f"--dump-section=.llvmcmd={tmp_path / 'x.cmd'}", str(obj), str(tmp_path / 'junk.o')], check=True)
    assert (tmp_path / "x.bc").read_bytes() == (corpus_dir / "mathx.bc").read_bytes()
    theirs = [a for a in (tmp_path / "x.cmd").read_bytes().decode().split("\0") if a]
    ours = (corpus_dir / "mathx.cmd").read_bytes().decode().split("\0")
    # Same cc1 job (the embedded one also records -fembed-bitcode, the location-tracking remark
    # filter and, with locations on, the CFI macro every compile predefines anyway; it splits -D values).
    extra = ("-fembed", "-Rpass=", "-D__GCC_HAVE_DWARF2_CFI_ASM")
    norm = lambda args: [a for a in " ".join(args).replace("-D ", "-D").split() if not a.startswith(extra)]
    assert norm(theirs) == norm(ours)
    assert src.exists()


def test_rebuilt_command_gives_the_object_of_the_original_compile(corpus_dir, project, tmp_path):
    c = load_corpus(corpus_dir)
    for e, name in zip(load_compile_commands(project / "compile_commands.json"), ["mathx", "strs", "tiny", "shapes"]):
        direct = tmp_path / f"{name}.direct.o"
        subprocess.run([CLANG, *compile_flags(e), "-c", e.source, "-o", str(direct)], cwd=e.directory, check=True)
        via = tmp_path / f"{name}.via.o"
        subprocess.run(c[name].compile_command(CLANG, via), check=True)
        assert via.read_bytes() == direct.read_bytes(), name


def test_failures_are_listed_and_skipped_and_rebuild_is_idempotent(tmp_path):
    db_path = write_project(tmp_path)
    (tmp_path / "src" / "broken.c").write_text("int f( { return 1; }\n")
    (tmp_path / "src" / "unopt.c").write_text("static int g(int x){return x+1;} int h(int y){return g(y);}\n")
    (tmp_path / "src" / "two.c").write_text("int two(void) { return 2; }\n")
    db = json.loads(db_path.read_text())
    db += [
        {"directory": str(tmp_path), "file": "src/broken.c", "command": "cc -Oz -c src/broken.c -o o/broken.o"},
        {"directory": str(tmp_path), "file": "src/gone.c", "command": "cc -Oz -c src/gone.c -o o/gone.o"},
        {"directory": str(tmp_path), "file": "src/unopt.c", "command": "cc -c src/unopt.c -o o/unopt.o"},
        # two sources with one -o: the driver's own error is the reason, not a cc1 line naming -ferror-limit
        {"directory": str(tmp_path), "file": "src/two.c", "command": "cc -Oz -c src/unopt.c src/two.c -o o/two.o"},
    ]
    db_path.write_text(json.dumps(db))
    out = tmp_path / "corpus"
    rep = build_corpus(load_compile_commands(db_path), out, clang=CLANG, jobs=2, progress=False)
    failed = dict(rep.failures)
    assert set(Path(f).name for f in failed) == {"broken.c", "gone.c", "unopt.c", "two.c"}
    assert "error:" in failed[str(tmp_path / "src/two.c")], failed
    assert "expected" in failed[str(tmp_path / "src/broken.c")]
    assert "does not exist" in failed[str(tmp_path / "src/gone.c")]
    assert "-O0" in failed[str(tmp_path / "src/unopt.c")]
    assert rep.built == 4 and rep.cxx == 1
    desc = json.loads((out / DESCRIPTION).read_text())
    assert desc == {"modules": sorted(rep.modules), "has_thinlto": False}
    assert not list(out.rglob("*.tmp"))
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*.bc")}
    rep2 = build_corpus(load_compile_commands(db_path), out, clang=CLANG, jobs=2, progress=False, opt_level="-Oz")
    assert rep2.built == 1 and rep2.reused == 4  # only unopt.c is new (forced to -Oz)
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes
    assert "unopt" in load_corpus(out)[next(n for n in rep2.modules if n.endswith("unopt"))].name


# -- reading -------------------------------------------------------------------

def test_clean_cc1_strips_what_must_not_survive():
    args = ["-cc1", "-triple", "x86_64-pc-linux-gnu", "-emit-llvm-bc", "-disable-llvm-passes", "-Oz",
            "-split-dwarf-file", "a.dwo", "-split-dwarf-output", "a.dwo", "-fthinlto-index=a.thinlto.bc",
            "-fprofile-sample-use=p.prof", "-fembed-bitcode=all", "-o", "a.o", "-main-file-name", "a.c",
            "-x", "c", "a.c", ""]
    out = clean_cc1(args)
    assert out == ["-cc1", "-emit-obj", "-triple", "x86_64-pc-linux-gnu", "-Oz", "-main-file-name", "a.c"]
    assert clean_cc1(out) == out
    with pytest.raises(CorpusError, match="cc1"):
        clean_cc1(["-Oz", "-c"])


def _corpus_with(tmp_path: Path, src: Path, desc: dict | str) -> Path:
    d = tmp_path / "c"
    shutil.copytree(src, d)
    (d / DESCRIPTION).write_text(desc if isinstance(desc, str) else json.dumps(desc))
    return d


def test_description_errors_are_clear(corpus_dir, tmp_path):
    with pytest.raises(CorpusError, match="no corpus description"):
        load_corpus(tmp_path)
    d = _corpus_with(tmp_path, corpus_dir, '{"modules": ["tiny",')
    with pytest.raises(CorpusError, match=r"corpus_description.json: not valid JSON.*line 1"):
        load_corpus(d)
    for desc, msg in [({"modules": ["tiny"], "has_thinlto": True}, "ThinLTO"),
                      ({"modules": []}, "no modules"),
                      ({"mods": ["tiny"]}, "'modules' list"),
                      ({"modules": ["tiny", "tiny"]}, "listed twice"),
                      ({"modules": ["tiny"], "global_command_override": ["<UNSPECIFIED>"]}, "not filled")]:
        (d / DESCRIPTION).write_text(json.dumps(desc))
        with pytest.raises(CorpusError, match=msg):
            load_corpus(d)


def test_broken_modules_are_kept_aside_with_their_reason(corpus_dir, tmp_path):
    d = _corpus_with(tmp_path, corpus_dir, {"modules": ["mathx", "strs", "tiny", "shapes", "ghost"],
                                            "has_thinlto": False})
    (d / "strs.bc").unlink()
    (d / "tiny.cmd").write_bytes(b"-Oz\0-c\0")
    (d / "shapes.cmd").unlink()
    c = load_corpus(d)
    assert [m.name for m in c.modules] == ["mathx"]
    reasons = {m.name: m.error for m in c.broken}
    assert "missing bitcode strs.bc" in reasons["strs"]
    assert "missing bitcode ghost.bc" in reasons["ghost"]
    assert "tiny.cmd" in reasons["tiny"] and "cc1" in reasons["tiny"]
    assert "missing command file shapes.cmd" in reasons["shapes"]
    strs = next(m for m in c.broken if m.name == "strs")
    with pytest.raises(CorpusError, match="module 'strs': missing bitcode"):
        strs.compile_command(CLANG, "x.o")
    with pytest.raises(CorpusError, match="module '(strs|tiny|shapes|ghost)'"):
        load_corpus(d, strict=True)


def test_global_command_override_applies_to_every_module(corpus_dir, tmp_path):
    ov = ["-cc1", "-triple", "x86_64-pc-linux-gnu", "-O2", "-o", "ignored.o"]
    d = _corpus_with(tmp_path, corpus_dir, {"modules": ["mathx", "tiny"], "has_thinlto": False,
                                            "global_command_override": ov})
    (d / "tiny.cmd").unlink()  # not needed with an override
    c = load_corpus(d, strict=True)
    for m in c.modules:
        cmd = m.compile_command(CLANG, tmp_path / "o.o")
        assert cmd[1:6] == ["-cc1", "-emit-obj", "-triple", "x86_64-pc-linux-gnu", "-O2"]
        assert "ignored.o" not in cmd
    subprocess.run(c["mathx"].compile_command(CLANG, tmp_path / "o.o"), check=True)


#: what both driver-form strippers drop: outputs, side files, dependency files, modes, LTO
SIDE_FLAGS = ["-o", "x.o", "-oy.o", "-MD", "-MF", "x.d", "-MFy.d", "-MT", "t", "-MQ", "q", "-MP", "-c", "-S",
              "-emit-llvm", "-flto=thin", "-fthinlto-index=x.thinlto.bc", "-fembed-bitcode=all", "-save-temps=obj", "-gsplit-dwarf",
              "--serialize-diagnostics", "x.dia", "-split-dwarf-file", "x.dwo", "-Werror", "-Werror=format"]
#: what only a source input means: kept for an entry, dropped for an override
SOURCE_FLAGS = ["-x", "c", "-fprofile-sample-use=p.prof", "-fprofile-remapping-file", "r.txt"]


def test_entries_and_overrides_strip_one_table_of_driver_flags(tmp_path):
    keep = ["-O2", "-DX=1", "-Iinc", "-g"]
    src = tmp_path / "a.c"
    entry = CompileEntry(tmp_path, src, ("clang", *keep, *SIDE_FLAGS, *SOURCE_FLAGS, "a.c"), tmp_path / "x.o")
    assert compile_flags(entry) == keep + SOURCE_FLAGS  # the input goes, the source's flags stay
    assert strip_driver_flags([*keep, *SIDE_FLAGS, *SOURCE_FLAGS], bitcode_input=True) == keep


def test_a_driver_form_override_compiles_the_bitcode(corpus_dir, tmp_path):
    ov = ["-O2", "-MD", "-MF", str(tmp_path / "deps.d"), "-x", "c", "-fprofile-sample-use=none.prof",
          "-o", "ignored.o", "-c"]
    d = _corpus_with(tmp_path, corpus_dir, {"modules": ["mathx"], "global_command_override": ov})
    m = load_corpus(d, strict=True)["mathx"]
    assert list(m.cmd) == ["-O2", "-c"]
    subprocess.run(m.compile_command(CLANG, tmp_path / "o.o"), check=True)
    assert (tmp_path / "o.o").stat().st_size > 0 and not (tmp_path / "deps.d").exists()


def test_task_round_trip(corpus_dir):
    m = load_corpus(corpus_dir)["mathx"]
    t = m.to_task(ship_bitcode=True)
    assert t["bc_bytes"] == m.bc_path.read_bytes()
    assert Module.from_task(t) == m
    assert "bc_bytes" not in m.to_task()


# -- sampling and split ----------------------------------------------------------

def _fake(n: int) -> list[Module]:
    return [Module(f"m{i:03d}", Path(f"m{i:03d}.bc"), ("-cc1",), size=(i * 7919) % 1000 + 1) for i in range(n)]


def test_round_robin_draws_one_module_per_size_bucket():
    mods = _fake(100)
    s = Sampler(mods, "round_robin", seed=3, buckets=10)
    by_size = sorted(mods, key=lambda m: (m.size, m.name))
    bucket_of = {m.name: i // 10 for i, m in enumerate(by_size)}
    for _ in range(5):
        got = s.take(10)
        assert sorted(bucket_of[m.name] for m in got) == list(range(10))
    assert [m.name for m in Sampler(mods, seed=3, buckets=10).take(30)] == \
        [m.name for m in Sampler(mods, seed=3, buckets=10).take(30)]
    assert [m.name for m in Sampler(mods, seed=3).take(30)] != [m.name for m in Sampler(mods, seed=4).take(30)]


def test_skip_resumes_the_same_sequence():
    mods = _fake(37)
    for strategy in Sampler.STRATEGIES:
        a = Sampler(mods, strategy, seed=9)
        seq = [m.name for m in a.take(50)]
        b = Sampler(mods, strategy, seed=9)
        b.skip(20)
        assert [m.name for m in b.take(30)] == seq[20:]


def test_without_replacement_covers_every_module_once_per_epoch():
    mods = _fake(23)
    s = Sampler(mods, "without_replacement", seed=1)
    first, second = s.take(23), s.take(23)
    assert Counter(m.name for m in first) == Counter(m.name for m in mods)
    assert Counter(m.name for m in second) == Counter(m.name for m in mods)
    assert [m.name for m in first] != [m.name for m in second]
    with pytest.raises(CorpusError, match="strategy"):
        Sampler(mods, "bogus")
    with pytest.raises(CorpusError, match="empty"):
        Sampler([], "round_robin")


def test_split_is_deterministic_stable_and_sized():
    names = [f"lib/file_{i}" for i in range(3000)]  # one project: split by module

    def heldout(fraction, seed=0):
        return {n for n, part in split_names(names, fraction, 0.0, seed).items() if part == "heldout"}

    held = heldout(0.2)
    assert 0.17 < len(held) / len(names) < 0.23
    assert held == heldout(0.2)
    assert held != heldout(0.2, seed=5)
    assert not heldout(0.0)
    c = Corpus(Path("."), _fake(200), [])
    train, heldout = c.split(0.3)
    assert len(train) + len(heldout) == 200 and not {m.name for m in train} & {m.name for m in heldout}
    bigger = Corpus(Path("."), _fake(400), [])
    assert {m.name for m in heldout} <= {m.name for m in bigger.split(0.3)[1]}
    with pytest.raises(CorpusError):
        split_names(["x"], 1.5, 0.0)


def test_a_project_is_whole_on_one_side_of_every_split():
    names = [f"proj{p:02d}/src/file_{i}" for p in range(40) for i in range(p % 7 + 1)]
    part = split_names(names, 0.2, 0.2)
    sides = {}
    for n in names:
        sides.setdefault(project_of(n), set()).add(part[n])
    assert all(len(s) == 1 for s in sides.values())
    count = {k: sum(1 for s in sides.values() if s == {k}) for k in ("train", "validation", "heldout")}
    assert count["heldout"] and count["validation"] and count["train"] > count["heldout"]
    # the same files split by module put every project with several files on both sides
    by_module = split_names(names, 0.2, 0.2, by="module")
    assert any(len({by_module[n] for n in names if project_of(n) == p}) > 1 for p in sides)
    # a project stays on its side whatever other projects the corpus holds
    more = split_names(names + [f"other{p}/x" for p in range(30)], 0.2, 0.2)
    assert all(more[n] == part[n] for n in names)
    assert project_of("bash/lib/glob/glob") == "bash" and project_of("flat") == "flat"


def test_few_projects_still_give_each_part_a_project_or_fall_back_to_modules():
    mods = [Module(f"p{p}/f{i}", Path("x.bc"), ("-cc1",), size=1) for p in range(4) for i in range(5)]
    train, val, held = split_three(mods, 0.2, 0.2)
    projects = [{project_of(m.name) for m in part} for part in (train, val, held)]
    assert [len(p) for p in projects] == [2, 1, 1]
    two = [m for m in mods if m.name.startswith(("p0/", "p1/"))]
    train, val, held = split_three(two, 0.2, 0.2)  # two projects: split by module
    assert {project_of(m.name) for m in train} == {"p0", "p1"}
    assert Corpus(Path("."), mods, []).split(0.2)[1] == held_of(mods)
    with pytest.raises(CorpusError, match="split unit"):
        split_names(["a/b"], 0.2, 0.2, by="file")


def held_of(mods):
    return split_three(mods, 0.2, 0.0)[2]


# -- benchmark download / verify / extract -----------------------------------------

def _tarball(path: Path, top: str, files: dict[str, str], extra: list[tarfile.TarInfo] | None = None) -> str:
    with tarfile.open(path, "w:gz") as tf:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for info in extra or []:
            tf.addfile(info, io.BytesIO(b"x" * info.size))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _spec(tmp_path: Path, sha: str) -> Path:
    spec = {"opt_level": "-Oz", "packages": [{
        "name": "toy", "version": "1.0", "filename": "toy-1.0.tar.gz", "sha256": sha,
        "units": [{"sources": ["lib/*.c"], "exclude": ["lib/skip.c"], "flags": ["-Iinclude"]},
                  {"sources": ["cpp/*.cc"], "flags": ["-std=c++17"]}]}]}
    p = tmp_path / "spec.json"
    p.write_text(json.dumps(spec))
    return p


TOY = {
    "include/toy.h": "int toy_add(int a, int b);\n",
    "lib/add.c": '#include "toy.h"\nstatic int twice(int x){return 2*x;}\nint toy_add(int a,int b){return twice(a)+b;}\n',
    "lib/skip.c": "#error this template is #included elsewhere\n",
    "cpp/vec.cc": "#include <vector>\nint vsum(const std::vector<int>&v){int s=0;for(int x:v)s+=x;return s;}\n",
}


def test_benchmark_pipeline_on_a_local_sdist(tmp_path):
    src = tmp_path / "upstream" / "toy-1.0.tar.gz"
    src.parent.mkdir()
    sha = _tarball(src, "toy-1.0", TOY)
    calls = []

    def downloader(req, dest):
        calls.append(req)
        shutil.copy(src, dest / "toy-1.0.tar.gz")

    out, cache = tmp_path / "corpus", tmp_path / "cache"
    rep = benchmark.build_benchmark(out, cache_dir=cache, spec_path=_spec(tmp_path, sha), clang=CLANG, jobs=2,
                                    progress=False, downloader=downloader)
    assert calls == ["toy==1.0"] and not rep.failures
    assert sorted(rep.modules) == ["toy-1.0/cpp/vec", "toy-1.0/lib/add"] and rep.cxx == 1
    c = load_corpus(out, strict=True)
    assert all("-Oz" in m.cmd for m in c.modules)
    db = json.loads((out / "compile_commands.json").read_text())
    assert all(not Path(e["arguments"][-1]).is_absolute() for e in db)  # relative -o
    # second run: nothing downloaded, extracted or compiled again
    rep2 = benchmark.build_benchmark(out, cache_dir=cache, spec_path=_spec(tmp_path, sha), clang=CLANG,
                                     progress=False, downloader=downloader)
    assert calls == ["toy==1.0"] and rep2.built == 0 and rep2.reused == 2


def test_hash_mismatch_is_rejected_and_the_file_removed(tmp_path):
    src = tmp_path / "toy-1.0.tar.gz"
    _tarball(src, "toy-1.0", TOY)
    spec = benchmark.load_spec(_spec(tmp_path, "0" * 64))

    def downloader(req, dest):
        shutil.copy(src, dest / "toy-1.0.tar.gz")

    with pytest.raises(CorpusError, match="sha256 mismatch.*toy-1.0.tar.gz.*expected 0000"):
        benchmark.fetch(spec.packages[0], tmp_path / "cache", downloader=downloader)
    assert not list((tmp_path / "cache").rglob("*.tar.gz"))

    def wrong_name(req, dest):
        (dest / "other.zip").write_bytes(b"x")

    with pytest.raises(CorpusError, match="expected toy-1.0.tar.gz"):
        benchmark.fetch(spec.packages[0], tmp_path / "cache", downloader=wrong_name)


def test_extract_refuses_paths_outside_the_tree(tmp_path):
    evil = tarfile.TarInfo("toy-1.0/../../escape.txt")
    evil.size = 1
    arc = tmp_path / "evil.tar.gz"
    _tarball(arc, "toy-1.0", {"a.c": "int a;\n"}, extra=[evil])
    with pytest.raises(CorpusError, match="unsafe path"):
        benchmark.extract(arc, tmp_path / "x")
    assert not (tmp_path / "escape.txt").exists()
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not an archive")
    with pytest.raises(CorpusError, match="not a readable archive"):
        benchmark.extract(junk, tmp_path / "y")


def test_shipped_benchmark_list_is_pinned_and_mixes_c_and_cxx():
    spec = benchmark.load_spec()
    assert spec.opt_level == "-Oz" and len(spec.packages) >= 5
    names = {p.name for p in spec.packages}
    assert {"brotli", "pycryptodome"} <= names
    for p in spec.packages:
        assert len(p.sha256) == 64 and p.filename.endswith((".tar.gz", ".zip")) and p.version
    pats = [s for p in spec.packages for u in p.units for s in u.sources]
    assert any(s.endswith(".c") for s in pats) and any(s.endswith(".cc") for s in pats)


def test_corpus_build_command(tmp_path, capsys):
    from mlgo_host.cli import main

    db = write_project(tmp_path)
    entries = json.loads(db.read_text())
    entries.append({"directory": str(tmp_path), "file": "src/nope.c", "command": "cc -Oz -c src/nope.c -o nope.o"})
    db.write_text(json.dumps(entries))
    out = tmp_path / "corpus"
    assert main(["corpus", "build", "--compile-commands", str(db), "--output", str(out), "--jobs", "2",
                 "--no-progress"]) == 0
    cap = capsys.readouterr()
    assert "4 modules (3 C, 1 C++): 4 built" in cap.out and "1 failed" in cap.out
    assert "failed" in cap.err and "nope.c" in cap.err
    assert len(load_corpus(out, strict=True)) == 4
    assert main(["corpus", "build", "--compile-commands", str(tmp_path / "none.json"), "--output", str(out)]) == 2
    assert "compile database not found" in capsys.readouterr().err
    assert main(["corpus"]) == 2


def test_relative_output_with_entries_in_other_directories(tmp_path, monkeypatch):
    """--output relative to the caller's directory, while each entry's frontend
    runs in the entry's own directory (here build/ and the project root)."""
    db = write_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    rep = build_corpus(load_compile_commands(db), "out/corpus", clang=CLANG, jobs=2, progress=False)
    assert rep.failures == [] and rep.built == 4
    assert len(load_corpus(tmp_path / "out" / "corpus", strict=True)) == 4
    assert not list((tmp_path / "build").rglob("*.bc"))


# -- combining corpora ---------------------------------------------------------------

def _renamed_copy(corpus: Path, dest: Path, prefix: str) -> Path:
    """``corpus`` copied with each project folder (and module name) prefixed."""
    names = json.loads((corpus / DESCRIPTION).read_text())["modules"]
    dest.mkdir()
    for n in names:
        if "/" in n:
            top = n.split("/", 1)[0]
            if not (dest / f"{prefix}{top}").exists():
                shutil.copytree(corpus / top, dest / f"{prefix}{top}")
        else:  # a top-level module: its own project
            for ext in (".bc", ".cmd"):
                shutil.copy(corpus / f"{n}{ext}", dest / f"{prefix}{n}{ext}")
    write_description(dest, [f"{prefix}{n}" for n in names])
    return dest


def test_combined_corpora_keep_names_and_projects(corpus_dir, tmp_path, capsys):
    from mlgo_host.cli import main

    other = _renamed_copy(corpus_dir, tmp_path / "other", "x_")
    out = tmp_path / "both"
    assert main(["corpus", "combine", str(corpus_dir), str(other), "--output", str(out)]) == 0
    one, two, both = load_corpus(corpus_dir), load_corpus(other), load_corpus(out)
    assert sorted(m.name for m in both) == sorted([m.name for m in one] + [m.name for m in two])
    same = lambda ms: {m.name: (m.cmd, m.size) for m in ms}  # noqa: E731
    assert same(both) == {**same(one), **same(two)}
    assert {project_of(m.name) for m in both} == {project_of(m.name) for m in [*one, *two]}
    # made again in place: the same corpus
    assert main(["corpus", "combine", str(corpus_dir), str(other), "--output", str(out)]) == 0
    assert len(load_corpus(out)) == len(both)
    capsys.readouterr()
    # a project in two corpora would put its files on both sides of a split
    assert main(["corpus", "combine", str(corpus_dir), str(corpus_dir), "--output", str(tmp_path / "dup")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is in both" in err[0]
    # an output with other files in it is not overwritten
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert main(["corpus", "combine", str(other), "--output", str(tmp_path / "busy")]) == 2
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"


def test_a_compile_commands_language_is_its_x_else_its_source_else_its_driver():
    from mlgo_host.languages import command_language

    assert command_language(["clang-19", "-Oz", "-c", "a.c", "-o", "a.o"]) == "C"
    assert command_language(["clang-19", "-c", "src/a.cpp"]) == "C++"
    assert command_language(["clang-19", "-x", "c++", "-c", "a.c"]) == "C++"
    assert command_language(["clang-19", "-xc", "-c", "a.cc"]) == "C"
    assert command_language(["clang-19", "-x", "ir", "-c", "a.bc"]) is None
    assert command_language(["clang++-19", "-c", "gen"]) == "C++"
    assert command_language(["clang-19", "-c", "gen"], source="/p/x.cc") == "C++"
    assert command_language(["clang-19", "-c", "a.s"]) is None
    assert command_language(["clang-19", "-cc1", "-main-file-name", "a.cpp", "-x", "ir", "a.bc"]) == "C++"
