"""`mlgo-host serve` + `mlgo-clang` with the real clang-19: concurrent build,
killed clients, shutdown in flight, no server, stale slots, collection."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from _serve_util import (MLGO_CLANG, ServerProc, big_source, compiler_on_channel, find_fifos, mlgo_clang,
                         needs_clang, pid_alive, plain_object, read_stats, wait_for, write_sources)
from mlgo_host.measure.sizes import text_size
from mlgo_host.serve import slots as S

pytestmark = needs_clang


def _no_serve_leftovers(channels: str) -> None:
    assert os.listdir(channels) == []  # no FIFO, slot, server.json, heartbeat nor lock


def test_make_j4_two_slots_byte_identical(tmp_path):
    src = str(tmp_path / "src")
    sources = write_sources(src, 6)
    with open(os.path.join(src, "Makefile"), "w") as f:
        f.write("OBJS := $(patsubst %.c,%.o,$(sort $(wildcard m*.c)))\nall: $(OBJS)\n"
                "%.o: %.c\n\t$(CC) -Oz -c $< -o $@\n")
    ch, stats = str(tmp_path / "ch"), str(tmp_path / "stats.jsonl")
    with ServerProc(ch, slots=2, policy="default", stats=stats) as srv:
        env = dict(os.environ, MLGO_CHANNELS=ch, MLGO_FALLBACK="fail", MLGO_BUILD="b1")
        r = subprocess.run(["make", "-j4", f"CC={MLGO_CLANG}"], cwd=src, env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr
        assert "without the server" not in r.stderr
        # stats lines are written by the recorder right after each compile
        recs = wait_for(lambda: (lambda x: x if len(x) >= 6 else None)(read_stats(stats)), 30, "6 stats lines")
        assert srv.terminate() == 0, srv.output()
    assert len(recs) == 6
    by_out = {r["output"]: r for r in recs}
    for s in sources:
        obj = s[:-2] + ".o"
        with open(obj, "rb") as f:
            served = f.read()
        assert served == plain_object(s, str(tmp_path / "plain.o")), f"{obj} differs from plain clang-19 -Oz"
        rec = by_out[obj]
        assert rec["status"] == "ok" and rec["returncode"] == 0 and rec["build"] == "b1"
        assert rec["observations"] > 0 and sum(rec["decisions"].values()) == rec["observations"]
        assert rec["text_size"] == text_size(obj)
        assert rec["duration_s"] > 0
    # the default decisions are mixed in these modules (not all-inline)
    assert sum(r["decisions"].get("0", 0) for r in recs) > 0 and sum(r["decisions"].get("1", 0) for r in recs) > 0
    assert {r["slot"] for r in recs} == {0, 1}
    _no_serve_leftovers(ch)
    # the summary command
    out = subprocess.run([sys.executable, "-m", "mlgo_host", "stats", stats, "--json"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    (b,) = json.loads(out.stdout)
    assert b["build"] == "b1" and b["modules"] == 6 and b["status"]["ok"] == 6
    assert b["text_size"] == sum(text_size(s[:-2] + ".o") for s in sources)
    txt = subprocess.run([sys.executable, "-m", "mlgo_host", "stats", stats, "--baseline", stats],
                         capture_output=True, text=True, timeout=60)
    assert txt.returncode == 0 and "m5.o" in txt.stdout and "+0.00%" in txt.stdout


def test_one_slot_serves_concurrent_clients_one_at_a_time(tmp_path):
    d = str(tmp_path)
    sources = write_sources(d, 4, functions=12)
    ch, stats = str(tmp_path / "ch"), str(tmp_path / "stats.jsonl")
    with ServerProc(ch, slots=1, policy="default", stats=stats, extra=("--pin",)) as srv:
        assert srv.info["pin"] == {"0": min(os.sched_getaffinity(0))}
        env = dict(os.environ, MLGO_CHANNELS=ch, MLGO_FALLBACK="fail")
        procs = [subprocess.Popen([MLGO_CLANG, "-Oz", "-c", s, "-o", s[:-2] + ".o"], env=env,
                                  stderr=subprocess.PIPE, text=True) for s in sources]
        errs = [p.communicate(timeout=300)[1] for p in procs]
        assert [p.returncode for p in procs] == [0] * 4, errs
        # a real compile error is the compiler's: its status, its message, no fallback
        bad = os.path.join(d, "bad.c")
        with open(bad, "w") as f:
            f.write("int broken(void) { return missing_name; }\n")
        r = mlgo_clang(["-Oz", "-c", bad, "-o", os.path.join(d, "bad.o")], ch, "plain")
        assert r.returncode == 1 and "missing_name" in r.stderr and "without the server" not in r.stderr
        recs = wait_for(lambda: (lambda x: x if len(x) >= 5 else None)(read_stats(stats)), 30, "5 stats lines")
        assert srv.terminate() == 0
    assert recs[-1]["status"] == "compile_error" and recs[-1]["returncode"] == 1
    recs = recs[:4]
    # one generation per compile, in order, all served by slot 0
    assert sorted(r["gen"].rsplit(":", 1)[1] for r in recs) == ["1", "2", "3", "4"]
    assert {r["status"] for r in recs} == {"ok"} and {r["slot"] for r in recs} == {0}
    for s in sources:
        with open(s[:-2] + ".o", "rb") as f:
            assert f.read() == plain_object(s, os.path.join(d, "plain.o"))


def test_client_killed_mid_compile_server_keeps_serving(tmp_path):
    d = str(tmp_path)
    with open(os.path.join(d, "big.c"), "w") as f:
        f.write(big_source())
    small = write_sources(d, 2)
    ch, stats = str(tmp_path / "ch"), str(tmp_path / "stats.jsonl")
    with ServerProc(ch, slots=1, policy="default", stats=stats) as srv:
        env = dict(os.environ, MLGO_CHANNELS=ch, MLGO_FALLBACK="fail")
        client = subprocess.Popen([MLGO_CLANG, "-Oz", "-c", "big.c", "-o", "big.o"], cwd=d, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            comp = wait_for(lambda: compiler_on_channel(os.path.join(ch, "slot-0", "request.json")), 60,
                            "the compiler to open the slot's channel")
        finally:
            client.kill()
            client.wait(timeout=30)
        # the compiler dies with its client
        wait_for(lambda: not pid_alive(comp), 30, "the killed client's compiler to exit")
        # the same (only) slot serves the next compiles
        for s in small:
            r = mlgo_clang(["-Oz", "-c", s, "-o", s[:-2] + ".o"], ch, "fail")
            assert r.returncode == 0, r.stderr
            with open(s[:-2] + ".o", "rb") as f:
                assert f.read() == plain_object(s, os.path.join(d, "plain.o"))
        recs = wait_for(lambda: (lambda x: x if len(x) >= 3 else None)(read_stats(stats)), 30, "3 stats lines")
        assert srv.proc.poll() is None
        assert srv.terminate() == 0
    assert recs[0]["output"] == os.path.join(d, "big.o") and recs[0]["status"] == "client_died"
    assert [r["status"] for r in recs[1:]] == ["ok", "ok"]
    assert not [f for f in os.listdir(d) if f.startswith("big") and f.endswith(".tmp")]
    _no_serve_leftovers(ch)


def _stop_compiler_in_flight(ch: str) -> int:
    """Wait for a compiler on one of the two slots' channels and stop it
    (SIGSTOP): its compile stays in flight whatever the machine's speed, so it
    cannot finish before the server shuts down (SIGKILL still ends a stopped
    process; SIGCONT lets it go on).  Returns its pid."""
    comp = wait_for(lambda: compiler_on_channel(os.path.join(ch, "slot-0", "request.json"))
                    or compiler_on_channel(os.path.join(ch, "slot-1", "request.json")), 60,
                    "the compiler to open a slot's channel")
    os.kill(comp, signal.SIGSTOP)
    return comp


def test_sigterm_in_flight_ends_session_and_client_falls_back(tmp_path):
    d = str(tmp_path)
    src = os.path.join(d, "big.c")
    with open(src, "w") as f:
        f.write(big_source())
    ch, stats = str(tmp_path / "ch"), str(tmp_path / "stats.jsonl")
    with ServerProc(ch, slots=2, policy="default", stats=stats, extra=("--grace", "0")) as srv:
        env = dict(os.environ, MLGO_CHANNELS=ch, MLGO_FALLBACK="plain")
        client = subprocess.Popen([MLGO_CLANG, "-Oz", "-c", "big.c", "-o", "big.o"], cwd=d, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            comp = _stop_compiler_in_flight(ch)
            assert srv.terminate() == 0, srv.output()
            assert not pid_alive(comp)
            _, err = client.communicate(timeout=120)
        finally:
            client.kill()
    assert client.returncode == 0, err
    assert "compiling without the server" in err
    with open(os.path.join(d, "big.o"), "rb") as f:
        assert f.read() == plain_object(src, os.path.join(d, "plain.o"))
    (rec,) = read_stats(stats)
    assert rec["status"] == "aborted" and "shutting down" in rec["error"]
    _no_serve_leftovers(ch)


def test_sigterm_lets_in_flight_compile_finish_within_grace(tmp_path):
    d = str(tmp_path)
    src = os.path.join(d, "big.c")
    with open(src, "w") as f:
        f.write(big_source())
    (small,) = write_sources(d, 1)
    ch, stats = str(tmp_path / "ch"), str(tmp_path / "stats.jsonl")
    with ServerProc(ch, slots=2, policy="default", stats=stats, extra=("--grace", "120")) as srv:
        env = dict(os.environ, MLGO_CHANNELS=ch, MLGO_FALLBACK="fail")
        client = subprocess.Popen([MLGO_CLANG, "-Oz", "-c", "big.c", "-o", "big.o"], cwd=d, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            comp = _stop_compiler_in_flight(ch)
            try:
                srv.proc.send_signal(signal.SIGTERM)
                wait_for(lambda: (S.read_json(os.path.join(ch, "server.json")) or {}).get("stopping"), 30,
                         "the server to announce it is stopping")
                # a new compile is not taken by a stopping server
                r = mlgo_clang(["-Oz", "-c", small, "-o", small[:-2] + ".o"], ch, "fail", timeout=60)
                assert r.returncode == 2 and "stopping" in r.stderr
            finally:
                os.kill(comp, signal.SIGCONT)
            _, err = client.communicate(timeout=300)
            assert srv.proc.wait(timeout=60) == 0
        finally:
            client.kill()
    assert client.returncode == 0 and "without the server" not in err, err
    (rec,) = read_stats(stats)
    assert rec["status"] == "ok" and rec["observations"] == 400
    with open(os.path.join(d, "big.o"), "rb") as f:
        assert f.read() == plain_object(src, os.path.join(d, "plain.o"))
    _no_serve_leftovers(ch)


def test_no_server_plain_fallback_and_fail_mode(tmp_path):
    d = str(tmp_path)
    (src,) = write_sources(d, 1)
    missing = os.path.join(d, "nothing-here")
    r = mlgo_clang(["-Oz", "-c", src, "-o", os.path.join(d, "a.o")], missing, "plain")
    assert r.returncode == 0, r.stderr
    assert "no channel directory" in r.stderr and "compiling without the server" in r.stderr
    with open(os.path.join(d, "a.o"), "rb") as f:
        assert f.read() == plain_object(src, os.path.join(d, "plain.o"))
    # fail mode: a clear error, exit 2, nothing compiled
    r = mlgo_clang(["-Oz", "-c", src, "-o", os.path.join(d, "b.o")], missing, "fail", timeout=30)
    assert r.returncode == 2
    assert r.stderr.startswith("mlgo-clang: error: no channel directory") and "MLGO_FALLBACK" in r.stderr
    assert not os.path.exists(os.path.join(d, "b.o"))
    # a directory with a server.json but no live server: same
    os.makedirs(missing)
    with open(os.path.join(missing, "server.json"), "w") as f:
        json.dump({"id": "x", "pid": 999999, "slots": 1, "flags": []}, f)
    r = mlgo_clang(["-Oz", "-c", src, "-o", os.path.join(d, "b.o")], missing, "fail", timeout=30)
    assert r.returncode == 2 and "is gone" in r.stderr
    # commands that are not one compile to an object never need the server
    r = mlgo_clang(["-E", src, "-o", os.path.join(d, "a.i")], missing, "fail")
    assert r.returncode == 0 and os.path.getsize(os.path.join(d, "a.i")) > 0
    with open(os.path.join(d, "main.c"), "w") as f:
        f.write("int mod_entry_1(int, int *);\nint main(void) { int p[4] = {1, 2, 3, 4}; return mod_entry_1(3, p) & 1; }\n")
    r = mlgo_clang([os.path.join(d, "main.c"), os.path.join(d, "a.o"), "-o", os.path.join(d, "prog")], missing, "fail")
    assert r.returncode == 0, r.stderr
    assert subprocess.run([os.path.join(d, "prog")], timeout=30).returncode in (0, 1)
    # bad setting
    r = mlgo_clang(["-Oz", "-c", src], missing, "sometimes", cwd=d)
    assert r.returncode == 2 and "MLGO_FALLBACK" in r.stderr


def test_restart_cleans_stale_slots_of_killed_server(tmp_path):
    d = str(tmp_path)
    (src,) = write_sources(d, 1)
    ch = str(tmp_path / "ch")
    srv = ServerProc(ch, slots=2)
    old_id = srv.info["id"]
    srv.proc.send_signal(signal.SIGKILL)
    srv.kill()
    assert len(find_fifos(ch)) >= 6  # 2 x (ch.in, ch.out, ctl) left behind
    r = mlgo_clang(["-Oz", "-c", src, "-o", os.path.join(d, "a.o")], ch, "fail", timeout=30)
    assert r.returncode == 2 and "is gone" in r.stderr
    with ServerProc(ch, slots=1) as srv2:
        assert srv2.info["id"] != old_id
        assert not os.path.exists(os.path.join(ch, "slot-1"))  # the old layout is gone
        assert sorted(os.path.basename(p) for p in find_fifos(ch)) == ["ch.in", "ch.out", "ctl"]
        r = mlgo_clang(["-Oz", "-c", src, "-o", os.path.join(d, "a.o")], ch, "fail")
        assert r.returncode == 0, r.stderr
        # C++ through mlgo-clang++ (MLGO_CLANGXX, default clang++-19)
        cpp = os.path.join(d, "k.cpp")
        with open(cpp, "w") as f:
            f.write("template <class T> static T sq(T x) { return x * x; }\n"
                    "struct V { int a[4]; int sum() const { int s = 0; for (int x : a) s += sq(x); return s; } };\n"
                    "int use(const V &v) { return v.sum() + sq(3); }\n")
        r = subprocess.run([MLGO_CLANG + "++", "-Oz", "-c", cpp, "-o", os.path.join(d, "k.o")],
                           env=dict(os.environ, MLGO_CHANNELS=ch, MLGO_FALLBACK="fail"), capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        subprocess.run(["clang++-19", "-Oz", "-c", cpp, "-o", os.path.join(d, "k.plain.o")], check=True, timeout=120)
        with open(os.path.join(d, "k.o"), "rb") as f1, open(os.path.join(d, "k.plain.o"), "rb") as f2:
            assert f1.read() == f2.read()
        # a second server on the same directory is refused
        other = subprocess.run([sys.executable, "-m", "mlgo_host", "serve", "--channels", ch, "--slots", "1"],
                               capture_output=True, text=True, timeout=60)
        assert other.returncode == 2 and "already serves" in other.stderr
        assert srv2.terminate() == 0
    _no_serve_leftovers(ch)


def test_collect_keeps_episodes_with_rewards(tmp_path):
    from mlgo_host.collected import load_episode
    from mlgo_host.training.online import load_collected

    d = str(tmp_path)
    sources = write_sources(d, 2)
    ch, stats, col = str(tmp_path / "ch"), str(tmp_path / "stats.jsonl"), str(tmp_path / "col")
    with ServerProc(ch, slots=2, policy="random", stats=stats, extra=("--collect", col)) as srv:
        for s in sources:
            r = mlgo_clang(["-Oz", "-c", s, "-o", s[:-2] + ".o"], ch, "fail")
            assert r.returncode == 0, r.stderr
        assert srv.terminate() == 0
    recs = read_stats(stats)
    assert [r["status"] for r in recs] == ["ok", "ok"]
    for rec in recs:
        ep, meta = load_episode(os.path.join(col, rec["episode"]))
        assert ep.n == rec["observations"] > 0 and meta["output"] == rec["output"]
        assert np.allclose(ep.logps, math.log(0.5))
        assert {str(k): int(v) for k, v in zip(*np.unique(ep.actions, return_counts=True))} == rec["decisions"]
        assert ep.features().shape == (ep.n,)
    # baseline: the same modules compiled plain, elsewhere
    base_dir = str(tmp_path / "base")
    os.makedirs(base_dir)
    with open(str(tmp_path / "base.jsonl"), "w") as f:
        for s in sources:
            out = os.path.join(base_dir, os.path.basename(s)[:-2] + ".o")
            plain_object(s, out)
            f.write(json.dumps({"status": "ok", "output": out, "text_size": text_size(out)}) + "\n")
    episodes, rewards, metas = load_collected(col, str(tmp_path / "base.jsonl"))
    assert len(episodes) == 2
    for rwd, meta in zip(rewards, metas):
        b = text_size(os.path.join(base_dir, os.path.basename(meta["output"])))
        assert rwd == pytest.approx(1 - (meta["text_size"] + 0.01) / (b + 0.01))


def test_a_compiler_that_cannot_run_is_one_line_and_frees_the_slot(tmp_path):
    d = str(tmp_path)
    (src,) = write_sources(d, 1)
    ch = str(tmp_path / "ch")
    with ServerProc(ch, slots=1, policy="default") as srv:
        r = mlgo_clang(["-Oz", "-c", src, "-o", os.path.join(d, "a.o")], ch, "fail",
                       MLGO_CLANG=os.path.join(d, "no-such-clang"))
        assert r.returncode == 127, r.stderr
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
        assert "cannot run" in r.stderr and "no-such-clang" in r.stderr and "MLGO_CLANG" in r.stderr
        # the slot serves the next compile
        r = mlgo_clang(["-Oz", "-c", src, "-o", os.path.join(d, "b.o")], ch, "fail", timeout=60)
        assert r.returncode == 0, r.stderr
        assert srv.terminate() == 0


def test_c_and_cxx_compiles_go_to_their_own_servers(tmp_path):
    """MLGO_CHANNELS_C / MLGO_CHANNELS_CXX pick the server by the compile's language; a language without its
    own variable goes to MLGO_CHANNELS."""
    d = str(tmp_path)
    (c_src,) = write_sources(d, 1)
    cxx_src = os.path.join(d, "k.cpp")
    shutil.copyfile(c_src, cxx_src)
    ch_c, ch_cxx = str(tmp_path / "ch-c"), str(tmp_path / "ch-cxx")
    st_c, st_cxx = str(tmp_path / "c.jsonl"), str(tmp_path / "cxx.jsonl")
    with ServerProc(ch_c, slots=1, policy="spill-weight", stats=st_c, extra=("--advisor", "regalloc-priority")), \
            ServerProc(ch_cxx, slots=1, policy="default", stats=st_cxx):
        both = {"MLGO_CHANNELS_C": ch_c, "MLGO_CHANNELS_CXX": ch_cxx}
        for src, obj in ((c_src, "a.o"), (cxx_src, "b.o")):
            r = mlgo_clang(["-Oz", "-c", src, "-o", os.path.join(d, obj)], None, "fail", **both)
            assert r.returncode == 0, r.stderr
        # with only MLGO_CHANNELS_CXX set, a C compile goes to MLGO_CHANNELS
        r = mlgo_clang(["-Oz", "-c", c_src, "-o", os.path.join(d, "c.o")], ch_cxx, "fail", MLGO_CHANNELS_CXX=ch_c)
        assert r.returncode == 0, r.stderr
        c_recs = wait_for(lambda: read_stats(st_c) or None, 30, "the C server's stats line")
        cxx_recs = wait_for(lambda: (lambda x: x if len(x) >= 2 else None)(read_stats(st_cxx)), 30,
                            "the C++ server's stats lines")
    assert [os.path.basename(r["output"]) for r in c_recs] == ["a.o"]
    assert c_recs[0]["policy"] == "spill-weight" and c_recs[0]["observations"] > 0
    assert sorted(os.path.basename(r["output"]) for r in cxx_recs) == ["b.o", "c.o"]
