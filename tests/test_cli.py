"""The `mlgo-host` dispatcher and the --help of every subcommand."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from mlgo_host.cli import COMMANDS, build_parser, main


def _subparsers(parser: argparse.ArgumentParser):
    """(name, parser) of every subcommand and sub-action, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                for sub_name, subsub in _subparsers(sub):
                    yield f"{name} {sub_name}", subsub


def test_top_level_help_lists_every_command_with_a_line(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for name, (_, line) in COMMANDS.items():
        assert line and "\n" not in line
        assert any(ln.split(None, 1) == [name, line] for ln in out.splitlines()), name
    assert main([]) == 2  # no command: the help, exit 2


def test_version_is_the_packages(capsys):
    import tomllib

    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyproject.toml"), "rb") as f:
        version = tomllib.load(f)["project"]["version"]
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"mlgo-host {version}\n"


def test_every_option_has_help_and_no_empty_defaults(capsys):
    subs = dict(_subparsers(build_parser()))
    assert set(COMMANDS) <= set(subs) and {"corpus build", "corpus benchmark"} <= set(subs)
    for name, sub in subs.items():
        for action in sub._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert action.help and len(action.help) > 10, (name, action.option_strings or action.dest)
        text = sub.format_help()
        for empty in ("(default: None)", "(default: False)", "(default: [])"):
            assert empty not in text, (name, empty)
    run_help = subs["run"].format_help()
    assert "(default: inline)" in run_help and "(default: 600.0)" in run_help


#: options spelt as ml-compiler-opt spells them (the rest of mlgo-host's use hyphens)
ML_COMPILER_OPT = {"--gin_files", "--gin_bindings", "--root_dir", "--data_path"}


def test_options_are_spelt_with_hyphens_and_the_underscore_spellings_still_parse():
    subs = dict(_subparsers(build_parser()))
    shown = {o for sub in subs.values() for a in sub._actions if a.help != argparse.SUPPRESS
             for o in a.option_strings}
    assert not {o for o in shown if "_" in o} - ML_COMPILER_OPT
    hidden = {(name, o, a.dest) for name, sub in subs.items() for a in sub._actions
              if a.help == argparse.SUPPRESS for o in a.option_strings}
    assert ("train", "--no_progress", "no_progress") in hidden and ("trace", "--worker_backend", "worker_backend") in hidden
    for name, old, dest in hidden:  # each is an earlier spelling of a listed option, to the same dest
        assert old.replace("_", "-") in {o for a in subs[name]._actions for o in a.option_strings if a.dest == dest}
    args = build_parser().parse_args(["trace", "--corpus", "c", "--output", "o", "--no_progress", "--worker_backend",
                                      "ray", "--ray_address", "auto", "--llvm_size", "s"])
    assert (args.no_progress, args.worker_backend, args.ray_address, args.llvm_size) == (True, "ray", "auto", "s")
    args = build_parser().parse_args(["trace", "--corpus", "c", "--output", "o"])
    assert (args.no_progress, args.worker_backend, args.ray_address, args.llvm_size) == (False, "local", None, None)


def _stats_file(path, modules: int) -> str:
    """A `serve --stats` file of one build with `modules` ok compiles: its
    table is far longer than a pipe holds, so a reader that stops early
    breaks the pipe."""
    with open(path, "w") as f:
        for i in range(modules):
            f.write(json.dumps({"build": "b", "status": "ok", "output": f"/src/dir/module_{i:05d}.o",
                                "text_size": 1000 + i, "observations": 10, "decisions": {"0": 7, "1": 3},
                                "duration_s": 0.5, "policy": "default"}) + "\n")
    return str(path)


def test_stats_into_head_ends_quietly_with_the_sigpipe_status(tmp_path):
    stats = _stats_file(tmp_path / "stats.jsonl", 20000)
    script = (f'"{sys.executable}" -m mlgo_host stats "{stats}" 2>"{tmp_path}/err" | head -1; '
              'echo "${PIPESTATUS[0]} ${PIPESTATUS[1]}"')
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0
    first, statuses = p.stdout.splitlines()
    assert first.startswith("build b")
    assert statuses == "141 0"  # what `seq 1 1000000 | head -1` shows under pipefail
    assert (tmp_path / "err").read_text() == ""


def test_stats_into_a_closed_pipe_ends_quietly(tmp_path):
    # the reader is gone before the first write: deterministic, however short the output
    stats = _stats_file(tmp_path / "stats.jsonl", 3)
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, "-m", "mlgo_host", "stats", stats], stdout=w, stderr=subprocess.PIPE,
                           text=True, timeout=120)
    finally:
        os.close(w)
    assert (p.returncode, p.stderr) == (141, "")


def _cli(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlgo_host", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


@pytest.mark.parametrize("args, says", [
    (["run", "--timeout", "nan", "--", "clang-19", "-c", "x.c"], "a time limit is a finite number of seconds"),
    (["run", "--timeout", "inf", "--", "clang-19", "-c", "x.c"], "a time limit is a finite number of seconds"),
    (["run", "--seed", "-1", "--policy", "random", "--", "clang-19", "-c", "x.c"], "a seed is 0 or more"),
    (["eval", "--corpus", "c", "--timeout", "1e400"], "a time limit"),
    (["serve", "--channels", "ch", "--grace", "-1"], "a wait is a finite number of seconds, 0 or more"),
    (["trace", "--corpus", "c", "--output", "t", "--modules", "-1"], "must be 1 or more"),
    (["stats", "f", "--top", "0"], "must be 1 or more"),
    (["run", "--no-such-flag"], "unrecognized arguments"),
])
def test_a_bad_option_value_is_one_line_and_exit_2(tmp_path, args, says):
    r = _cli(*args, cwd=str(tmp_path))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and says in r.stderr and "--help" in r.stderr, r.stderr
    assert os.listdir(tmp_path) == []


def test_trace_and_vocab_never_replace_a_directory_they_did_not_make(small_corpus, default_trace, tmp_path):
    before = sorted(p.name for p in small_corpus.iterdir())
    r = _cli("trace", "--corpus", str(small_corpus), "--output", str(small_corpus), "--no-progress")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not a trace directory" in r.stderr, r.stderr
    assert sorted(p.name for p in small_corpus.iterdir()) == before
    trace_dir = str(default_trace[0])
    r = _cli("vocab", "--trace", trace_dir, "--output", trace_dir)
    assert r.returncode == 2 and "not a vocab directory" in r.stderr, r.stderr
    assert os.path.exists(os.path.join(trace_dir, "trace.json"))
    # a vocab written before is replaced, as the help says
    out = str(tmp_path / "vocab")
    for _ in range(2):
        r = _cli("vocab", "--trace", trace_dir, "--output", out, "--num-buckets", "8")
        assert r.returncode == 0, r.stderr


def test_a_policy_of_another_advisor_is_refused_at_start(small_corpus, tmp_path):
    for args in (["eval", "--corpus", str(small_corpus), "--no-progress"],
                 ["serve", "--channels", str(tmp_path / "ch")]):
        r = _cli(*args, "--advisor", "regalloc-evict", "--policy", "pretrained-oz")
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert "answers the inline advisor, not regalloc-evict" in r.stderr
    assert not os.path.exists(tmp_path / "ch") or os.listdir(tmp_path / "ch") == []


def test_serve_refuses_more_slots_than_its_open_file_limit_and_a_collect_file(tmp_path):
    import resource

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    r = subprocess.run([sys.executable, "-m", "mlgo_host", "serve", "--channels", str(tmp_path / "ch"),
                        "--slots", "1000"], capture_output=True, text=True, timeout=60, preexec_fn=low_limit)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--slots 1000: more slots than" in r.stderr, r.stderr
    (tmp_path / "file").write_text("")
    r = _cli("serve", "--channels", str(tmp_path / "ch"), "--collect", str(tmp_path / "file"))
    assert r.returncode == 2 and "--collect: cannot make the directory" in r.stderr.splitlines()[-1], r.stderr
    assert (tmp_path / "file").read_text() == "" and os.listdir(tmp_path / "ch") == []
