"""The guard of served builds (`serve --guard`, MLGO_GUARD): the plain
compile's command, keeping the smaller valid object, and with the real
clang-19 a served compile that is never bigger than plain `clang-19 -Oz`."""

from __future__ import annotations

import os

import pytest

from _serve_util import ServerProc, c_source, mlgo_clang, needs_clang, plain_object, read_stats, wait_for
from mlgo_host.cli import main
from mlgo_host.measure.sizes import text_size
from mlgo_host.serve import guard as G
from mlgo_host.serve.stats import aggregate


@pytest.mark.parametrize("argv,want", [
    (["cc", "-Oz", "-c", "a.c", "-o", "a.o"], ["cc", "-Oz", "-c", "a.c", "-o", "T"]),
    (["cc", "-Oz", "-c", "a.c", "-oa.o"], ["cc", "-Oz", "-c", "a.c", "-oT"]),
    (["cc", "-Oz", "-c", "a.c"], ["cc", "-Oz", "-c", "a.c", "-o", "T"]),
    (["cc", "-MD", "-MF", "a.d", "-MT", "a.o", "-Oz", "-c", "a.c", "-o", "a.o", "-MP"],
     ["cc", "-Oz", "-c", "a.c", "-o", "T"]),
    (["cc", "-MMD", "-MFa.d", "-Wp,-MD,a.d", "-ftime-trace", "-c", "a.c", "-o", "a.o"],
     ["cc", "-c", "a.c", "-o", "T"]),
    (["cc", "-Xclang", "-MD", "-mllvm", "-o", "-c", "a.c", "-o", "a.o"],  # values of -Xclang/-mllvm stay
     ["cc", "-Xclang", "-MD", "-mllvm", "-o", "-c", "a.c", "-o", "T"]),
])
def test_guard_command(argv, want):
    assert G.guard_command(argv, "T") == (want, "")


@pytest.mark.parametrize("flag", ["-gsplit-dwarf", "-save-temps=obj", "--coverage"])
def test_side_outputs_named_after_the_object_are_not_guarded(flag):
    cmd, why = G.guard_command(["cc", "-Oz", flag, "-c", "a.c", "-o", "a.o"], "T")
    assert cmd is None and flag in why


def test_wanted_env_overrides_the_server(monkeypatch):
    monkeypatch.delenv(G.GUARD_ENV, raising=False)
    assert G.wanted({"guard": True}) and not G.wanted({})
    monkeypatch.setenv(G.GUARD_ENV, "0")
    assert not G.wanted({"guard": True})
    monkeypatch.setenv(G.GUARD_ENV, "1")
    assert G.wanted({})


@needs_clang
def test_keep_smaller_valid_object(tmp_path):
    src = tmp_path / "s.c"
    src.write_text(c_source(1))
    small = plain_object(str(src), str(tmp_path / "small.o"))
    big = plain_object(str(src), str(tmp_path / "big.o"), flags=("-O2",))
    assert text_size(tmp_path / "big.o") > text_size(tmp_path / "small.o")
    out, tmp = tmp_path / "out.o", G.temp_output(str(tmp_path / "out.o"))
    out.write_bytes(big)
    open(tmp, "wb").write(small)
    got = G.keep_smaller(str(out), tmp, "clang-19")
    assert got["guard"] == "default" and got["guard_default_text"] < got["guard_policy_text"]
    assert out.read_bytes() == small and not os.path.exists(tmp)
    # the policy's object smaller: it stays, the temp file goes
    open(tmp, "wb").write(big)
    assert G.keep_smaller(str(out), tmp, "clang-19")["guard"] == "policy" and out.read_bytes() == small
    assert not os.path.exists(tmp)
    # an invalid policy object loses to a valid default one
    out.write_bytes(b"not an object")
    open(tmp, "wb").write(small)
    got = G.keep_smaller(str(out), tmp, "clang-19")
    assert got["guard"] == "default" and got["guard_policy_text"] is None and out.read_bytes() == small


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    d = tmp_path_factory.mktemp("guard_src")
    for k in (1, 2):
        (d / f"s{k}.c").write_text(c_source(k))
    return d


def _compile(src, out, ch, **env):
    r = mlgo_clang(["-Oz", "-MD", "-c", str(src), "-o", str(out)], ch, **env)
    assert r.returncode == 0, r.stderr
    return out.read_bytes()


@needs_clang
def test_served_always_under_the_guard_is_never_bigger_than_oz(sources, tmp_path, capsys):
    ch, stats = str(tmp_path / "ch"), str(tmp_path / "stats.jsonl")
    plain = {k: plain_object(str(sources / f"s{k}.c"), str(tmp_path / f"plain{k}.o")) for k in (1, 2)}
    oz = {k: text_size(tmp_path / f"plain{k}.o") for k in (1, 2)}
    with ServerProc(ch, slots=1, policy="always", stats=stats, extra=("--guard",)) as srv:
        assert srv.info["guard"] is True
        out = tmp_path / "o1.o"
        assert _compile(sources / "s1.c", out, ch) == plain[1]  # always is bigger: -Oz's object, exactly
        assert text_size(out) == oz[1]
        assert (tmp_path / "o1.d").read_text().startswith(f"{out}:")  # the policy compile's dependency file
        # the same compile with the guard turned off by the client: bigger than -Oz
        _compile(sources / "s1.c", tmp_path / "u1.o", ch, MLGO_GUARD="0")
        assert text_size(tmp_path / "u1.o") > oz[1]
        recs = wait_for(lambda: (lambda r: r if len(r) == 2 else None)(read_stats(stats)), 30, "2 stats lines")
    g, u = recs
    assert g["status"] == "ok" and g["guard"] == "default" and g["text_size"] == oz[1]
    assert g["guard_default_text"] == oz[1] < g["guard_policy_text"] == u["text_size"]
    assert "guard" not in u
    b = aggregate(recs)[0]["guard"]
    assert b["kept"] == {"policy": 0, "default": 1, "skipped": 0}
    assert b["saved_bytes"] == g["guard_policy_text"] - oz[1] > 0
    assert main(["stats", stats]) == 0
    assert f"guard: kept the policy's object 0x, the default's 1x (skipped 0); {b['saved_bytes']} bytes saved" \
        in capsys.readouterr().out
    assert not [f for f in os.listdir(tmp_path) if "mlgo-guard" in f or f.endswith(".tmp")]


@needs_clang
def test_mlgo_guard_env_keeps_a_smaller_policy_object(sources, tmp_path):
    ch, stats = str(tmp_path / "ch"), str(tmp_path / "stats.jsonl")
    plain_object(str(sources / "s2.c"), str(tmp_path / "plain.o"))
    oz = text_size(tmp_path / "plain.o")
    with ServerProc(ch, slots=1, policy="never", stats=stats):  # the server does not guard; the client does
        out = tmp_path / "o2.o"
        _compile(sources / "s2.c", out, ch, MLGO_GUARD="1")
        rec = wait_for(lambda: (read_stats(stats) or [None])[0], 30, "a stats line")
    # never inlining is smaller than -Oz on this module: the guard keeps the policy's object
    assert rec["guard"] == "policy" and rec["guard_policy_text"] == text_size(out) <= oz == rec["guard_default_text"]
    assert rec["text_size"] == rec["guard_policy_text"] and rec["guard_s"] > 0
