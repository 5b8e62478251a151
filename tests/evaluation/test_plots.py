"""The training curve PNG from a run's state.json."""

from __future__ import annotations

import json

from mlgo_host.evaluation.plots import plot_training


def test_plot_training_writes_a_png_and_skips_runs_without_iterations(tmp_path):
    assert plot_training(tmp_path / "missing.json", tmp_path / "a.png") is None
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"history": []}))
    assert plot_training(state, tmp_path / "a.png") is None
    state.write_text(json.dumps({"history": [
        {"iteration": 1, "reward_mean": -0.01},
        {"iteration": 2, "reward_mean": 0.002, "heldout_size_change_pct": -0.4},
        {"iteration": 3, "reward_mean": None}]}))
    out = plot_training(state, tmp_path / "curve.png")
    assert out == str(tmp_path / "curve.png")
    data = (tmp_path / "curve.png").read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 2000
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left
