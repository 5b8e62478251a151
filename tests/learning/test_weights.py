"""A TF actor's weights exported to the numpy actor give the same logits,
for the inliner and the eviction network, under every normalization."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from _policy_helpers import NORM_CONFIGS, NORM_IDS, random_weights, spec_vocab  # noqa: E402

from mlgo_host.errors import ConfigError  # noqa: E402
from mlgo_host.learning import export  # noqa: E402
from mlgo_host.learning.networks import build_actor_network, tf_logits  # noqa: E402
from mlgo_host.learning.weights import export_actor_weights, import_actor_weights, numpy_actor  # noqa: E402
from mlgo_host.policies.vocab import NormConfig  # noqa: E402


def _agreement(session, cfg, layers):
    spec, vocab = spec_vocab(session)
    net = build_actor_network(spec, vocab, cfg, fc_layer_params=layers)
    outs = 2 if spec.action.kind == "binary" else 1
    import_actor_weights(net, random_weights(len(spec.inputs) * cfg.width, layers, outs, seed=5))
    actor = numpy_actor(net, spec, vocab, cfg)
    feats = [session[1].features(), export.random_features(spec, vocab, 400, seed=1)]
    for x in feats:
        lt = tf_logits(net, spec, x)
        ln = actor.logits(x)
        fin = np.isfinite(ln)
        if cfg.with_z_score:
            # z-scores of near-constant features are huge (std ~ 0): compare relatively
            assert np.max(np.abs(lt[fin] - ln[fin]) / np.maximum(1.0, np.abs(ln[fin]))) < 1e-5
        else:
            assert 1.0 < np.ptp(ln[fin]) < 100  # logits of a realistic size, not all near zero
            assert np.max(np.abs(lt[fin] - ln[fin])) < 1e-5
        assert np.all(lt[~fin] <= np.finfo(np.float32).min)  # TF masks with the dtype's minimum
        np.testing.assert_array_equal(np.argmax(lt, -1), np.argmax(ln, -1))


@pytest.mark.parametrize("cfg", NORM_CONFIGS, ids=NORM_IDS)
def test_numpy_and_tf_actor_agree_inliner(inline_session, cfg):
    _agreement(inline_session, cfg, (40, 40, 20))


@pytest.mark.parametrize("cfg", NORM_CONFIGS, ids=NORM_IDS)
def test_numpy_and_tf_actor_agree_eviction(evict_session, cfg):
    _agreement(evict_session, cfg, (32, 16))


def test_weights_round_trip_and_refuse_another_shape(inline_session):
    spec, vocab = spec_vocab(inline_session)
    cfg = NormConfig()
    net = build_actor_network(spec, vocab, cfg, fc_layer_params=(24, 12))
    width = len(spec.inputs) * cfg.width
    weights = random_weights(width, (24, 12), 2, seed=3)
    import_actor_weights(net, weights)
    got = export_actor_weights(net)
    assert sorted(got) == sorted(weights)
    for k, v in weights.items():
        np.testing.assert_array_equal(got[k], np.asarray(v, np.float32))
    with pytest.raises(ConfigError, match="weights have 1 hidden layers, the actor has 2"):
        import_actor_weights(net, random_weights(width, (24,), 2))
    with pytest.raises(ConfigError, match="do not fit"):
        import_actor_weights(net, random_weights(width, (16, 12), 2))
