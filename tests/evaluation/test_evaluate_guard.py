"""`mlgo-host eval --guard`: never a module bigger than -Oz, with the real
clang-19 and policies that make modules bigger; what it kept, gained, cost."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from _corpus_helpers import build_generated_corpus
from _corpus_helpers import needs_clang
from mlgo_host.cli import main
from mlgo_host.evaluation.evaluate import CSV_FIELDS, GUARD_FIELDS, EvalReport, EvalRow, apply_guard


def test_apply_guard_keeps_the_smaller_valid_object():
    smaller = apply_guard(EvalRow("a", 100, 90, 0.1, 5, "ok"))
    assert (smaller.policy_text, smaller.kept, smaller.unguarded_text) == (90, "policy", 90)
    tie = apply_guard(EvalRow("t", 100, 100, 0.0, 5, "ok"))
    assert (tie.policy_text, tie.kept) == (100, "policy")
    bigger = apply_guard(EvalRow("b", 100, 130, -0.3, 5, "ok"))
    assert (bigger.policy_text, bigger.kept, bigger.unguarded_text, bigger.reward) == (100, "default", 130, 0.0)
    failed = apply_guard(EvalRow("f", 100, None, None, 5, "failed", "compiler exited with status 1"))
    assert failed.ok and failed.policy_text == 100 and failed.kept == "default" and failed.unguarded_text is None
    assert "policy's compile failed: compiler exited" in failed.reason
    no_base = EvalRow("n", None, None, None, 0, "failed", "baseline: boom")
    assert apply_guard(no_base) == no_base
    s = EvalReport("p", [smaller, tie, bigger, failed, no_base], guard=True).summary()
    assert s.bigger == 0 and s.failed == 1
    g = s.guard
    assert (g["kept_policy"], g["kept_default"], g["rescued"]) == (2, 2, 1)
    assert (g["unguarded_total"], g["guarded_total"], g["gain_bytes"]) == (320, 290, 30)


# An external function (it stays) with a loop, called from twenty places: -Oz
# keeps the calls; inlining them all copies the loop twenty times (719 -> 1,019
# bytes of .text with clang-19).  The generated modules shrink when everything
# is inlined (their callees are static), so this one is what "always" grows.
FANOUT = ("int g(int *p, int n) { int s = 0; for (int i = 0; i < n; i++) s += p[i] * (i ^ 3); return s; }\n"
          + "".join(f"int c{i}(int *p) {{ return g(p, {i + 3}); }}\n" for i in range(20)))


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> Path:
    return build_generated_corpus(tmp_path_factory.mktemp("guard"), {"a": 12, "b": 25, "c": 40},
                                  sources={"fanout": FANOUT})


def _eval(tmp_path: Path, corpus: Path, policy: str, *extra: str) -> tuple[int, list[dict]]:
    out = tmp_path / f"{policy}.csv"
    rc = main(["eval", "--corpus", str(corpus), "--policy", policy, "--jobs", "2", "--no-progress", "--json",
               "--baseline-cache", str(tmp_path / "baselines"), "--output", str(out), *extra])
    return rc, list(csv.DictReader(out.open()))


@needs_clang
@pytest.mark.parametrize("policy", ["always", "never"])
def test_eval_guard_is_never_bigger_than_oz(corpus_dir, tmp_path, capsys, policy):
    rc, plain = _eval(tmp_path, corpus_dir, policy)
    assert rc == 0
    capsys.readouterr()
    bigger = [r["module"] for r in plain if int(r["policy_text"]) > int(r["baseline_text"])]
    assert bigger, "the policy must make some module bigger for this test to mean anything"

    rc, rows = _eval(tmp_path, corpus_dir, policy, "--guard")
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert list(rows[0]) == list(CSV_FIELDS + GUARD_FIELDS)
    assert rows and all(r["status"] == "ok" for r in rows)
    assert all(int(r["policy_text"]) <= int(r["baseline_text"]) for r in rows)
    by = {r["module"]: r for r in rows}
    for r in plain:
        g = by[r["module"]]
        assert int(g["unguarded_text"]) == int(r["policy_text"])  # the same compiles, guarded afterwards
        assert g["kept"] == ("default" if r["module"] in bigger else "policy")
    assert summary["bigger"] == 0 and summary["change_percent"] <= 0
    g = summary["guard"]
    assert g["kept_default"] == len(bigger) and g["gain_bytes"] > 0
    assert g["gain_bytes"] == sum(int(r["policy_text"]) for r in plain) - summary["policy_total"]
    # the baselines were cached by the first run: the guard cost no default compile here
    assert g["default_compiles"] == 0 and g["policy_compiles"] == len(rows) and g["policy_cpu_s"] > 0


@needs_clang
def test_eval_guard_reports_its_compile_cost(corpus_dir, tmp_path, capsys):
    rc, rows = _eval(tmp_path, corpus_dir, "always", "--guard")  # a fresh baseline cache
    assert rc == 0
    g = json.loads(capsys.readouterr().out)["guard"]
    assert g["default_compiles"] == len(rows) == 4 and g["default_cpu_s"] > 0
    main(["eval", "--corpus", str(corpus_dir), "--policy", "always", "--jobs", "1", "--no-progress", "--guard",
          "--baseline-cache", str(tmp_path / "baselines")])
    text = capsys.readouterr().out
    assert "(guarded)" in text and "guard: kept the policy's object on" in text and "0 default compiles" in text
