"""Scratch directories (:func:`mlgo_host.fsutil.scratch_dir`): a signal
that unwinds the stack (the CLI's handler) never leaves one behind, wherever
it arrives, in a process with other threads too (a process-directed signal
then interrupts the main thread at once)."""

from __future__ import annotations

import os
import signal
import tempfile

import pytest

from mlgo_host.channel.fifo import SignalExit, install_signal_cleanup
from mlgo_host.errors import ConfigError
from mlgo_host.fsutil import (atomic_write_json, check_file_target, check_replaceable, dir_built_aside,
                              scratch_dir)

Unwound = SignalExit


@pytest.fixture()
def unwinding_sigterm(tmp_path, monkeypatch):
    """SIGTERM unwinds as in a CLI (each test gets the handler afresh: the
    first signal makes the next ones ignored); temp dirs go to a private directory."""
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    install_signal_cleanup()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    yield tmp_path
    for s, h in old.items():
        signal.signal(s, h)


def test_a_signal_while_the_directory_is_made_or_removed_leaves_nothing(unwinding_sigterm, monkeypatch):
    real_mkdtemp, real_rmtree = tempfile.mkdtemp, __import__("shutil").rmtree

    def mkdtemp_then_signal(*a, **k):
        d = real_mkdtemp(*a, **k)
        os.kill(os.getpid(), signal.SIGTERM)  # arrives after the directory exists, before the block
        return d

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp_then_signal)
    with pytest.raises(Unwound):
        with scratch_dir("x-"):
            pytest.fail("the block ran after the signal")
    assert os.listdir(unwinding_sigterm) == []
    monkeypatch.setattr(tempfile, "mkdtemp", real_mkdtemp)
    install_signal_cleanup()  # (the first signal left SIGTERM ignored)

    def rmtree_with_signal(path, **k):
        os.kill(os.getpid(), signal.SIGTERM)  # arrives in the middle of the removal
        real_rmtree(path, **k)

    monkeypatch.setattr("shutil.rmtree", rmtree_with_signal)
    with pytest.raises(Unwound):
        with scratch_dir("y-") as d:
            open(os.path.join(d, "f"), "w").close()
    assert os.listdir(unwinding_sigterm) == []


def test_the_directory_is_private_and_gone_after_an_error(unwinding_sigterm):
    with pytest.raises(ValueError):
        with scratch_dir("z-") as d:
            assert os.stat(d).st_mode & 0o777 == 0o700
            raise ValueError()
    assert not os.path.exists(d)


def test_a_directory_built_aside_replaces_the_old_one_whole_or_not_at_all(tmp_path):
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "old").write_text("old")
    with pytest.raises(RuntimeError):
        with dir_built_aside(str(dest)) as tmp:
            (tmp_path / "half").write_text(tmp)
            with open(os.path.join(tmp, "new"), "w") as f:
                f.write("half")
            raise RuntimeError("killed while writing")
    assert sorted(os.listdir(dest)) == ["old"]  # the old one intact
    assert sorted(os.listdir(tmp_path)) == ["half", "out"]  # and nothing left beside it
    with dir_built_aside(str(dest)) as tmp:
        with open(os.path.join(tmp, "new"), "w") as f:
            f.write("whole")
    assert sorted(os.listdir(dest)) == ["new"] and sorted(os.listdir(tmp_path)) == ["half", "out"]


def test_an_output_directory_replaces_only_what_it_made(tmp_path):
    """An output path naming another directory (a corpus, the input) or a file is refused, and kept."""
    check_replaceable(str(tmp_path / "new"), "trace.json", "trace directory")  # absent
    (tmp_path / "empty").mkdir()
    check_replaceable(str(tmp_path / "empty"), "trace.json", "trace directory")
    made = tmp_path / "made"
    made.mkdir()
    (made / "trace.json").write_text("{}")
    with dir_built_aside(str(made), replaces=("trace.json", "trace directory")) as tmp:
        open(os.path.join(tmp, "trace.json"), "w").close()
    assert os.listdir(made) == ["trace.json"]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "corpus_description.json").write_text("{}")
    with pytest.raises(ConfigError, match="not a trace directory \\(no trace.json\\)"):
        with dir_built_aside(str(corpus), replaces=("trace.json", "trace directory")):
            pass
    with pytest.raises(ConfigError, match="not a vocab directory"):
        check_replaceable(str(corpus), "*.buckets", "vocab directory")
    (tmp_path / "file").write_text("mine")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        check_replaceable(str(tmp_path / "file"), "trace.json", "trace directory")
    assert os.listdir(corpus) == ["corpus_description.json"] and (tmp_path / "file").read_text() == "mine"


def test_a_file_output_that_is_a_directory_is_refused_before_the_work(tmp_path):
    with pytest.raises(ConfigError, match="is a directory, where a report is to be written"):
        check_file_target(str(tmp_path), "report")
    with pytest.raises(ConfigError, match="is a directory"):
        atomic_write_json(str(tmp_path), {})
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match="cannot make its directory"):
        check_file_target(str(tmp_path / "f" / "x.json"))
    check_file_target(str(tmp_path / "sub" / "x.json"))  # a missing directory is made
