"""`mlgo-host train` on bad input: a parameter out of range, a configuration naming no algorithm, a root that
is a file or whose files are damaged, an empty episode file.  Each is one line, exit status 2, before any
work, and the root keeps what it held."""

from __future__ import annotations

import os

import gin
import pytest

from mlgo_host.cli import main

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PPO_GIN = os.path.join(REPO, "configs", "inlining", "ppo.gin")
BC_GIN = os.path.join(REPO, "configs", "inlining", "bc.gin")
SEARCH_GIN = os.path.join(REPO, "configs", "inlining", "search.gin")


@pytest.fixture(autouse=True)
def fresh_gin():
    gin.clear_config()
    yield
    gin.clear_config()


def _train(capsys, root, corpus, gin_file=PPO_GIN, *bindings) -> str:
    """The one line a refused `train` says (exit status 2, no traceback)."""
    rc = main(["train", "--root_dir", str(root), "--corpus", str(corpus), "--gin_files", str(gin_file),
               *(["--gin_bindings", *bindings] if bindings else []), "--no_progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("mlgo-host train: error: "), err
    return err


def test_a_root_dir_that_is_a_file_is_refused(tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("mine")
    err = _train(capsys, f, tmp_path / "no-corpus")
    assert f"--root_dir {f} is a file" in err, err
    assert f.read_text() == "mine"


def test_an_empty_episode_file_is_named_like_a_garbage_one(tmp_path, capsys):
    collected = tmp_path / "collected"
    collected.mkdir()
    (collected / "ep.npz").write_bytes(b"")
    (tmp_path / "base.jsonl").write_text("")
    rc = main(["train", "--root_dir", str(tmp_path / "root"), "--collected", str(collected), "--baseline-stats",
               str(tmp_path / "base.jsonl"), "--gin_files", PPO_GIN, "--no_progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert f"{collected / 'ep.npz'}: not a collected episode" in err, err