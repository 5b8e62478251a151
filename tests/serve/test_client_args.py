"""mlgo-clang's command classification and the stats file reader (no compiler)."""

from __future__ import annotations

import json
import os

import pytest

from mlgo_host.collected import read_records
from mlgo_host.errors import MlgoHostError
from mlgo_host.serve.client import classify
from mlgo_host.serve.stats import aggregate, compare, format_build


@pytest.mark.parametrize("argv", [
    ["-Oz", "-c", "a.c", "-o", "a.o"],
    ["-O2", "-c", "a.c"],
    ["-c", "-Os", "-I", "inc", "-D", "X=1", "-MD", "-MF", "a.d", "a.cpp", "-oout/a.o"],
    ["-c", "-O2", "-x", "c", "weird.txt", "-o", "w.o"],
    ["-O1", "-c", "a.bc", "-o", "a.o", "-mllvm", "-some-flag"],
])
def test_served_commands(argv):
    plan = classify(argv, cwd="/w")
    assert plan["compile"], plan
    assert plan["source"].startswith("/w/") and plan["output"].endswith(".o")


def test_default_output_and_joined_o():
    assert classify(["-O2", "-c", "dir/x.c"], cwd="/w")["output"] == "/w/x.o"
    assert classify(["-O2", "-c", "x.c", "-obuild/x.o"], cwd="/w")["output"] == "/w/build/x.o"


@pytest.mark.parametrize("argv,why", [
    (["a.o", "b.o", "-o", "prog"], "no -c"),
    (["-O2", "a.c", "-o", "prog"], "no -c"),
    (["-O2", "-E", "a.c"], "-E"),
    (["-O2", "-M", "-c", "a.c"], "-M"),
    (["-O2", "-S", "-c", "a.c"], "-S"),
    (["-O2", "-c", "-emit-llvm", "a.c"], "-emit-llvm"),
    (["-O2", "-c", "a.c", "b.c"], "2 inputs"),
    (["-c", "a.c"], "-O0"),
    (["-O2", "-O0", "-c", "a.c"], "-O0"),
    (["-O2", "-c", "a.s"], "not a C"),
    (["-O2", "-c", "-x", "assembler", "a.c"], "-x assembler"),
    (["--version"], "--version"),
    (["-O2", "-c", "-", "-o", "a.o"], "stdin"),
    (["-O2", "-c", "a.c", "-o", "-"], "stdout"),
    (["-O2", "-c", "-include", "pre.h", "-o", "x.o"], "0 inputs"),
])
def test_passed_through(argv, why):
    plan = classify(argv, cwd="/w")
    assert not plan["compile"] and why in plan["reason"]


def test_stats_reader_and_summary(tmp_path):
    p = tmp_path / "s.jsonl"
    recs = [
        {"status": "ok", "output": "/b/x/a.o", "text_size": 100, "observations": 4, "decisions": {"0": 1, "1": 3},
         "build": "one", "duration_s": 0.5, "policy": "default"},
        {"status": "ok", "output": "/b/y/c.o", "text_size": 50, "observations": 2, "decisions": {"0": 2},
         "build": "one", "duration_s": 0.25, "policy": "default"},
        {"status": "ok", "output": "/b/x/a.o", "text_size": 90, "observations": 4, "decisions": {"1": 4},
         "build": "one", "duration_s": 0.5, "policy": "default"},
        {"status": "compile_error", "output": "/b/x/b.o", "text_size": None, "observations": 0, "decisions": {},
         "build": "one", "duration_s": 0.1, "policy": "default", "error": None},
        {"status": "ok", "output": "/c/a.o", "text_size": 70, "server": "s2", "observations": 1, "decisions": {"1": 1}},
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    one, two = aggregate(read_records(str(p)))
    assert one["build"] == "one" and one["compiles"] == 4 and one["modules"] == 3
    assert one["text_size"] == 140 and one["status"]["ok"] == 2 and one["status"]["compile_error"] == 1
    assert one["decisions"] == {"0": 2, "1": 4} and one["root"] == "/b"
    assert {r["module"] for r in one["rows"]} == {"x/a.o", "x/b.o", "y/c.o"}
    assert two["build"] == "server s2" and two["text_size"] == 70
    cmp = compare(two, one)
    assert cmp["matched"] == 0  # "a.o" vs "x/a.o": different relative paths
    text = format_build(one)
    assert "x/a.o" in text and "compile_error" in text and "140 bytes" in text


def test_stats_reader_errors_say_where(tmp_path):
    p = tmp_path / "s.jsonl"
    p.write_text('{"status": "ok"}\n{"status": \n')
    with pytest.raises(MlgoHostError, match=r"s\.jsonl:2: not a JSON line"):
        read_records(str(p))
    p.write_text('[1, 2]\n')
    with pytest.raises(MlgoHostError, match=r":1: not a compile record"):
        read_records(str(p))
    with pytest.raises(MlgoHostError, match="cannot read stats file"):
        read_records(os.path.join(str(tmp_path), "missing.jsonl"))
    for line, says in [('{"status": "ok", "text_size": "big"}', "'text_size' must be an integer, not 'big'"),
                       ('{"status": "ok", "decisions": [1, 2]}', "'decisions' must map each advice to a count"),
                       ('{"status": "ok", "decisions": {"1": "x"}}', "'decisions' must map"),
                       ('{"status": 3}', "'status' must be a string")]:
        p.write_text('{"status": "ok"}\n' + line + "\n")
        with pytest.raises(MlgoHostError, match=":2: " + says.replace("(", r"\(")):
            read_records(str(p))
    p.write_bytes(b"\xff\xfe\x00garbage\n")
    with pytest.raises(MlgoHostError, match="not UTF-8 text"):
        read_records(str(p))


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "soon"])
def test_a_wait_from_the_environment_is_seconds_0_or_more(value, monkeypatch, capfd):
    from mlgo_host.serve.client import _env_float

    monkeypatch.setenv("MLGO_WAIT", value)
    assert _env_float("MLGO_WAIT", 600.0) == 600.0
    assert f"MLGO_WAIT={value!r} is not a number of seconds, 0 or more; using 600" in capfd.readouterr().err
    monkeypatch.setenv("MLGO_WAIT", "2.5")
    assert _env_float("MLGO_WAIT", 600.0) == 2.5
