"""`mlgo-host train` on bad input: a parameter out of range, a configuration naming no algorithm, a root that
is a file or whose files are damaged, an empty episode file.  Each is one line, exit status 2, before any
work, and the root keeps what it held."""

from __future__ import annotations

import json
import os

import pytest

from mlgo_host.cli import main
from mlgo_host.errors import ConfigError

from test_gin_bindings import BC_GIN, PPO_GIN, REPO

SEARCH_GIN = os.path.join(REPO, "configs", "inlining", "search.gin")
pytestmark = pytest.mark.usefixtures("fresh_gin")


def _train(capsys, root, corpus, gin_file=PPO_GIN, *bindings) -> str:
    """The one line a refused `train` says (exit status 2, no traceback)."""
    rc = main(["train", "--root_dir", str(root), "--corpus", str(corpus), "--gin_files", str(gin_file),
               *(["--gin_bindings", *bindings] if bindings else []), "--no_progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("mlgo-host train: error: "), err
    return err


@pytest.mark.parametrize("gin_file, binding, named", [
    (PPO_GIN, "num_iterations=0", "train.num_iterations = 0: must be a whole number >= 1"),
    (PPO_GIN, "num_iterations=-1", "train.num_iterations = -1"),
    (PPO_GIN, "num_iterations='abc'", "train.num_iterations = 'abc'"),
    (PPO_GIN, "modules_per_iteration=0", "train.modules_per_iteration = 0"),
    (PPO_GIN, "seed=-1", "train.seed = -1: must be a whole number >= 0"),
    (BC_GIN, "seed=-1", "bc_loop.train_bc_from_corpus.seed = -1"),
    (SEARCH_GIN, "search_loop.train_search.max_rounds=0", "search_loop.train_search.max_rounds = 0"),
    (PPO_GIN, "train.moving_average_decay=1.0", "train.moving_average_decay = 1.0: must be a number in [0, 1)"),
    (PPO_GIN, "train.early_exit_fraction=0", "train.early_exit_fraction = 0: must be a number in (0, 1]"),
    (PPO_GIN, "train.collection_timeout_s=0", "train.collection_timeout_s = 0: must be a number > 0"),
    (PPO_GIN, "train.min_validation_gain_pct=-1", "train.min_validation_gain_pct = -1: must be a number >= 0"),
    (PPO_GIN, "train.max_module_growth_pct=-1", "train.max_module_growth_pct = -1: must be a number >= 0"),
    (SEARCH_GIN, "search_loop.train_search.min_validation_gain_pct=-0.1",
     "search_loop.train_search.min_validation_gain_pct = -0.1: must be a number >= 0"),
    (SEARCH_GIN, "search_loop.train_search.extra_inlining_max_users=0",
     "search_loop.train_search: bad extra_inlining_max_users 0"),
    (SEARCH_GIN, "search_loop.train_search.max_module_growth_pct='1'",
     "search_loop.train_search.max_module_growth_pct = '1': must be a number >= 0"),
])
def test_a_parameter_out_of_range_is_refused_before_any_work(tmp_path, capsys, gin_file, binding, named):
    # the corpus is missing: the parameters are checked before it is read
    err = _train(capsys, tmp_path / "root", tmp_path / "no-corpus", gin_file, binding)
    assert named in err, err
    assert not os.path.exists(tmp_path / "root")


def test_a_configuration_naming_no_algorithm_is_refused(tmp_path, capsys):
    empty = tmp_path / "empty.gin"
    empty.write_text("")
    err = _train(capsys, tmp_path / "root", tmp_path / "no-corpus", empty)
    assert "sets no run.algorithm" in err, err
    assert not os.path.exists(tmp_path / "root")


def test_a_root_dir_that_is_a_file_is_refused(tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("mine")
    err = _train(capsys, f, tmp_path / "no-corpus")
    assert f"--root_dir {f} is a file" in err, err
    assert f.read_text() == "mine"


def test_a_root_dir_inside_a_file_is_refused(small_corpus, tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("mine")
    err = _train(capsys, f / "root", small_corpus, BC_GIN)
    assert f"--root_dir {f / 'root'}: cannot make the directory: Not a directory" in err, err
    assert f.read_text() == "mine"


@pytest.mark.parametrize("state, problem", [
    ("[]", "a JSON list, not an object"), ('{"iteration": "one"}', "iteration is 'one', not a count"),
    ('{"iteration": 1, "history": 5, "moving_average": {"decay": 0.8, "averages": {}}}', "history is 5"),
    ('{"iteration": 1, "history": []}', "no moving_average"),
    ('{"iteration": 1, "history": [], "moving_average": {}}', "moving_average: KeyError('decay')")])
def test_a_damaged_state_json_names_it_and_stays(small_corpus, tmp_path, capsys, state, problem):
    root = tmp_path / "root"
    root.mkdir()
    (root / "state.json").write_text(state)
    err = _train(capsys, root, small_corpus, PPO_GIN, "num_workers=1")
    assert f"{root / 'state.json'}: unreadable state ({problem}" in err, err
    assert sorted(os.listdir(root)) == ["state.json"] and (root / "state.json").read_text() == state


def test_an_empty_header_json_names_it_and_stays(small_corpus, tmp_path, capsys):
    root = tmp_path / "root"
    (root / "vocab").mkdir(parents=True)  # a vocab already there: no tracing before the header is read
    (root / "header.json").write_text("")
    err = _train(capsys, root, small_corpus, PPO_GIN, "num_workers=1")
    assert f"{root / 'header.json'}: unreadable channel header" in err, err
    assert (root / "header.json").read_text() == "" and os.path.isdir(root / "vocab")


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


def test_a_new_root_records_its_algorithm_and_corpus_and_refuses_others(tmp_path):
    from mlgo_host.training.checks import RUN_RECORD, claim_root

    root, corpus = tmp_path / "root", tmp_path / "corpus"
    root.mkdir()
    corpus.mkdir()
    claim_root(str(root), "ppo", str(corpus))
    assert json.loads((root / RUN_RECORD).read_text()) == {"algorithm": "ppo", "corpus": str(corpus)}
    (root / "state.json").write_text("{}")  # output: now there is something to keep
    claim_root(str(root), "ppo", str(corpus) + "/")  # the same corpus, spelt otherwise
    with pytest.raises(ConfigError, match=r"started with run\.algorithm 'ppo', not 'bc' \("):
        claim_root(str(root), "bc", str(corpus))
    with pytest.raises(ConfigError, match=f"started with --corpus {corpus}, not {tmp_path / 'other'} "):
        claim_root(str(root), "ppo", str(tmp_path / "other"))


def test_a_resume_with_another_split_is_refused(tmp_path):
    from mlgo_host.training.checks import claim_root

    split = dict(heldout_fraction=0.2, split_by="project", seed=0)
    claim_root(str(tmp_path), "bc", str(tmp_path / "corpus"), split)
    (tmp_path / "saved_policy").mkdir()
    claim_root(str(tmp_path), "bc", str(tmp_path / "corpus"), dict(split))
    with pytest.raises(ConfigError, match=r"started with the split heldout_fraction=0\.2, seed=0, split_by='project', "
                                          r"not heldout_fraction=0\.2, seed=1, split_by='project' \("):
        claim_root(str(tmp_path), "bc", str(tmp_path / "corpus"), dict(split, seed=1))


def test_a_root_from_before_the_record_resumes_unchecked(tmp_path):
    from mlgo_host.training.checks import RUN_RECORD, claim_root

    (tmp_path / "state.json").write_text("{}")
    claim_root(str(tmp_path), "bc", str(tmp_path / "other"))
    assert not os.path.exists(tmp_path / RUN_RECORD)  # and it gets none: it could be a wrong guess


def test_a_root_that_stopped_before_any_output_takes_the_new_configuration(tmp_path):
    from mlgo_host.training.checks import RUN_RECORD, claim_root

    claim_root(str(tmp_path), "ppo", str(tmp_path / "typo"))
    claim_root(str(tmp_path), "ppo", str(tmp_path / "corpus"))
    assert json.loads((tmp_path / RUN_RECORD).read_text())["corpus"] == str(tmp_path / "corpus")
