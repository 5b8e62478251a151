"""Behavioural cloning of the default heuristic from a real trace: the saved
numpy policy reproduces the reported accuracy, well above the majority."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from mlgo_host.evaluation.traces import Trace  # noqa: E402
from mlgo_host.learning.bc import train_bc  # noqa: E402
from mlgo_host.policies import saved  # noqa: E402


def test_behavioural_cloning_on_a_default_trace(default_trace, tmp_path):
    out, index = default_trace
    res = train_bc(str(out), str(tmp_path / "bc"), epochs=25, batch_size=32, learning_rate=3e-3,
                   fc_layer_params=(40, 40, 20), saved_model=False, progress=False)
    majority = max(res.default_positive_rate, 1 - res.default_positive_rate)
    assert res.decisions == index["totals"]["observations"]
    assert res.train_accuracy >= 0.93 and res.accuracy > majority + 0.05, res
    # the saved directory is a numpy policy that reproduces the reported accuracy
    pol = saved.read_saved_policy(str(tmp_path / "bc"))
    assert index["default_slot"] in pol.spec.discarded and "inlining_default" in pol.spec.discarded
    hits = n = 0
    for lg in Trace(str(out)).logs():
        hits += int(np.sum(pol.actor.greedy(lg.records) == lg.actions))
        n += lg.n
    assert hits / n == pytest.approx(res.accuracy)
    report = json.loads((tmp_path / "bc" / "bc_report.json").read_text())
    assert report["accuracy"] == pytest.approx(res.accuracy)
