"""The `mlgo-host` dispatcher and the --help of every subcommand."""

from __future__ import annotations

import argparse

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
