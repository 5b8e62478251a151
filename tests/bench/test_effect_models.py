"""The effect model (bench/research/effect_models.py): a regression of the bytes inlining saves, exported as
a numpy policy whose gate is a byte threshold."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from mlgo_host.errors import ConfigError
from mlgo_host.policies import load_policy

import _research  # noqa: F401  (bench/research on sys.path)
import effect_models as fx
from _policy_helpers import observations


def _rows(inline_session) -> fx.EffectRows:
    """Each decision flipped once with a made-up effect that a feature
    decides: inlining a callee with one user saves 40 bytes, else costs 60."""
    header, ep, _ = inline_session
    feats = ep.features()
    users = np.asarray(feats["callee_users"]).reshape(ep.n)
    saved = np.where(users <= 1, 40.0, -60.0)
    frm = np.asarray(ep.actions, dtype=np.int64)
    delta = np.where(frm == 1, saved, -saved)
    nb = header.observation_nbytes
    flips = [{"raw": ep.raw[i * nb:(i + 1) * nb], "from": int(frm[i]), "delta": int(delta[i]), "applied": True}
             for i in range(ep.n)]
    src = {"name": "gen", "header": header.to_json()}
    return fx.effect_examples([(src, f) for f in flips])


def test_the_target_is_the_bytes_inlining_saves_whichever_action_was_flipped():
    assert fx.bytes_saved_by_inlining(np.array([-30, -30]), np.array([0, 1])).tolist() == [30.0, -30.0]
    for tau in (0.0, 3.0, 100.0):
        assert fx.tau_of_gate(fx.gate_of_tau(tau)) == pytest.approx(tau, abs=1e-6)
    assert fx.gate_of_tau(0.0) == 0.5


def test_a_gated_effect_model_flips_exactly_where_the_predicted_saving_beats_tau(inline_session, tmp_path):
    header, ep, adv = inline_session
    rows = _rows(inline_session)
    out = str(tmp_path / "effect")
    fit = fx.train_effect_model(rows, out, default_slot=adv.default_slot, fc_layer_params=(16,), epochs=60)
    assert fit["weighted_sign_accuracy"] > 0.8, fit
    obs = observations(header, ep)
    default = np.array([adv.default_advice(o) for o in obs])
    for tau in (0.0, 20.0):
        fx.set_tau(out, tau)
        pol = load_policy(out)  # what --policy DIR loads: numpy only
        assert pol.gate == pytest.approx(fx.gate_of_tau(tau))
        pol.bind(header, adv)
        got = np.array([pol.act(o) for o in obs])
        pred = fx.predicted_saving(pol.actor, ep.features())
        want = np.where(default == 1, np.where(pred < -tau, 0, 1), np.where(pred > tau, 1, 0))
        assert (got == want).all(), tau
    from mlgo_host.policies.saved import read_metadata

    md = read_metadata(out)
    assert md["extra"]["effect_model"]["loss"] == "huber" and md["gate"]["tau_bytes"] == 20.0


def test_round_flips_of_a_module_outside_the_training_split_are_refused(tmp_path):
    p = tmp_path / "round-1.pkl"
    p.write_bytes(pickle.dumps([{"status": "ok", "name": "val/module", "flips": []}]))
    with pytest.raises(ConfigError, match="not in the training split"):
        fx.flips_of_rounds([str(p)], {"train/module"})
    assert fx.flips_of_rounds([str(p)], {"val/module"}) == []
    assert os.path.exists(p)
