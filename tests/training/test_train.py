"""`mlgo-host train` end to end with the real clang-19: PPO over a tiny
generated corpus through the interactive channel, TensorBoard tags, saved
policies that `mlgo-host run` loads, and resuming after a real SIGTERM."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

from _corpus_helpers import build_generated_corpus
from _run_helpers import finished_run, read_state, run_env

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PPO_GIN = os.path.join(REPO, "configs", "inlining", "ppo.gin")
BC_GIN = os.path.join(REPO, "configs", "inlining", "bc.gin")
# t7 falls in the held-out part of a 0.25 split (seed 0); t0..t5 are trained on.
SIZES = {"t0": 10, "t1": 25, "t2": 14, "t3": 30, "t4": 18, "t5": 22, "t7": 16}
# A minimum validation saving no policy reaches: saved_policy falls back to -Oz's decisions, deterministically.
BINDINGS = ["num_iterations=2", "modules_per_iteration=4", "eval_every=1", "heldout_fraction=0.25",
            "num_workers=2", "seed=0", "train.min_validation_gain_pct=1000.0"]
TAGS = ([f"reward_distribution/p{p}" for p in range(10, 100, 10)]
        + ["reward_distribution/mean", "heldout/size_change_pct", "validation/size_change_pct",
           "validation/worst_module_pct", "loss/policy_gradient_loss", "loss/entropy",
           "loss/kl", "loss/total_loss", "perf/modules_per_minute", "perf/decisions_per_second",
           "perf/collect_s", "perf/train_s", "failures/modules"])


def _cmd(root, corpus, gin_file=PPO_GIN) -> list[str]:
    return [sys.executable, "-m", "mlgo_host", "train", "--root_dir", str(root), "--corpus", str(corpus),
            "--gin_files", gin_file, "--gin_bindings", *BINDINGS, "--no_progress"]


def _files(root) -> dict[str, str]:
    """Every file under ``root`` and a hash of its bytes."""
    out = {}
    for r, _, files in os.walk(root):
        for n in files:
            with open(os.path.join(r, n), "rb") as f:
                out[os.path.relpath(os.path.join(r, n), root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def _refused(cmd, tmp) -> str:
    """The one line a refused run says (exit status 2, no traceback)."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=run_env(tmp))
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-3000:]
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("mlgo-host train: error: "), p.stderr[-3000:]
    return last


def _leftovers(tmp) -> list[str]:
    bad = []
    for r, dirs, files in os.walk(tmp):
        for n in dirs + files:
            p = os.path.join(r, n)
            if n.startswith(("mlgo-ch-", "mlgo-worker-")) or n.endswith(".tmp") or stat.S_ISFIFO(os.lstat(p).st_mode):
                bad.append(p)
    return bad


def _session_processes(sid: int) -> list[int]:
    """Processes still alive in session ``sid`` (the run's workers, compilers)."""
    out = []
    for stat_path in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat_path) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # fields[3] is the session id
            out.append(int(stat_path.split("/")[2]))
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return build_generated_corpus(tmp_path_factory.mktemp("train-corpus"), SIZES)


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    """An uninterrupted two-iteration run."""
    base = tmp_path_factory.mktemp("train")
    root, p = finished_run(lambda r: _cmd(r, corpus), base, timeout=600)
    return root, p, base


def test_two_iterations_write_state_policies_and_tensorboard(trained):
    root, p, base = trained
    st = read_state(root)
    assert st["iteration"] == 2
    assert [h["iteration"] for h in st["history"]] == [1, 2]
    for h in st["history"]:
        assert h["modules"] == 4 and h["ok"] == 4 and h["failures"] == 0
        assert h["decisions"] > 0 and "heldout_size_change_pct" in h
    assert st["last_eval"]["modules"] == 1 and st["last_eval"]["ok"] == 1
    # one summary line per iteration on the terminal
    assert "iteration 1/2: reward mean" in p.stderr and "iteration 2/2: reward mean" in p.stderr
    for d in ("policy/1", "policy/2", "saved_policy", "vocab"):
        assert os.path.isfile(os.path.join(root, d, "metadata.json")) or os.path.isdir(os.path.join(root, d)), d
    assert os.path.isfile(os.path.join(root, "saved_policy", "saved_model", "output_spec.json"))
    assert os.path.isfile(os.path.join(root, "checkpoints", "ckpt-2.index"))
    assert os.path.isfile(os.path.join(root, "operative_config.gin"))
    assert not _leftovers(base / "tmp")

    import tensorflow as tf

    tags = set()
    for ev in glob.glob(os.path.join(root, "train", "events.out.tfevents.*")):
        for e in tf.compat.v1.train.summary_iterator(ev):
            tags.update(v.tag for v in e.summary.value)
    missing = [t for t in TAGS if t not in tags]
    assert not missing, (missing, sorted(tags))


def test_saved_policy_serves_a_real_compile(trained, tmp_path):
    root, _, _ = trained
    src = tmp_path / "m.c"
    from _corpus_helpers import generated_c_source

    src.write_text(generated_c_source(20, 3))
    p = subprocess.run([sys.executable, "-m", "mlgo_host", "run", "--policy", str(root / "saved_policy"), "--",
                        "clang-19", "-Oz", "-c", str(src), "-o", str(tmp_path / "m.o")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["observations"] > 0 and sum(out["decisions"].values()) == out["observations"]
    assert out["text_size"] > 0


def test_when_no_iteration_meets_the_rule_saved_policy_keeps_clang_s_decisions(trained, tmp_path):
    """No warm start, and no iteration saves the (unreachable) minimum on validation: saved_policy is the last
    policy gated at 1.0, and it compiles a module exactly as -Oz does."""
    root, p, _ = trained
    st = read_state(root)
    assert st["best"] is None
    assert all(h["saved_policy_iteration"] is None and "validation_worst_pct" in h for h in st["history"])
    assert "no policy's validation met the rule" in p.stderr and "none meets the rule yet" in p.stderr
    md = json.loads((root / "saved_policy" / "metadata.json").read_text())
    assert md["gate"]["threshold"] == 1.0 and md["gate"]["met_by_no_iteration"] is True
    assert md["training_step"] == 2
    from _corpus_helpers import generated_c_source

    src = tmp_path / "m.c"
    src.write_text(generated_c_source(30, 5))
    sizes = {}
    for policy in (str(root / "saved_policy"), str(root / "policy" / "2"), "default"):
        r = subprocess.run([sys.executable, "-m", "mlgo_host", "run", "--policy", policy, "--", "clang-19", "-Oz",
                            "-c", str(src), "-o", str(tmp_path / "m.o")], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        sizes[policy] = json.loads(r.stdout)
    saved, last, oz = sizes.values()
    assert saved["decisions"] == oz["decisions"] and saved["text_size"] == oz["text_size"]
    assert last["decisions"] != oz["decisions"]  # the ungated policy would have answered otherwise


def test_an_advisor_without_a_default_decision_falls_back_to_the_smallest_validation_policy(tmp_path):
    """The eviction advisor has no "-Oz decision" to keep: when no policy meets the (unreachable) minimum,
    saved_policy is the evaluated policy with the smallest validation total."""
    from mlgo_host.corpus.synth import pressure_module

    corpus = build_generated_corpus(tmp_path / "evict", {}, sources={
        f"p{k}": pressure_module(2, 30 + 2 * k, seed=k) for k in range(8)})
    root = tmp_path / "root"
    p = subprocess.run([sys.executable, "-m", "mlgo_host", "train", "--root_dir", str(root), "--corpus", str(corpus),
                        "--gin_files", os.path.join(REPO, "configs", "regalloc", "ppo.gin"), "--gin_bindings",
                        "num_iterations=3", "modules_per_iteration=3", "eval_every=1", "num_workers=2", "seed=0",
                        "heldout_fraction=0.25", "train.min_validation_gain_pct=1000.0", "--no_progress"],
                       capture_output=True, text=True, timeout=600, env=run_env(tmp_path / "tmp"))
    assert p.returncode == 0, p.stderr[-3000:]
    st = read_state(root)
    assert st["best"] is None
    rows = [(h["validation_size_change_pct"], -h["iteration"]) for h in st["history"]]
    assert len(rows) == 3
    pick = -min(rows)[1]
    assert pick != 3  # (seeded) the smallest is not the last policy, so the two fallbacks differ here
    assert f"saved_policy is iteration {pick}, the smallest on validation" in p.stderr
    assert _files(root / "saved_policy") == _files(root / "policy" / str(pick))
    assert "gate" not in json.loads((root / "saved_policy" / "metadata.json").read_text())


def test_a_killed_run_resumes_where_it_stopped(trained, corpus, tmp_path):
    """SIGTERM during iteration 2; the same command again finishes iteration
    2 from the iteration-1 checkpoint and statistics, and ends where the
    uninterrupted run ended."""
    root = tmp_path / "root"
    env = run_env(tmp_path / "tmp")
    proc = subprocess.Popen(_cmd(root, corpus), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not (os.path.exists(root / "state.json") and read_state(root)["iteration"] >= 1):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        after_first = read_state(root)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert after_first["iteration"] == 1
    assert proc.returncode != 0, "the run finished before the signal landed"
    time.sleep(0.5)
    assert not _session_processes(proc.pid), "workers or compilers outlived the killed run"
    assert not _leftovers(tmp_path / "tmp")
    assert read_state(root) == after_first  # nothing half-written

    p = subprocess.run(_cmd(root, corpus), capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "resuming" in p.stderr and "iteration 1/2:" not in p.stderr
    final = read_state(root)
    assert final["iteration"] == 2
    assert final["history"][0] == after_first["history"][0]
    ref = read_state(trained[0])
    same = ("reward_mean", "decisions", "ok", "failures", "heldout_size_change_pct", "policy_gradient_loss")
    for h, r in zip(final["history"], ref["history"]):
        assert {k: h[k] for k in same} == {k: r[k] for k in same}
    # iteration 2 trained from the restored checkpoint: the same episodes and
    # module sizes as the uninterrupted run
    assert final["moving_average"] == ref["moving_average"]
    assert final["history"][1]["decisions"] == ref["history"][1]["decisions"]


def test_a_root_refuses_another_algorithm_or_corpus(trained, corpus, tmp_path):
    """Resuming the PPO root with bc.gin would replace its saved_policy with a BC one; with another corpus or
    split seed it would go on training on other modules.  Each is refused, and the root stays as it was."""
    root = tmp_path / "root"
    shutil.copytree(trained[0], root)
    record = json.loads((root / "run.json").read_text())
    assert {k: record[k] for k in ("algorithm", "corpus")} == {"algorithm": "ppo", "corpus": str(corpus)}
    assert record["split"]["seed"] == 0
    other = tmp_path / "other-corpus"
    shutil.copytree(corpus, other)
    before = _files(root)
    err = _refused(_cmd(root, corpus, BC_GIN), tmp_path / "tmp")
    assert f"--root_dir {root} holds a run started with run.algorithm 'ppo', not 'bc'" in err, err
    err = _refused(_cmd(root, other), tmp_path / "tmp")
    assert f"started with --corpus {corpus}, not {other}" in err, err
    err = _refused([a if a != "seed=0" else "seed=1" for a in _cmd(root, corpus)], tmp_path / "tmp")
    assert "started with the split " in err and "seed=0, " in err and "seed=1, " in err, err
    assert _files(root) == before


@pytest.mark.parametrize("damage", ["garbage index", "truncated data"])
def test_a_damaged_checkpoint_is_named_and_kept(trained, tmp_path, corpus, damage):
    root = tmp_path / "root"
    shutil.copytree(trained[0], root)
    if damage == "garbage index":
        (root / "checkpoints" / "ckpt-2.index").write_bytes(b"not a checkpoint index")
    else:
        (data,) = glob.glob(str(root / "checkpoints" / "ckpt-2.data-*"))
        with open(data, "r+b") as f:
            f.truncate(os.path.getsize(data) // 2)
    before = _files(root)
    err = _refused(_cmd(root, corpus), tmp_path / "tmp")
    assert f"checkpoint {root / 'checkpoints' / 'ckpt-2'} (iteration 2) cannot be restored: " in err, err
    assert _files(root) == before
