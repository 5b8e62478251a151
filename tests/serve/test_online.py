"""The online loop with the real clang-19: a default build for the baseline
sizes, a build served by a stochastic policy with --collect, `mlgo-host
train --collected` (one PPO iteration), the new saved policy serving and
collecting the next build, the next iteration."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from _serve_util import ServerProc, mlgo_clang, needs_clang, read_stats, write_sources
from mlgo_host.errors import ConfigError
from mlgo_host.training.online import load_collected

pytestmark = needs_clang

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PPO_GIN = os.path.join(REPO, "configs", "inlining", "ppo.gin")


def _build(tmp, sources, policy: str, stats: str, collect: str | None = None, build: str = "b") -> list[dict]:
    """Compile every source through a server on ``policy``; its stats records."""
    ch = str(tmp / "ch")
    extra = ("--collect", collect) if collect else ()
    with ServerProc(ch, slots=2, policy=policy, stats=stats, extra=extra) as srv:
        for s in sources:
            r = mlgo_clang(["-Oz", "-c", s, "-o", s[:-2] + ".o"], ch, "fail", MLGO_BUILD=build)
            assert r.returncode == 0, r.stderr
        assert srv.terminate() == 0, srv.output()
    recs = read_stats(stats)
    assert [r["status"] for r in recs] == ["ok"] * len(sources)
    return recs


def _train(root, col, base, tmp) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(tmp), "TF_CPP_MIN_LOG_LEVEL": "2"}
    # eager PPO: one small batch trains in a second, a tf.function trace takes
    # ~15 s (tests/training/test_train.py covers the traced path)
    return subprocess.run([sys.executable, "-m", "mlgo_host", "train", "--root_dir", str(root), "--collected", col,
                           "--baseline_stats", base, "--gin_files", PPO_GIN, "--gin_bindings", "seed=0",
                           "learner.Learner.use_tf_function=False", "--no_progress"],
                          capture_output=True, text=True, timeout=300, env=env)


def _state(root) -> dict:
    with open(os.path.join(root, "state.json")) as f:
        return json.load(f)


def test_train_from_collected_builds_iteration_by_iteration(tmp_path):
    src = tmp_path / "src"
    sources = write_sources(str(src), 3, functions=20)
    base, col, root = str(tmp_path / "base.jsonl"), str(tmp_path / "col"), tmp_path / "root"
    (tmp_path / "tmp").mkdir()

    _build(tmp_path, sources, "default", base, build="default")
    _build(tmp_path, sources, "random", str(tmp_path / "b1.jsonl"), collect=col, build="b1")

    # an episode without a default size is an error that names it (before any TF work)
    partial = str(tmp_path / "partial.jsonl")
    with open(base) as f, open(partial, "w") as g:
        g.writelines(f.readlines()[1:])
    from mlgo_host.training.online import train_from_collected

    with pytest.raises(ConfigError, match=r"1 collected episode\(s\) have no default-policy size"):
        train_from_collected(str(tmp_path / "other"), col, partial)
    _, rewards, metas = load_collected(col, base)
    assert len(metas) == 3 and all(-1.0 < r < 1.0 for r in rewards)

    # iteration 1: from the random policy's episodes (vocab built from them)
    r = _train(root, col, base, tmp_path / "tmp")
    assert r.returncode == 0, r.stderr
    assert "iteration 1: reward mean" in r.stderr
    st = _state(root)
    assert st["iteration"] == 1 and sorted(st["consumed"]) == sorted(m["file"] for m in metas)
    (row,) = st["history"]
    assert row["episodes"] == 3 and row["decisions"] == sum(ep_n["observations"] for ep_n in metas)
    assert row["reward_mean"] == pytest.approx(float(np.mean(rewards)))
    assert {"p10", "p50", "p90"} <= set(row["reward_percentiles"]) and "total_loss" in row and "kl" in row
    assert st["config"]["vocab"] == str(root / "vocab") and st["config"]["vocab_source"] is None
    assert os.path.isdir(root / "vocab")
    for p in ("saved_policy/metadata.json", "saved_policy/saved_model", "policy/1/actor.npz", "checkpoints",
              "operative_config.gin"):
        assert os.path.exists(root / p), p
    assert any(n.startswith("events.out.tfevents") for n in os.listdir(root / "train"))
    with open(root / "saved_policy" / "metadata.json") as f:
        assert json.load(f)["training_step"] == 1

    # the saved policy compiles a module
    x = str(tmp_path / "x.o")
    run = subprocess.run([sys.executable, "-m", "mlgo_host", "run", "--policy", str(root / "saved_policy"), "--",
                          "clang-19", "-Oz", "-c", sources[0], "-o", x], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["observations"] > 0 and os.path.getsize(x) > 0

    # nothing new: a one-line error, exit 2, nothing written
    again = _train(root, col, base, tmp_path / "tmp")
    assert again.returncode == 2
    last = again.stderr.rstrip("\n").splitlines()[-1]
    assert last.startswith("mlgo-host train: error: no new episodes") and "3 already trained on" in last
    assert "In call to configurable" not in again.stderr and "Traceback" not in again.stderr
    assert _state(root)["iteration"] == 1

    # the new policy serves and collects the next build: iteration 2
    recs = _build(tmp_path, sources, str(root / "saved_policy"), str(tmp_path / "b2.jsonl"), collect=col, build="b2")
    assert {r["policy"] for r in recs} == {str(root / "saved_policy")}
    r2 = _train(root, col, base, tmp_path / "tmp")
    assert r2.returncode == 0, r2.stderr
    st2 = _state(root)
    assert st2["iteration"] == 2 and len(st2["consumed"]) == 6 and len(st2["history"]) == 2
    assert st2["history"][1]["policies"] == [str(root / "saved_policy")]
    assert st2["history"][1]["builds"] == ["b2"]
    with open(root / "saved_policy" / "metadata.json") as f:
        assert json.load(f)["training_step"] == 2
    assert os.path.isdir(root / "policy" / "2")


def test_train_cli_needs_exactly_one_source(tmp_path, capsys):
    from mlgo_host.cli import main

    root = str(tmp_path / "r")
    common = ["train", "--root_dir", root, "--gin_files", PPO_GIN]
    assert main(common) == 2
    assert "exactly one of --corpus DIR" in capsys.readouterr().err
    assert main(common + ["--corpus", "c", "--collected", "d", "--baseline_stats", "b"]) == 2
    assert "exactly one of --corpus DIR" in capsys.readouterr().err
    assert main(common + ["--collected", "d"]) == 2
    assert "--collected needs --baseline-stats" in capsys.readouterr().err
    assert main(common + ["--corpus", "c", "--baseline_stats", "b"]) == 2
    assert "--baseline-stats goes with --collected" in capsys.readouterr().err
    assert not os.path.exists(root)
