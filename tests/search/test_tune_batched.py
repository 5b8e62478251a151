"""`mlgo-host tune` (batched search, the default) with the real clang-19: the
compiler's replay file it writes, a build that applies it with plain flags
(no server), an edited source, and a changed tree re-searched where it
changed."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest

from _tune_helpers import build_project_corpus, env_without_mlgo, mlgo_host, read_manifest
from mlgo_host.corpus.build import build_corpus, load_compile_commands
from mlgo_host.measure.sizes import text_size

BIN = os.path.dirname(shutil.which("mlgo-clang") or os.path.join(os.path.dirname(sys.executable), "x"))
pytestmark = [pytest.mark.skipif(shutil.which("clang-19") is None, reason="clang-19 not installed"),
              pytest.mark.skipif(shutil.which("make") is None, reason="needs make")]
OBJS = ("k", "t", "g")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    root = tmp_path_factory.mktemp("tunebatched")
    corpus = build_project_corpus(root)
    t = root / "T"
    r = mlgo_host("tune", "--corpus", str(corpus), "--output", str(t), "--compiles-per-module", "12", "--jobs", "2",
                  "--no-progress")
    assert r.returncode == 0, r.stderr
    return root, corpus, t, read_manifest(t)


def _make(proj, **env) -> subprocess.CompletedProcess:
    r = subprocess.run(["make", "-j2", f"CC={os.path.join(BIN, 'mlgo-clang')}"], cwd=proj,
                       env=dict(env_without_mlgo(), **env), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def _plain(proj, name: str, out) -> int:
    subprocess.run(["clang-19", "-Oz", "-Isrc", "-c", f"src/{name}.c", "-o", str(out)], cwd=proj, check=True)
    return text_size(out)


def test_batched_tune_measures_many_flips_per_compile_and_writes_compiler_replays(tuned):
    root, _, t, man = tuned
    mods = man["modules"]
    assert mods["k"]["best_size"] < mods["k"]["default_size"]
    assert all(m["best_size"] <= m["default_size"] for m in mods.values())
    assert sum(m["compiles"] for m in mods.values()) <= 12 * 3
    g = mods["g"]  # a module with a few dozen decisions: several flips per compile
    assert g["decisions"] >= 20 and g["flips_measured"] > 1.5 * g["batches"] > 0, g
    for n, m in mods.items():
        replay = t / "replays" / f"{n}.inline.txt"
        assert (m["inline_replay"] is not None) == (m["best_size"] < m["default_size"]) == replay.exists(), n
        if replay.exists():
            assert all(ln.startswith("remark: '") for ln in replay.read_text().splitlines())


def test_print_flags_compiles_a_file_to_exactly_its_tuned_size(tuned, tmp_path):
    root, _, t, man = tuned
    proj = root / "project"
    r = mlgo_host("tune", "--print-flags", str(t), "src/k.c", cwd=proj)
    assert r.returncode == 0, r.stderr
    flags = shlex.split(r.stdout)
    assert any(f.startswith("-cgscc-inline-replay=") for f in flags)
    out = tmp_path / "k.o"
    subprocess.run(["clang-19", "-Oz", "-Isrc", "-c", "src/k.c", "-o", str(out), *flags], cwd=proj, check=True)
    assert text_size(out) == man["modules"]["k"]["best_size"]
    r = mlgo_host("tune", "--print-flags", str(t), "src/nope.c", cwd=proj)  # a typo: no flags, said once
    assert r.returncode == 0 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert "src/nope.c (no such file)" in r.stderr and "has no tuned flags for it" in r.stderr


def test_print_flags_of_a_file_T_never_saw_prints_nothing_and_mlgo_clang_compiles_it_untouched(tuned, tmp_path):
    # a build that adds T's flags to every file goes on when a file was added since the tune
    root, _, t, _ = tuned
    proj = tmp_path / "checkout"
    shutil.copytree(root / "project", proj)
    shutil.rmtree(proj / "obj", ignore_errors=True)
    (proj / "obj").mkdir()
    (proj / "src" / "new.c").write_text("static int sq(int x) { return x * x + 1; }\n"
                                        "int na(int x) { return sq(x) + sq(x + 2); }\n")
    r = mlgo_host("tune", "--print-flags", str(t), "src/new.c", cwd=proj)
    assert r.returncode == 0 and r.stdout == "", r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("mlgo-host tune: note: src/new.c: "), r.stderr
    assert f"{t} has no tuned flags for it" in r.stderr
    # mlgo-clang with the same T: the compiler's own object, not a word
    cmd = [os.path.join(BIN, "mlgo-clang"), "-Oz", "-Isrc", "-c", "src/new.c", "-o", "obj/new.o"]
    r = subprocess.run(cmd, cwd=proj, env=dict(env_without_mlgo(), MLGO_REPLAY=str(t), MLGO_FALLBACK="fail"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    subprocess.run(["clang-19", "-Oz", "-Isrc", "-c", "src/new.c", "-o", "obj/plain.o"], cwd=proj, check=True)
    assert (proj / "obj" / "new.o").read_bytes() == (proj / "obj" / "plain.o").read_bytes()
    # a T that is no tune directory is still an error: one line, exit 2
    r = mlgo_host("tune", "--print-flags", str(proj), "src/new.c", cwd=proj)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("mlgo-host tune: error: ") and "tune directory" in r.stderr, r.stderr


def test_a_build_with_only_the_flags_gets_tunes_sizes_and_an_edit_still_compiles(tuned):
    root, _, t, man = tuned
    proj = root / "checkout"  # another checkout: matched relative to its root
    shutil.copytree(root / "project", proj)
    shutil.rmtree(proj / "obj", ignore_errors=True)
    r = _make(proj, MLGO_REPLAY=str(t), MLGO_FALLBACK="fail")  # no MLGO_CHANNELS: no server anywhere
    for n in OBJS:
        assert text_size(proj / "obj" / f"{n}.o") == man["modules"][n]["best_size"], n
    assert "changed since" not in r.stderr
    # an edit that shifts every line of k.c: keys are relative to their function, the build goes on
    src = proj / "src" / "k.c"
    src.write_text("/* a comment */\n\n" + src.read_text())
    r = _make(proj, MLGO_REPLAY=str(t))
    assert "k.c changed since it was tuned" in r.stderr and r.stderr.count("changed since") == 1
    edited = text_size(proj / "obj" / "k.o")
    assert edited == man["modules"]["k"]["best_size"]  # every call site kept its key: still tuned
    r = mlgo_host("tune", "--print-flags", str(t), "src/k.c", cwd=proj)  # another checkout: relative to its root
    assert "-cgscc-inline-replay-fallback=Original" in r.stdout and "changed since" in r.stderr
    # an edit inside the tuned functions: their sites no longer match, the compiler decides them
    src.write_text(src.read_text().replace("{ return helper(", "{\n  return helper("))
    _make(proj, MLGO_REPLAY=str(t))
    plain = _plain(proj, "k", proj / "k-plain.o")
    assert 0 < text_size(proj / "obj" / "k.o") <= plain


def test_eval_and_run_replay_a_batched_T(tuned, tmp_path):
    root, corpus, t, man = tuned
    r = mlgo_host("eval", "--corpus", str(corpus), "--replay", str(t), "--jobs", "1", "--no-progress", "--json",
                  "--baseline-cache", str(tmp_path / "b"))
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["policy_total"] == sum(m["best_size"] for m in man["modules"].values()), s
    proj = root / "project"  # the module's own command: matched by source, object and flags
    (proj / "obj").mkdir(exist_ok=True)
    r = mlgo_host("run", "--replay", str(t), "--", "clang-19", "-Oz", "-Isrc", "-c", "src/k.c", "-o", "obj/k.o",
                  cwd=proj)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["text_size"] == man["modules"]["k"]["best_size"] and out["tuned"]["tuned_module"] == "k"


def test_tune_on_a_changed_tree_searches_only_the_changed_module_again(tmp_path):
    corpus = build_project_corpus(tmp_path)
    t = tmp_path / "T"
    # (compiles enough for every module to measure all its flips: a module with flips left would go on with
    # the compiles the changed module's new search frees, which is no change of the tree)
    args = ("tune", "--corpus", str(corpus), "--output", str(t), "--compiles-per-module", "40", "--jobs", "2",
            "--no-progress")
    assert mlgo_host(*args).returncode == 0
    before = read_manifest(t)["modules"]
    assert all(before[n]["stopped"] == "exhausted" for n in ("k", "g")), before
    src = tmp_path / "project" / "src" / "t.c"
    src.write_text(src.read_text() + "int tc(int x) { return x - 1; }\n")
    rep = build_corpus(load_compile_commands(tmp_path / "project" / "compile_commands.json"), corpus,
                       clang="clang-19", jobs=2, progress=False)
    assert rep.built == 1  # the corpus rebuilds what changed
    r = mlgo_host(*args)
    assert r.returncode == 0, r.stderr
    assert "t changed since it was tuned" in r.stderr
    after = read_manifest(t)["modules"]
    for n in ("k", "g"):
        assert after[n] == before[n], n  # kept as they were


def test_tune_starts_from_the_shipped_policy_in_a_new_T(tmp_path):
    # the base policy is copied into T and named relative to T/replays,
    # which a new T does not have yet: the workers must still get it whole
    corpus = build_project_corpus(tmp_path)
    t = tmp_path / "T"
    r = mlgo_host("tune", "--corpus", str(corpus), "--output", str(t), "--policy", "pretrained-oz",
                  "--compiles-per-module", "6", "--jobs", "2", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "failed" not in r.stderr
    man = read_manifest(t)
    assert all(m["status"] == "ok" for m in man["modules"].values()), man


@pytest.mark.parametrize("whom", ["group", "main"])
def test_a_kill_of_tune_leaves_no_temp_files_and_keeps_T(tuned, tmp_path, whom):
    # group: what a user's Ctrl-C in a shell or a CI timeout does: every process of the group gets the signal,
    # the workers and their compilers too; main: `kill PID` of tune alone, its workers stopped by its pool
    # (tests/workers/test_pool.py: one still in a task is unwound, not killed); a private TMPDIR shows exactly
    # what is left behind
    _, corpus, _, _ = tuned
    tmp, t = tmp_path / "tmp", tmp_path / "T"
    tmp.mkdir()
    cmd = [sys.executable, "-m", "mlgo_host", "tune", "--corpus", str(corpus), "--output", str(t),
           "--compiles-per-module", "200", "--jobs", "2", "--no-progress"]
    p = subprocess.Popen(cmd, env=dict(os.environ, TMPDIR=str(tmp)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    end = time.monotonic() + 120
    # a replay compile in flight in a worker, after the first modules were stored
    while not (any(x.name.startswith("mlgo-replay-") for x in tmp.iterdir()) and (t / "tune.json").exists()) \
            and p.poll() is None and time.monotonic() < end:
        time.sleep(0.005)
    assert p.poll() is None, "tune ended before a replay compile was seen"
    if whom == "group":
        os.killpg(p.pid, signal.SIGTERM)
    else:
        p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode in (0, 130), err
    while time.monotonic() < end:  # every process of the group gone (the workers, their compilers)
        try:
            os.killpg(p.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("processes of tune's group still run")
    assert sorted(x.name for x in tmp.iterdir()) == []
    assert read_manifest(t)["modules"], "the modules finished before the signal are kept"


def test_a_deadline_is_shared_by_every_module_and_the_summary_says_where_the_time_went(tmp_path):
    """``--budget-minutes``: every module with decisions is searched past
    its start before any is searched to exhaustion (no corpus order), and
    the summary splits the run's time and compiles into probe, starts and
    passes."""
    corpus = build_project_corpus(tmp_path)
    t = tmp_path / "T"
    r = mlgo_host("tune", "--corpus", str(corpus), "--output", str(t), "--budget-minutes", "0.5", "--jobs", "2",
                  "--no-progress")
    assert r.returncode == 0, r.stderr
    mods = read_manifest(t)["modules"]
    with_decisions = [n for n, m in mods.items() if m["decisions"] > 0]
    searched = [n for n in with_decisions if mods[n]["tried"] > 0]
    exhausted = [n for n in searched if mods[n]["stopped"] == "exhausted"]
    assert len(with_decisions) == 3 and not (exhausted and len(searched) < len(with_decisions)), mods
    s = json.loads((t / "summary.json").read_text())
    assert s["searched_past_start"] == len(searched) > 0 and s["exhausted"] == len(exhausted)
    assert {"probe and starts", "passes"} <= set(s["time_spent"])  # (under a deadline: in one task per module)
    assert sum(v["compiles"] for v in s["time_spent"].values()) == s["run_compiles"]
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("time: ")]
    assert "probe " in line and f"{len(searched)} of 3 modules searched past their start" in line


def _copy_T(t, tmp_path):
    """A copy of T and a checkout of the project with its obj/ (each test damages its own)."""
    root = t.parent
    mine, proj = tmp_path / "T", tmp_path / "checkout"
    shutil.copytree(t, mine)
    shutil.copytree(root / "project", proj)
    shutil.rmtree(proj / "obj", ignore_errors=True)
    (proj / "obj").mkdir()
    return mine, proj


def _mlgo_clang_k(proj, t, fallback: str = "plain") -> subprocess.CompletedProcess:
    cmd = [os.path.join(BIN, "mlgo-clang"), "-Oz", "-Isrc", "-c", "src/k.c", "-o", "obj/k.o"]
    return subprocess.run(cmd, cwd=proj, env=dict(env_without_mlgo(), MLGO_REPLAY=str(t), MLGO_FALLBACK=fallback),
                          capture_output=True, text=True, timeout=120)


def _is_plain_k(proj) -> bool:
    subprocess.run(["clang-19", "-Oz", "-Isrc", "-c", "src/k.c", "-o", "obj/plain.o"], cwd=proj, check=True)
    return (proj / "obj" / "k.o").read_bytes() == (proj / "obj" / "plain.o").read_bytes()


def _unreadable(p):  # (root reads any mode: a directory in its place is what no one can read as a file)
    p.unlink()
    p.mkdir()


REPLAY_DAMAGE = {"missing": (lambda p: p.unlink(), "is missing"),
                 "unreadable": (_unreadable, "is unreadable (Is a directory)"),
                 "garbage": (lambda p: p.write_text("hello world\n"), "is no replay file (line 1: 'hello world')")}


@pytest.mark.parametrize("damage", sorted(REPLAY_DAMAGE))
def test_a_missing_or_damaged_replay_file_fails_no_build_and_tune_writes_it_again(tuned, tmp_path, damage):
    # clang fails a compile whose replay file it cannot read or parse: the wrapper must not hand it one
    root, corpus, t0, man = tuned
    assert man["modules"]["k"]["inline_replay"], man["modules"]["k"]
    t, proj = _copy_T(t0, tmp_path)
    replay = t / "replays" / "k.inline.txt"
    spoil, words = REPLAY_DAMAGE[damage]
    spoil(replay)
    why = f"tuned module k: its replay file {replay} {words} (mlgo-host tune --output {t} writes it again)"
    r = _mlgo_clang_k(proj, t)  # one warning, the compiler's own object
    assert r.returncode == 0 and r.stderr == f"mlgo-clang: warning: MLGO_REPLAY: {why}; compiling without the " \
                                             "tuned flags\n", r.stderr
    assert _is_plain_k(proj)
    (proj / "obj" / "k.o").unlink()
    r = _mlgo_clang_k(proj, t, "fail")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and why in r.stderr and not (proj / "obj" / "k.o").exists()
    # --print-flags: as for a file T never saw, no flag naming a file that is not there
    r = mlgo_host("tune", "--print-flags", str(t), "src/k.c", cwd=proj)
    assert r.returncode == 0 and r.stdout == "" and r.stderr.count("\n") == 1, r.stdout + r.stderr
    assert r.stderr.startswith(f"mlgo-host tune: note: src/k.c: {why}: nothing to add"), r.stderr
    # run and eval: the one-line error of a tune directory they cannot apply
    r = mlgo_host("run", "--replay", str(t), "--", "clang-19", "-Oz", "-Isrc", "-c", "src/k.c", "-o", "obj/k.o",
                  cwd=proj)
    assert r.returncode == 2 and r.stderr == f"mlgo-host run: error: {why}\n", r.stderr
    r = mlgo_host("eval", "--corpus", str(corpus), "--replay", str(t), "--jobs", "1", "--no-progress",
                  "--baseline-cache", str(tmp_path / "b"))
    assert r.returncode == 2 and r.stderr == f"mlgo-host eval: error: {why}\n", r.stderr
    # tune again on T: the result in data/ writes the file again (no broken entry kept)
    r = mlgo_host("tune", "--corpus", str(corpus), "--output", str(t), "--compiles-per-module", "12", "--jobs", "2",
                  "--no-progress")
    if damage == "unreadable":  # (a directory of the user's is not removed: said in one line)
        assert r.returncode == 2 and r.stderr == f"mlgo-host tune: error: {replay}: is a directory, where a file " \
                                                 "is to be written\n", r.stderr
        return
    assert r.returncode == 0, r.stderr
    assert replay.read_bytes() == (t0 / "replays" / "k.inline.txt").read_bytes()
    r = _mlgo_clang_k(proj, t, "fail")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert text_size(proj / "obj" / "k.o") == man["modules"]["k"]["best_size"]


@pytest.mark.parametrize("field,value,says", [
    ("modules.k", 5, "modules.k must be an object, got 5"),
    ("modules.k.identity.source", 5, "modules.k.identity.source must be a string, got 5"),
    ("modules.k.inline_replay", 5, "modules.k.inline_replay must be a string or null, got 5"),
    ("root", 5, "root must be a string or null, got 5"),
    ("modules.k.base_flags", "-mllvm", 'modules.k.base_flags must be a list of strings or null, got "-mllvm"'),
    ("modules.k.base_flags", [5], "modules.k.base_flags must be a list of strings or null, got [5]"),
    ("modules.k.identity.flags", "-Oz", 'modules.k.identity.flags must be a list of strings, got "-Oz"'),
])
def test_a_manifest_field_of_the_wrong_type_is_one_line_and_the_wrapper_compiles_plainly(tuned, tmp_path, field,
                                                                                         value, says):
    root, corpus, t0, _ = tuned
    t, proj = _copy_T(t0, tmp_path)
    doc = read_manifest(t)
    *path, last = field.split(".")
    d = doc
    for k in path:
        d = d[k]
    d[last] = value
    (t / "tune.json").write_text(json.dumps(doc))
    why = f"{t / 'tune.json'}: {says}"
    r = _mlgo_clang_k(proj, t)  # the wrapper never crashes: its warning, the compiler's own object
    assert r.returncode == 0, r.stderr
    assert r.stderr == f"mlgo-clang: warning: MLGO_REPLAY: {why}; compiling without the tuned flags\n", r.stderr
    assert _is_plain_k(proj)
    for cmd in (("tune", "--print-flags", str(t), "src/k.c"),
                ("run", "--replay", str(t), "--", "clang-19", "-Oz", "-Isrc", "-c", "src/k.c", "-o", "obj/k.o"),
                ("eval", "--corpus", str(corpus), "--replay", str(t), "--jobs", "1", "--no-progress",
                 "--baseline-cache", str(tmp_path / "b")),
                ("serve", "--channels", str(tmp_path / "ch"), "--replay", str(t)),
                ("tune", "--corpus", str(corpus), "--output", str(t), "--jobs", "1", "--no-progress")):
        r = mlgo_host(*cmd, cwd=proj, timeout=120)
        assert r.returncode == 2 and r.stderr == f"mlgo-host {cmd[0]}: error: {why}\n", (cmd, r.stderr)
