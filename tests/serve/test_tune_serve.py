"""Builds with tuned decisions (`serve --replay T`), with the real clang-19:
a served `make -j2` of a moved checkout gets exactly the tuned object sizes
(a T of fingerprinted JSON replays, and one of compiler replays as `tune`
writes), an edited module is detected stale and falls back with a valid
object, the guard still keeps every object at most -Oz's, and `stats` counts
it all."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from _serve_util import BIN, CLANG, ServerProc, needs_clang, plain_object, read_stats
from _tune_helpers import build_project_corpus, env_without_mlgo, json_replay_tune, mlgo_host, read_manifest
from mlgo_host.measure.sizes import text_size
from mlgo_host.serve.stats import aggregate

pytestmark = [needs_clang, pytest.mark.skipif(shutil.which("make") is None, reason="needs make")]

OBJS = ("k", "t", "g")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    root = tmp_path_factory.mktemp("tuneserve")
    corpus = build_project_corpus(root)
    t = root / "T"
    json_replay_tune(corpus, t)
    man = read_manifest(t)
    assert man["modules"]["k"]["best_size"] < man["modules"]["k"]["default_size"], man["modules"]["k"]
    return root, t, man


def _checkout(root, name: str):
    """The project copied elsewhere (another checkout: matched relative to its root)."""
    dst = root / name
    shutil.copytree(root / "project", dst)
    shutil.rmtree(dst / "obj", ignore_errors=True)
    return dst


def _make(proj, channels: str, **extra) -> None:
    env = dict(env_without_mlgo(), MLGO_CHANNELS=channels, MLGO_FALLBACK="fail", **extra)
    r = subprocess.run(["make", "-j2", f"CC={os.path.join(BIN, 'mlgo-clang')}"], cwd=proj, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_served_make_gets_the_tuned_sizes_then_an_edited_module_goes_stale(tuned):
    root, t, man = tuned
    proj = _checkout(root, "checkout1")
    stats = str(root / "c1.jsonl")
    with ServerProc(str(root / "ch1"), slots=2, stats=stats, extra=("--replay", str(t))) as srv:
        _make(proj, srv.channels)
        for n in OBJS:
            assert text_size(proj / "obj" / f"{n}.o") == man["modules"][n]["best_size"], n
        # edit one module: its observation stream changes, the replay must not apply blindly
        src = proj / "src" / "k.c"
        src.write_text("static int extra(int x) { return x * 5 + 2; }\nint kx(int x) { return extra(x) + extra(x + 3); }\n"
                       + src.read_text())
        os.utime(src)
        _make(proj, srv.channels)
        assert srv.terminate() == 0
    recs = read_stats(stats)
    assert [r["tuned"] for r in recs[:3]] == ["tuned"] * 3
    last = recs[-1]
    assert last["tuned_module"] == "k" and last["tuned"] == "stale" and last["status"] == "ok"
    assert last["text_size"] == text_size(proj / "obj" / "k.o")  # a valid object
    if last["tuned_applied"] == 0:  # the stream differed before any forced decision: exactly the default
        assert last["text_size"] == text_size_of_plain(proj, root)
    b = aggregate(recs)[0]
    assert b["tuned"]["stale"] == 1 and b["tuned"]["tuned"] == 2  # last record per object counts
    out = mlgo_host("stats", stats)
    assert out.returncode == 0 and "2 tuned, 1 stale" in out.stdout, out.stdout


def text_size_of_plain(proj, root) -> int:
    plain_object(str(proj / "src" / "k.c"), str(root / "k-plain.o"), flags=("-Oz", f"-I{proj / 'src'}"))
    return text_size(root / "k-plain.o")


def test_guard_with_replay_is_never_bigger_than_Oz_and_counts_bytes_saved(tuned):
    root, t, man = tuned
    proj = _checkout(root, "checkout2")
    stats = str(root / "c2.jsonl")
    with ServerProc(str(root / "ch2"), slots=2, stats=stats, extra=("--replay", str(t), "--guard")) as srv:
        _make(proj, srv.channels)
        assert srv.terminate() == 0
    for n in OBJS:
        plain = root / f"{n}-plain2.o"
        plain_object(str(proj / "src" / f"{n}.c"), str(plain), flags=("-Oz", f"-I{proj / 'src'}"))
        assert text_size(proj / "obj" / f"{n}.o") <= text_size(plain), n
    b = aggregate(read_stats(stats))[0]
    want = sum(m["default_size"] - m["best_size"] for m in man["modules"].values())
    assert b["tuned"]["tuned"] == 3 and b["tuned"]["saved_bytes"] == want > 0


def test_compiles_of_other_code_are_served_by_the_policy(tuned, tmp_path):
    root, t, _ = tuned
    (tmp_path / "x.c").write_text("static int h(int x) { return x + 1; }\nint xx(int x) { return h(x) * h(x + 2); }\n")
    stats = str(tmp_path / "s.jsonl")
    with ServerProc(str(tmp_path / "ch"), slots=1, stats=stats, extra=("--replay", str(t))) as srv:
        env = dict(env_without_mlgo(), MLGO_CHANNELS=srv.channels, MLGO_FALLBACK="fail")
        r = subprocess.run([os.path.join(BIN, "mlgo-clang"), "-Oz", "-c", "x.c", "-o", "x.o"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert srv.terminate() == 0
    assert [x["tuned"] for x in read_stats(stats)] == ["default"]


@pytest.fixture(scope="module")
def batched(tmp_path_factory):
    """A T of tune's default search: compiler replays, applied with plain flags."""
    root = tmp_path_factory.mktemp("batched")
    corpus = build_project_corpus(root)
    t = root / "T"
    r = mlgo_host("tune", "--corpus", str(corpus), "--output", str(t), "--compiles-per-module", "8", "--jobs", "2")
    assert r.returncode == 0, r.stderr
    return root, t, read_manifest(t)


def test_served_make_of_a_batched_T_applies_its_compiler_replays(batched, tmp_path):
    # tune's default search keeps compiler replays: the server's clients apply them with plain flags
    root, t, man = batched
    proj = _checkout(root, "checkout")
    stats = str(tmp_path / "s.jsonl")
    with ServerProc(str(tmp_path / "ch"), slots=2, stats=stats, extra=("--replay", str(t))) as srv:
        assert os.path.getsize(stats) == 0  # there from the start
        _make(proj, srv.channels)
        assert srv.terminate() == 0
    mods = man["modules"]
    for n in OBJS:
        assert text_size(proj / "obj" / f"{n}.o") == mods[n]["best_size"], n
    # the compiles by flags bypass the slots, and the stats still have them: every compile of the build
    by_flags = {n for n in OBJS if mods[n].get("inline_replay") or mods[n].get("base_flags")}
    assert by_flags, mods
    recs = {os.path.basename(r["output"]): r for r in read_stats(stats)}
    assert sorted(recs) == sorted(f"{n}.o" for n in OBJS)
    for n in OBJS:
        r = recs[f"{n}.o"]
        assert r["status"] == "ok" and r["text_size"] == mods[n]["best_size"], r
        if n in by_flags:
            assert r["by"] == "flags" and r["tuned"] == "tuned" and r["tuned_module"] == n and r["slot"] is None, r
        else:
            assert "by" not in r and r["tuned"] == "default", r
    b = aggregate(read_stats(stats))[0]
    assert b["tuned"]["tuned"] == len(by_flags)
    assert b["tuned"]["saved_bytes"] == sum(mods[n]["default_size"] - mods[n]["best_size"] for n in by_flags) > 0
    out = mlgo_host("stats", stats)
    assert out.returncode == 0 and f"{len(by_flags)} tuned, 0 stale" in out.stdout, out.stdout


def test_a_server_records_the_compiles_mlgo_replay_gives_flags_and_an_empty_build_leaves_valid_stats(batched,
                                                                                                    tmp_path):
    root, t, man = batched
    proj = _checkout(root, "checkout-report")
    (proj / "obj").mkdir()
    empty = str(tmp_path / "empty.jsonl")
    with ServerProc(str(tmp_path / "ch0"), slots=1, stats=empty, extra=("--replay", str(t))) as srv:
        assert srv.terminate() == 0
    r = mlgo_host("stats", empty)
    assert r.returncode == 0 and "no records" in r.stdout, r.stdout + r.stderr
    # MLGO_REPLAY=T next to a server of MLGO_CHANNELS without --replay: the tuned compile is in its stats too
    stats = str(tmp_path / "s.jsonl")
    with ServerProc(str(tmp_path / "ch"), slots=1, stats=stats) as srv:
        env = dict(env_without_mlgo(), MLGO_REPLAY=str(t), MLGO_CHANNELS=srv.channels, MLGO_FALLBACK="fail",
                   MLGO_BUILD="b1")
        r = subprocess.run([os.path.join(BIN, "mlgo-clang"), "-Oz", "-Isrc", "-c", "src/k.c", "-o", "obj/k.o"],
                           cwd=proj, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        assert srv.terminate() == 0
    (rec,) = read_stats(stats)
    assert rec["by"] == "flags" and rec["tuned_module"] == "k" and rec["build"] == "b1" and rec["status"] == "ok"
    assert rec["text_size"] == text_size(proj / "obj" / "k.o") == man["modules"]["k"]["best_size"]
    assert rec["output"] == str(proj / "obj" / "k.o") and rec["tune_dir"] == str(t)
    assert not os.path.exists(tmp_path / "ch" / "reports")  # the server removed what it made


def test_a_tuned_file_compiled_with_other_flags_gets_one_note_and_a_plain_compile(batched, tmp_path):
    """A build reconfigured without the tuned flags (CMake resets CMAKE_C_FLAGS with the compiler) would
    otherwise get nothing from T without a word."""
    root, t, man = batched
    name = next(n for n in OBJS if man["modules"][n].get("inline_replay"))
    proj = _checkout(root, "checkout-flags")
    (proj / "obj").mkdir()
    cmd = [os.path.join(BIN, "mlgo-clang"), "-O2", "-Isrc", "-c", f"src/{name}.c", "-o", f"obj/{name}.o"]
    r = subprocess.run(cmd, cwd=proj, env=dict(env_without_mlgo(), MLGO_REPLAY=str(t)), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr == (f"mlgo-clang: note: {proj}/src/{name}.c was tuned ({t}) with other flags (only here: -O2; only "
                        "when tuned: -Oz): compiled without its tuned decisions\n"), r.stderr
    subprocess.run([CLANG, *cmd[1:-1], "obj/plain.o"], cwd=proj, check=True, timeout=120)
    assert (proj / "obj" / f"{name}.o").read_bytes() == (proj / "obj" / "plain.o").read_bytes()
    quiet = subprocess.run(cmd, cwd=proj, env=dict(env_without_mlgo(), MLGO_REPLAY=str(t), MLGO_QUIET="1"),
                           capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


def test_serve_replay_of_a_missing_dir_is_one_line(tmp_path):
    r = mlgo_host("serve", "--channels", str(tmp_path / "ch"), "--replay", str(tmp_path / "nope"), timeout=60)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "not a tune directory" in r.stderr, r.stderr


def test_a_tune_dir_another_user_could_change_steers_no_compile(batched, tmp_path):
    # MLGO_REPLAY=T gives every compile of the build T's flags and replay files: T and T/replays must be one's own
    root, t0, man = batched
    assert man["modules"]["k"]["best_size"] < man["modules"]["k"]["default_size"]
    t = tmp_path / "T"
    shutil.copytree(t0, t)
    proj = _checkout(root, "checkout-trust")
    (proj / "obj").mkdir()
    out = proj / "obj" / "k.o"  # the tuned compile: matched by its source, object and flags
    cmd = [os.path.join(BIN, "mlgo-clang"), "-Oz", "-Isrc", "-c", "src/k.c", "-o", "obj/k.o"]

    def compile_k(replay, fallback):
        env = dict(env_without_mlgo(), MLGO_REPLAY=str(replay), MLGO_FALLBACK=fallback)
        return subprocess.run(cmd, cwd=proj, env=env, capture_output=True, text=True, timeout=120)

    r = compile_k(t, "fail")  # one's own: its tuned decisions, as before
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert text_size(out) == man["modules"]["k"]["best_size"]
    plain = text_size_of_plain(proj, tmp_path)
    assert plain == man["modules"]["k"]["default_size"]

    def refused(replay, words):
        out.unlink(missing_ok=True)
        r = compile_k(replay, "plain")
        assert r.returncode == 0 and text_size(out) == plain, r.stderr
        assert r.stderr.startswith(f"mlgo-clang: warning: MLGO_REPLAY: {words}"), r.stderr
        assert r.stderr.count("\n") == 1 and r.stderr.endswith("; compiling without the tuned flags\n"), r.stderr
        out.unlink()
        r = compile_k(replay, "fail")
        assert r.returncode == 2 and not out.exists()
        assert r.stderr.startswith(f"mlgo-clang: error: MLGO_REPLAY: {words}") and r.stderr.count("\n") == 1
        s = mlgo_host("serve", "--channels", str(tmp_path / "ch"), "--replay", str(replay), timeout=60)
        assert s.returncode == 2 and s.stderr.startswith(f"mlgo-host serve: error: --replay: {words}"), s.stderr
        assert s.stderr.count("\n") == 1 and not (tmp_path / "ch").exists()

    link = tmp_path / "link"
    link.symlink_to(t)
    refused(link, f"{link} is a symbolic link")
    os.chmod(t, 0o777)
    refused(t, f"{t} is writable by group and others (mode 0777)")
    os.chmod(t, 0o755)
    os.chmod(t / "replays", 0o775)
    refused(t, f"{t / 'replays'} is writable by group (mode 0775)")
    os.chmod(t / "replays", 0o755)
    if os.geteuid() == 0:
        os.chown(t, 65534, -1)
        refused(t, f"{t} is owned by nobody (uid 65534), not by you")
        os.chown(t, 0, -1)
    r = compile_k(t, "fail")
    assert r.returncode == 0 and r.stderr == "" and text_size(out) == man["modules"]["k"]["best_size"], r.stderr


def test_serve_replay_with_a_replay_file_gone_serves_that_module_by_the_policy(batched, tmp_path):
    # clang fails a compile whose replay file is not there: the client says so once and the policy serves it
    root, t0, man = batched
    assert man["modules"]["k"]["inline_replay"], man["modules"]["k"]
    t = tmp_path / "T"
    shutil.copytree(t0, t)
    replay = t / "replays" / "k.inline.txt"
    replay.unlink()
    proj = _checkout(root, "checkout-gone")
    (proj / "obj").mkdir()
    why = f"tuned module k: its replay file {replay} is missing (mlgo-host tune --output {t} writes it again)"
    stats = str(tmp_path / "s.jsonl")
    with ServerProc(str(tmp_path / "ch"), slots=1, stats=stats, extra=("--replay", str(t))) as srv:
        env = dict(env_without_mlgo(), MLGO_CHANNELS=srv.channels, MLGO_FALLBACK="fail")
        r = subprocess.run([os.path.join(BIN, "mlgo-clang"), "-Oz", "-Isrc", "-c", "src/k.c", "-o", "obj/k.o"],
                           cwd=proj, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stderr == f"mlgo-clang: warning: serve --replay: {why}; compiling without the tuned flags\n"
        assert f"warning: --replay: {why}; its compiles are served by the policy" in srv.output()
        assert srv.terminate() == 0
    assert text_size_of_plain(proj, tmp_path) == text_size(proj / "obj" / "k.o") == man["modules"]["k"]["default_size"]
    (rec,) = read_stats(stats)
    assert rec["status"] == "ok" and rec["tuned"] == "default" and "by" not in rec, rec
