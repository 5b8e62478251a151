"""`mlgo-host train` with configs/inlining/search.gin, end to end with the
real clang-19: rounds of search and imitation on a generated corpus, the
gate chosen on validation, TensorBoard, and a run killed mid-round that
resumes and still leaves the best policy in saved_policy."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from _corpus_helpers import build_generated_corpus
from _run_helpers import finished_run, read_state, run_env

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEARCH_GIN = os.path.join(REPO, "configs", "inlining", "search.gin")
# with 0.25 / 0.25 (seed 0): train t0 t1 t2 t4 t5 t6 t9, validation t3 t8, held out t7
SIZES = {f"t{i}": 8 + 3 * i for i in range(10)}
BINDINGS = ["search_loop.train_search.max_rounds=2", "compiles_per_round=60", "heldout_fraction=0.25",
            "validation_fraction=0.25", "num_workers=2", "seed=0", "time_budget_minutes=30",
            "search_loop.train_search.gate_thresholds=(0.5, 0.9)", "imitate.train_imitation.epochs=5"]
TAGS = ["search/headroom_pct", "search/flips_tried", "search/flips_accepted", "perf/compiles_per_minute",
        "search/flips_per_compile", "search/compiles", "search/minutes",
        "policy/train_size_change_pct", "policy/validation_size_change_pct", "heldout/size_change_pct"]


def _cmd(root, corpus, extra=()) -> list[str]:
    return [sys.executable, "-m", "mlgo_host", "train", "--root_dir", str(root), "--corpus", str(corpus),
            "--gin_files", SEARCH_GIN, "--gin_bindings", *BINDINGS, *extra]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return build_generated_corpus(tmp_path_factory.mktemp("search-corpus"), SIZES)


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    base = tmp_path_factory.mktemp("search-train")
    root, p = finished_run(lambda r: _cmd(r, corpus), base, timeout=900)
    return root, p


def test_rounds_search_imitate_gate_and_keep_the_best_by_validation(trained):
    root, p = trained
    st = read_state(root)
    assert st["round"] == 2 and [h["round"] for h in st["history"]] == [1, 2]
    for h in st["history"]:
        assert h["modules"] == 7 and h["compiles"] <= 60 + 2 * 7
        assert h["flips_tried"] > 0 and h["headroom_pct"] <= 0.0  # the best is never worse than -Oz
        assert h["gate"] in (0.5, 0.9, 1.0) and "heldout_pct" in h
    # one summary line per round (no progress bar off a terminal)
    assert "round 1: search " in p.stderr and "round 2: search " in p.stderr and "\r" not in p.stderr
    # saved_policy is the round with the best validation total, gate included
    best = min(st["history"], key=lambda h: (h["validation_pct"], h["round"]))
    assert st["best_round"] == best["round"]
    md = json.load(open(os.path.join(root, "saved_policy", "metadata.json")))
    assert md["gate"]["chosen_on"] == "validation" and md["gate"]["round"] == best["round"]
    # the gate's rule and the bounds on added inlinings, as search.gin sets them
    assert md["gate"]["rule"] == {"max_module_growth_pct": 1.0, "min_gain_pct": 0.1}
    assert (md["extra_inlining_max_users"], md["extra_inlining_min_functions"]) == (3, 150)
    assert os.path.isfile(os.path.join(root, "saved_policy", "saved_model", "output_spec.json"))

    import tensorflow as tf

    tags = set()
    for ev in glob.glob(os.path.join(root, "train", "events.out.tfevents.*")):
        for e in tf.compat.v1.train.summary_iterator(ev):
            tags.update(v.tag for v in e.summary.value)
    assert not [t for t in TAGS if t not in tags], sorted(tags)


def test_the_saved_policy_never_makes_a_validation_module_grow_more_than_one_percent(trained, corpus):
    root, _ = trained
    st = read_state(root)
    row = next(h for h in st["history"] if h["round"] == st["best_round"])
    assert row["validation_worst_pct"] <= 1.0


def test_a_run_killed_mid_round_resumes_and_keeps_the_best_policy(trained, corpus, tmp_path):
    root = tmp_path / "root"
    env = run_env(tmp_path / "tmp")
    proc = subprocess.Popen(_cmd(root, corpus), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while not (os.path.exists(root / "state.json") and read_state(root)["round"] >= 1):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        after_first = read_state(root)
        time.sleep(1.0)  # into round 2's search
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, "the run finished before the signal landed"
    assert read_state(root) == after_first
    assert os.path.isfile(root / "saved_policy" / "metadata.json")  # the best so far, whole
    p = subprocess.run(_cmd(root, corpus), capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    final = read_state(root)
    assert final["round"] == 2 and final["history"][0] == after_first["history"][0]
    assert "round 1: search" not in p.stderr
    assert os.path.isfile(root / "saved_policy" / "metadata.json")


def test_training_never_compiles_a_held_out_module(corpus, tmp_path):
    # a logging shim in front of the real clang-19: every module a run compiles is on record
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir()
    log = tmp_path / "compiles.log"
    shim = shim_dir / "clang-19"
    shim.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\nexec "{shutil.which("clang-19")}" "$@"\n')
    shim.chmod(0o755)
    extra = ("clang_path='" + str(shim) + "'", "search_loop.train_search.evaluate_heldout=False",
             "search_loop.train_search.max_rounds=1")
    r = subprocess.run(_cmd(tmp_path / "run", corpus, extra), env=run_env(tmp_path / "tmp"), capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    compiled = log.read_text()
    assert "t3.bc" in compiled and "t0.bc" in compiled  # validation and training modules were compiled
    assert "t7.bc" not in compiled  # the held-out one never


def test_a_rounds_search_stops_when_the_run_leaves_no_time_for_the_rest_of_the_round():
    from mlgo_host.training.search_loop import search_deadline

    # (time.time() values) the run ends at 1000; the last round took 60 s after its search
    first = {"history": []}
    assert search_deadline(first, 1000.0, 100.0, None) == 1000.0
    assert search_deadline(first, 1000.0, 100.0, 1.0) == 160.0
    later = {"history": [{"round_s": 90.0, "search_s": 30.0}]}
    assert search_deadline(later, 1000.0, 100.0, None) == 940.0
    assert search_deadline(later, 1000.0, 100.0, 0.5) == 130.0
    assert search_deadline(later, 1000.0, 930.0, 0.5) == 940.0


def test_a_round_stops_at_its_time_budget_keeps_what_it_measured_and_the_next_goes_on_elsewhere(corpus, tmp_path):
    # compiles of a second or more (a shim in front of the real clang-19) and no compile budget to speak of:
    # only the time ends each round's search
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir()
    shim = shim_dir / "clang-19"
    shim.write_text(f'#!/bin/sh\nsleep 1\nexec "{shutil.which("clang-19")}" "$@"\n')
    shim.chmod(0o755)
    root = tmp_path / "root"
    extra = ("clang_path='" + str(shim) + "'", "compiles_per_round=100000", "round_search_minutes=0.25",
             "search_loop.train_search.evaluate_heldout=False", "search_loop.train_search.gate_thresholds=(0.5,)")
    r = subprocess.run(_cmd(root, corpus, extra), env=run_env(tmp_path / "tmp"), capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    st = read_state(root)
    assert [h["round"] for h in st["history"]] == [1, 2]  # max_rounds=2 of a 30-minute budget
    for h in st["history"]:
        assert h["modules_skipped"] + h["modules_stopped_by_time"] >= 1, h  # the time ended the search
        assert 0 < h["compiles"] < h["compiles_planned"], h
        assert h["modules"] >= 1 and h["flips_tried"] >= 0
    assert "time up: search stopped in" in r.stderr
    import pickle

    def searched(k):
        with open(root / "search" / f"round-{k}.pkl", "rb") as f:
            return [x["name"] for x in pickle.load(f) if x["status"] == "ok"]

    one, two = searched(1), searched(2)
    left = [n for n in ("t0", "t1", "t2", "t4", "t5", "t6", "t9") if n not in one]
    if left:  # the next round begins with the modules the last one did not reach
        assert set(two) & set(left), (one, two)
    with open(root / "search" / "data.pkl", "rb") as f:
        kept = set(pickle.load(f)["best"])
    assert set(one) | set(two) <= kept  # what each round measured is imitated
    assert os.path.isfile(root / "saved_policy" / "metadata.json")
