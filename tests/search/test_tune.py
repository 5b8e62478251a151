"""`mlgo-host tune` with the real clang-19: a gain on a small project, the
report it writes and the module identities a build is matched by, a bigger
budget or a killed run continued, a time budget, one-line errors, and its
flips as training data.  The compiler replays it writes, and builds that
apply them, are tests/search/test_tune_batched.py's."""

from __future__ import annotations

import csv
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time

import pytest

from _corpus_helpers import needs_clang
from _tune_helpers import build_project_corpus, mlgo_host, read_manifest
from mlgo_host.cli import main
from mlgo_host.search.tunedir import TunedDir
from mlgo_host.learning.imitate import examples_from_search
from mlgo_host.search.tunedir import load_tune_results



@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    if __import__("shutil").which("clang-19") is None:
        pytest.skip("clang-19 not installed")
    return build_project_corpus(tmp_path_factory.mktemp("tune"))


def _tune(corpus, t, *extra) -> int:
    return main(["tune", "--corpus", str(corpus), "--output", str(t), "--jobs", "2", "--no-progress", *extra])


@needs_clang
def test_tune_finds_a_gain_reports_it_and_identifies_its_modules(corpus, tmp_path, capsys):
    t = tmp_path / "T"
    assert _tune(corpus, t, "--compiles-per-module", "12") == 0
    line = capsys.readouterr().out
    assert "smaller" in line and str(t) in line
    man = read_manifest(t)
    k = man["modules"]["k"]
    assert k["best_size"] < k["default_size"]
    assert all(m["best_size"] <= m["default_size"] for m in man["modules"].values())
    assert sum(m["compiles"] for m in man["modules"].values()) <= 12 * 3
    s = json.loads((t / "summary.json").read_text())
    assert s["gain_bytes"] == sum(m["default_size"] - m["best_size"] for m in man["modules"].values()) > 0
    assert s["identified"] == 3
    rows = list(csv.DictReader(open(t / "report.csv")))
    assert sorted(r["module"] for r in rows) == ["g", "k", "t"]
    assert (t / "report.png").stat().st_size > 1000
    # the module of a compile is found by its identity
    proj = corpus.parent / "project"
    td = TunedDir(str(t))
    assert td.match(["cc", "-Oz", "-Isrc", "-c", "src/k.c", "-o", "obj/k.o"], str(proj), "src/k.c", "obj/k.o") == "k"
    assert td.match(["cc", "-O2", "-Isrc", "-c", "src/k.c", "-o", "obj/k.o"], str(proj), "src/k.c", "obj/k.o") is None


@needs_clang
def test_a_bigger_budget_continues_from_what_T_holds(corpus, tmp_path):
    t = tmp_path / "T"
    assert _tune(corpus, t, "--compiles-per-module", "3") == 0
    first = read_manifest(t)["modules"]
    data1 = {r["name"]: r for r in load_tune_results(str(t))}
    assert _tune(corpus, t, "--compiles-per-module", "3") == 0  # same budget: nothing left to spend
    assert {n: m["compiles"] for n, m in read_manifest(t)["modules"].items()} == {n: m["compiles"] for n, m in first.items()}
    assert _tune(corpus, t, "--compiles-per-module", "10") == 0
    second = read_manifest(t)["modules"]
    data2 = {r["name"]: r for r in load_tune_results(str(t))}
    assert sum(m["compiles"] for m in second.values()) > sum(m["compiles"] for m in first.values())
    for n in first:
        assert second[n]["best_size"] <= first[n]["best_size"]
        assert set(data1[n]["tried"]) <= set(data2[n]["tried"])  # continued, not started over
        assert len(data2[n]["flips"]) >= len(data1[n]["flips"])


@needs_clang
@pytest.mark.slow
def test_a_killed_tune_resumes(corpus, tmp_path):
    t = tmp_path / "T"
    cmd = [sys.executable, "-m", "mlgo_host", "tune", "--corpus", str(corpus), "--output", str(t), "--jobs", "1",
           "--compiles-per-module", "12", "--no-progress"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 120
    while not (t / "tune.json").exists() and p.poll() is None and time.monotonic() < end:
        time.sleep(0.02)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode in (0, 130), err
    killed = read_manifest(t)["modules"]
    assert killed, "the first result is kept"
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    done = read_manifest(t)["modules"]
    assert sorted(done) == ["g", "k", "t"]
    assert sum(m["compiles"] for m in done.values()) <= 12 * 3
    for n, m in killed.items():
        assert done[n]["compiles"] >= m["compiles"] and done[n]["best_size"] <= m["best_size"]
    assert done["k"]["best_size"] < done["k"]["default_size"]


@needs_clang
def test_a_time_budget_stops_the_search(corpus, tmp_path):
    t = tmp_path / "T"
    t0 = time.monotonic()
    assert _tune(corpus, t, "--budget-minutes", "0.05") == 0  # 3 s: no compile starts after them
    assert time.monotonic() - t0 < 60
    # a module whose probe the deadline cut keeps nothing (a later run probes it again): on a busy machine
    # no module may be stored at all
    man = read_manifest(t)["modules"] if (t / "tune.json").exists() else {}
    assert all(m["best_size"] <= m["default_size"] for m in man.values())


@needs_clang
def test_tuned_flips_are_imitation_examples(corpus, tmp_path):
    t = tmp_path / "T"
    assert _tune(corpus, t, "--compiles-per-module", "5") == 0
    res = load_tune_results(str(t))
    ex = examples_from_search(res)
    # every decision of each best trajectory, and every flip of a decision (a site a flip exposed has no features)
    assert len(ex.labels) == sum(len(r["actions"]) + sum(1 for f in r["flips"] if f["raw"]) for r in res) > 0


@needs_clang
def test_a_saved_policy_orders_the_flips_as_its_shipped_twin(corpus, tmp_path):
    from mlgo_host.shipped import shipped_policy_dir

    mine = tmp_path / "my_policy"
    __import__("shutil").copytree(shipped_policy_dir("pretrained-oz"), mine)
    runs = {}
    for prior in ("pretrained-oz", str(mine)):
        t = tmp_path / f"T{len(runs)}"
        assert _tune(corpus, t, "--compiles-per-module", "6", "--prior", prior) == 0
        runs[prior] = {r["name"]: [f["key"] for f in r["flips"]] for r in load_tune_results(str(t))}
    assert runs["pretrained-oz"] == runs[str(mine)] and any(runs[str(mine)].values())


@pytest.mark.parametrize("args,msg", [
    (["--prior", "nowhere"], "neither pretrained-oz, patterns nor a saved policy directory"),
    (["--compiles-per-module", "5", "--budget-minutes", "1"], "not allowed with"),
    (["--compiles-per-module", "1"], "at least 2"),
    (["--budget-minutes", "0"], "must be positive"),
    # (nan passes "<= 0" and inf overflows later: neither is a time)
    (["--budget-minutes", "nan"], "--budget-minutes must be positive and finite, got nan"),
    (["--budget-minutes", "inf"], "--budget-minutes must be positive and finite, got inf"),
    (["--timeout", "nan"], "--timeout must be positive and finite, got nan"),
    (["--timeout", "inf"], "--timeout must be positive and finite, got inf"),
])
def test_bad_budgets_are_one_line_errors(tmp_path, args, msg):
    r = mlgo_host("tune", "--corpus", str(tmp_path), "--output", str(tmp_path / "T"), *args, timeout=60)
    assert r.returncode == 2 and msg in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_missing_corpus_is_one_line(tmp_path):
    r = mlgo_host("tune", "--corpus", str(tmp_path / "nope"), "--output", str(tmp_path / "T"), timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("mlgo-host tune: error:") and r.stderr.count("\n") == 1, r.stderr


@needs_clang
def test_a_T_tuned_from_another_policy_is_refused(corpus, tmp_path):
    t = tmp_path / "T"
    assert _tune(corpus, t, "--compiles-per-module", "2", "--modules", "t") == 0
    r = mlgo_host("tune", "--corpus", str(corpus), "--output", str(t), "--policy", "never", timeout=60)
    assert r.returncode == 2 and "was tuned from default" in r.stderr, r.stderr


@needs_clang
@pytest.mark.slow
def test_search_gin_imitates_what_tune_found(tmp_path):
    """--gin_bindings "search_data='T'": the tuned flips and best trajectories
    become round 0 of the search loop's data (validation modules left out)."""
    import pickle

    from _corpus_helpers import build_generated_corpus

    corpus = build_generated_corpus(tmp_path / "c", {f"t{i}": 8 + 3 * i for i in range(10)})
    t = tmp_path / "T"
    assert _tune(corpus, t, "--compiles-per-module", "4") == 0
    gin = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "configs", "inlining", "search.gin")
    root = tmp_path / "root"
    r = subprocess.run([sys.executable, "-m", "mlgo_host", "train", "--root_dir", str(root), "--corpus", str(corpus),
                        "--gin_files", gin, "--gin_bindings", "search_loop.train_search.max_rounds=1",
                        "compiles_per_round=20", "heldout_fraction=0.25", "validation_fraction=0.25",
                        "num_workers=2", "search_loop.train_search.gate_thresholds=(0.5,)",
                        "imitate.train_imitation.epochs=2", f"search_data='{t}'"],
                       capture_output=True, text=True, timeout=900,
                       env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert r.returncode == 0, r.stderr[-3000:]
    with open(root / "search" / "data.pkl", "rb") as f:
        data = pickle.load(f)
    assert 0 in data["merged"] and 1 in data["merged"]
    # validation (t3, t8) and held-out (t7) modules of seed 0 never come from T
    tuned = {x["name"] for x in load_tune_results(str(t))}
    kept = set(data["best"]) | {x["name"] for x in data["flip_only"]}
    assert tuned - {"t3", "t7", "t8"} <= kept
    assert not {"t3", "t7", "t8"} & kept


@needs_clang
@pytest.mark.parametrize("thing", [[1, 2], {"no": "name"}])
def test_tune_data_of_another_object_is_one_line(corpus, tmp_path, thing):
    t = tmp_path / "T"
    assert _tune(corpus, t, "--compiles-per-module", "2", "--modules", "t") == 0
    p = t / "data" / "t.pkl"
    p.write_bytes(pickle.dumps(thing))  # a valid pickle, not a search result
    r = mlgo_host("tune", "--corpus", str(corpus), "--output", str(t), "--jobs", "1", "--no-progress", timeout=120)
    kind = type(thing).__name__
    assert r.returncode == 2 and r.stderr == (f"mlgo-host tune: error: {p}: unreadable tune data (a {kind}, not a "
                                              "module's search result); remove it to search that module again\n"), \
        r.stderr


@needs_clang
@pytest.mark.parametrize("sub", ["replays", "data"])
def test_a_T_whose_replays_or_data_is_a_file_is_one_line(corpus, tmp_path, sub):
    t = tmp_path / "T"
    assert _tune(corpus, t, "--compiles-per-module", "2", "--modules", "t") == 0
    shutil.rmtree(t / sub, ignore_errors=True)
    (t / sub).write_text("")
    # k has a winning flip: its replay file and result are written, or would be
    r = mlgo_host("tune", "--corpus", str(corpus), "--output", str(t), "--compiles-per-module", "6", "--modules", "k",
                  "--jobs", "1", "--no-progress", timeout=120)
    assert r.returncode == 2 and r.stderr == (f"mlgo-host tune: error: {t / sub} is not a directory: a tune directory "
                                              f"keeps its {sub} there (move it away to continue T)\n"), r.stderr


@needs_clang
def test_a_missing_llvm_size_is_one_line_before_any_search(corpus, tmp_path):
    t = tmp_path / "T"
    r = mlgo_host("tune", "--corpus", str(corpus), "--output", str(t), "--llvm-size", "/no/such", "--no-progress",
                  timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("mlgo-host tune: error: llvm-size not found (tried /no/such)"), r.stderr
    assert not t.exists()  # no module recorded as failed


@needs_clang
def test_a_run_whose_every_module_failed_exits_1_and_the_next_run_searches_them_again(corpus, tmp_path):
    t = tmp_path / "T"
    args = ("tune", "--corpus", str(corpus), "--output", str(t), "--compiles-per-module", "2", "--modules", "t", "k",
            "--jobs", "2", "--no-progress")
    r = mlgo_host(*args, "--timeout", "0.001", timeout=120)  # no compile starts that fast
    assert r.returncode == 1 and "2 failed" in r.stdout, r.stdout + r.stderr
    assert {m["status"] for m in read_manifest(t)["modules"].values()} == {"failed"}
    # a failure is not a result: with a timeout that allows a compile, both are searched
    r = mlgo_host(*args, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "t failed last time: searching it again" in r.stderr and "k failed last time" in r.stderr
    assert {m["status"] for m in read_manifest(t)["modules"].values()} == {"ok"}
