"""The TF networks: the eviction actor masks illegal columns, the value
network scores each observation, and an activation the numpy actor lacks is
refused before any training (workers could not run the policy)."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from _policy_helpers import spec_vocab  # noqa: E402

from mlgo_host.errors import ConfigError  # noqa: E402
from mlgo_host.learning.networks import build_actor_network, build_value_network, tf_logits  # noqa: E402
from mlgo_host.learning.tensor_specs import numpy_observations  # noqa: E402
from mlgo_host.policies.vocab import NormConfig  # noqa: E402


def test_the_eviction_actor_gives_masked_columns_the_lowest_logit(evict_session):
    spec, vocab = spec_vocab(evict_session)
    net = build_actor_network(spec, vocab, NormConfig(), fc_layer_params=(16,))
    feats = evict_session[1].features()
    logits = tf_logits(net, spec, feats)
    mask = np.asarray(feats[spec.mask.name]).reshape(logits.shape)
    assert (mask == 0).any() and (mask != 0).any(), "the episode should have legal and masked columns"
    lowest = np.finfo(np.float32).min
    assert np.all(logits[mask == 0] == lowest)
    assert np.all(logits[mask != 0] > lowest)


def test_the_value_network_scores_each_observation(inline_session):
    spec, vocab = spec_vocab(inline_session)
    net = build_value_network(spec, vocab, NormConfig(), fc_layer_params=(8,))
    ep = inline_session[1]
    obs = {k: tf.constant(v) for k, v in numpy_observations(spec, ep.features()).items()}
    values, _ = net(obs, step_type=None, network_state=())
    assert values.shape == (ep.n,) and np.all(np.isfinite(values.numpy()))


def test_an_activation_without_a_numpy_version_is_refused(inline_session):
    spec, vocab = spec_vocab(inline_session)
    with pytest.raises(ConfigError, match="softsign.*has no numpy version|has no numpy version"):
        build_actor_network(spec, vocab, NormConfig(), activation_fn=tf.keras.activations.softsign)
