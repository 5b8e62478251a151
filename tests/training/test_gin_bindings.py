"""`mlgo-host train` refuses what it would otherwise ignore or crash on: a
binding nothing reads (a typo) names the closest known macro or parameter;
a mistyped worker backend is one line, exit status 2."""

from __future__ import annotations

import os

import gin
import pytest

from mlgo_host.cli import main

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PPO_GIN = os.path.join(REPO, "configs", "inlining", "ppo.gin")
BC_GIN = os.path.join(REPO, "configs", "inlining", "bc.gin")

pytestmark = pytest.mark.usefixtures("fresh_gin")


def _train(tmp_path, capsys, *bindings, gin_file=PPO_GIN, corpus=None) -> tuple[int, str]:
    rc = main(["train", "--root_dir", str(tmp_path / "root"), "--corpus", str(corpus or tmp_path / "no-corpus"),
               "--gin_files", gin_file, "--gin_bindings", *bindings, "--no_progress"])
    return rc, capsys.readouterr().err.strip()


@pytest.mark.parametrize("binding, hint", [
    ("num_iteratons=2", "did you mean num_iterations?"),  # a macro, misspelt
    ("learning_rate=0.01", "did you mean create_ppo_agent.learning_rate?"),  # a parameter without its configurable
    ("train.num_iteratons=2", "Did you mean train.num_iterations?"),  # a parameter, misspelt
])
def test_a_binding_nothing_reads_names_the_closest_known_one(tmp_path, capsys, binding, hint):
    rc, err = _train(tmp_path, capsys, "seed=1", binding)
    assert rc == 2
    assert len(err.splitlines()) == 1 and err.startswith("mlgo-host train: error: "), err
    assert binding.split("=")[0] in err and hint in err, err
    assert not os.path.exists(tmp_path / "root"), "nothing may run on a configuration with a typo"


def test_bindings_the_configuration_reads_pass(tmp_path, capsys):
    # the corpus is missing: the run gets past the bindings, to the corpus
    rc, err = _train(tmp_path, capsys, "num_iterations=2", "seed=1", "worker_backend='local'", gin_file=BC_GIN)
    assert rc == 2 and "no-corpus" in err, err
    assert "macro" not in err


def test_a_mistyped_worker_backend_is_one_line(small_corpus, tmp_path, capsys):
    rc, err = _train(tmp_path, capsys, "worker_backend='lcoal'", corpus=small_corpus)
    assert rc == 2
    assert err == "mlgo-host train: error: unknown worker backend 'lcoal' (choose 'local' or 'ray')", err


def test_the_configs_parse_from_any_directory_with_the_repository_on_the_path(tmp_path, monkeypatch):
    # With the checkout on sys.path (PYTHONPATH), configs/ is a namespace
    # package, and gin's package lookup of an include crashed on it.
    from mlgo_host.training.entry import parse_gin

    monkeypatch.syspath_prepend(REPO)
    monkeypatch.chdir(tmp_path)
    parse_gin([os.path.relpath(PPO_GIN)], ["seed=1"])
    assert gin.query_parameter("%seed") == 1
    assert os.getcwd() == str(tmp_path)


@pytest.mark.parametrize("gin_file", sorted(os.path.relpath(os.path.join(d, f), REPO)
                                            for d, _, fs in os.walk(os.path.join(REPO, "configs"))
                                            for f in fs if f.endswith(".gin")))
def test_every_configuration_parses_and_binds_the_workers(gin_file, monkeypatch):
    from mlgo_host.training.entry import parse_gin
    from mlgo_host.training.workers import Workers

    monkeypatch.chdir(REPO)
    parse_gin([gin_file], ["clang_path='clang-x'", "num_workers=3"])
    w = Workers()  # what every trainer's pool is made with
    assert (w.clang_path, w.num_workers, w.module_timeout) == ("clang-x", 3, 300.0)
