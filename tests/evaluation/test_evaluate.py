"""`mlgo-host eval` end to end with the real clang-19 on corpora the tests
build (both compile-database forms), including broken modules."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _corpus_helpers import build_small_corpus
from mlgo_host.cli import main
from mlgo_host.corpus.corpus import DESCRIPTION, _hash01, load_corpus
from mlgo_host.evaluation.evaluate import CSV_FIELDS, evaluate, select_modules
from mlgo_host.measure.compile import compile_plain


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> Path:
    return build_small_corpus(tmp_path_factory.mktemp("small"))


def _eval(tmp_path: Path, corpus: Path, policy: str, *extra: str) -> tuple[int, list[dict], Path]:
    out = tmp_path / f"{policy}.csv"
    rc = main(["eval", "--corpus", str(corpus), "--policy", policy, "--jobs", "2", "--no-progress",
               "--baseline-cache", str(tmp_path / "baselines"), "--output", str(out), *extra])
    rows = list(csv.DictReader(out.open())) if out.exists() else []
    return rc, rows, out


def test_default_policy_gives_reward_zero_and_identical_sizes(corpus_dir, tmp_path, capsys):
    rc, rows, out = _eval(tmp_path, corpus_dir, "default", "--plot", str(tmp_path / "d.png"))
    assert rc == 0
    assert tuple(out.read_text().splitlines()[0].split(",")) == CSV_FIELDS
    assert sorted(r["module"] for r in rows) == ["mathx", "shapes", "strs", "tiny"]
    c = load_corpus(corpus_dir)
    for r in rows:
        assert r["status"] == "ok" and r["reason"] == ""
        assert r["policy_text"] == r["baseline_text"] and float(r["reward"]) == 0.0
        assert int(r["baseline_text"]) == compile_plain(c[r["module"]]).text_size
    assert sum(int(r["observations"]) for r in rows) > 0
    printed = capsys.readouterr().out
    assert "4 ok, 0 failed" in printed and "+0.000%" in printed and "equal: 4" in printed
    assert (tmp_path / "d.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_never_inline_gives_a_nonzero_reward_where_inlining_matters(corpus_dir, tmp_path, capsys):
    rc, rows, _ = _eval(tmp_path, corpus_dir, "never", "--json")
    assert rc == 0
    by = {r["module"]: r for r in rows}
    assert float(by["mathx"]["reward"]) < 0 and int(by["mathx"]["policy_text"]) > int(by["mathx"]["baseline_text"])
    assert by["tiny"]["reward"] == "0.000000" and by["tiny"]["observations"] == "0"  # nothing to inline
    summary = json.loads(capsys.readouterr().out)
    assert summary["ok"] == 4 and summary["bigger"] >= 1 and summary["change_percent"] > 0
    assert summary["policy_total"] == sum(int(r["policy_text"]) for r in rows)


def test_broken_modules_are_failed_rows_and_the_rest_is_evaluated(corpus_dir, tmp_path, capsys):
    d = tmp_path / "broken"
    shutil.copytree(corpus_dir, d)
    (d / "strs.bc").unlink()  # missing bitcode
    (d / "shapes.cmd").write_bytes(b"-Oz\0-c\0")  # not a cc1 command
    (d / "crash.bc").write_bytes(b"BC\xc0\xde" + b"\xff" * 64)  # the compiler rejects it
    shutil.copy(d / "tiny.cmd", d / "crash.cmd")
    desc = json.loads((d / DESCRIPTION).read_text())
    desc["modules"].append("crash")
    (d / DESCRIPTION).write_text(json.dumps(desc))
    rc, rows, _ = _eval(tmp_path, d, "default")
    assert rc == 0
    by = {r["module"]: r for r in rows}
    assert set(by) == {"mathx", "strs", "tiny", "shapes", "crash"}
    assert by["mathx"]["status"] == by["tiny"]["status"] == "ok"
    assert by["strs"]["status"] == "failed" and "missing bitcode strs.bc" in by["strs"]["reason"]
    assert by["shapes"]["status"] == "failed" and "cc1" in by["shapes"]["reason"]
    assert by["crash"]["status"] == "failed" and "baseline" in by["crash"]["reason"]
    assert all(by[m]["reward"] == "" and by[m]["policy_text"] == "" for m in ("strs", "shapes", "crash"))
    out = capsys.readouterr().out
    assert "2 ok, 3 failed" in out and "failed crash:" in out


def test_unreadable_corpus_is_a_one_line_error(corpus_dir, tmp_path, capsys):
    d = tmp_path / "bad"
    shutil.copytree(corpus_dir, d)
    (d / DESCRIPTION).write_text("{not json")
    assert main(["eval", "--corpus", str(d), "--policy", "default", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "corpus_description.json: not valid JSON" in err[0]
    assert main(["eval", "--corpus", str(corpus_dir), "--policy", "no-such-policy", "--no-progress"]) == 2
    assert "no-such-policy" in capsys.readouterr().err


def test_module_selection(corpus_dir, tmp_path):
    c = load_corpus(corpus_dir)
    held = select_modules(c, split="heldout", heldout_fraction=0.5)
    train = select_modules(c, split="train", heldout_fraction=0.5)
    assert {m.name for m in held} == {m.name for m in c.modules if _hash01(m.name, 0) < 0.5}
    assert {m.name for m in held} | {m.name for m in train} == {m.name for m in c.modules}
    two = select_modules(c, modules=2)
    assert len(two) == 2 and len({m.name for m in two}) == 2
    # the evenly spread pick includes the smallest half and the biggest half of the sizes
    sizes = sorted(m.size for m in c.modules)
    assert min(m.size for m in two) <= sizes[1] and max(m.size for m in two) >= sizes[2]
    rep = evaluate(corpus_dir, "default", modules=1, jobs=1, progress=False, cache_dir=tmp_path / "b")
    assert len(rep.rows) == 1 and rep.rows[0].ok


def test_eval_workers_do_not_import_tensorflow(corpus_dir, tmp_path):
    code = (
        "import sys\n"
        "from mlgo_host.corpus.corpus import load_corpus\n"
        "from mlgo_host.evaluation.evaluate import EvalWorker\n"
        f"m = load_corpus({str(corpus_dir)!r})['mathx']\n"
        f"w = EvalWorker(policy='never', seed=0, clang='clang-19', llvm_size=None, timeout=60.0, advisor='inline', "
        f"cache_dir={str(tmp_path / 'b')!r})\n"
        "row = w.evaluate(m.to_task())\n"
        "assert row.ok, row.reason\n"
        "print(sorted(k for k in sys.modules if k.split('.')[0] in ('tensorflow', 'tf_agents')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_totals_by_project_count_each_projects_modules_and_the_ones_over_one_percent():
    from mlgo_host.evaluation.evaluate import EvalRow, by_project

    rows = [EvalRow("zlib-1/a", 1000, 990, None, 3, "ok"), EvalRow("zlib-1/b", 100, 102, None, 1, "ok"),
            EvalRow("lz4-2/c", 500, 500, None, 2, "ok"), EvalRow("lz4-2/d", None, None, None, 0, "failed")]
    got = by_project(rows)
    assert list(got) == ["lz4-2", "zlib-1"]
    assert got["zlib-1"] == {"modules": 2, "oz_text": 1100, "policy_text": 1092, "change_pct": -0.727, "bigger_1pct": 1}
    assert got["lz4-2"]["modules"] == 1 and got["lz4-2"]["change_pct"] == 0.0
