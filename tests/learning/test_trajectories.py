"""Episodes -> training batches: the decisions of all episodes in order,
the collecting policy's logits rebuilt from its logged log-probabilities,
one reward per decision, FIRST/LAST at the episode boundaries."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from _policy_helpers import observations, spec_vocab  # noqa: E402

from mlgo_host.errors import ConfigError  # noqa: E402
from mlgo_host.learning.trajectories import episodes_to_trajectories  # noqa: E402
from mlgo_host.learning.weights import numpy_actor  # noqa: E402
from mlgo_host.learning.networks import build_actor_network  # noqa: E402
from mlgo_host.policies.actor import NumpyPolicy  # noqa: E402
from mlgo_host.policies.vocab import NormConfig  # noqa: E402


def stochastic_episode(session):
    """The session's episode as a stochastic numpy policy would collect it:
    (spec, episode, actions, log-probabilities)."""
    header, ep, adv = session
    spec, vocab = spec_vocab(session)
    actor = numpy_actor(build_actor_network(spec, vocab, NormConfig(), fc_layer_params=(16,)), spec, vocab, NormConfig())
    pol = NumpyPolicy(actor, greedy=False, seed=0)
    pol.bind(header, adv)
    acts, lps = zip(*[pol.act_logp(o) for o in observations(header, ep)])
    ep2 = type(ep)(header, ep.raw, np.array(acts, np.int64), np.array(lps, np.float32), ep.contexts)
    return spec, ep2, np.array(acts), np.array(lps)


@pytest.mark.parametrize("session_name", ["inline_session", "evict_session"])
def test_episodes_in_order(request, session_name):
    spec, ep, acts, lps = stochastic_episode(request.getfixturevalue(session_name))
    (seq,) = episodes_to_trajectories(spec, [ep, ep], [0.3, 0.0], sequence_length=8, batch_size=None, shuffle=False)
    k = seq.action.shape[0] * 8
    np.testing.assert_array_equal(seq.action.numpy().ravel(), np.concatenate([acts, acts])[:k])
    # the rebuilt logits give back the logged log-probability of the action taken
    lp = tf.nn.log_softmax(seq.policy_info["dist_params"]["logits"]).numpy()
    taken = np.take_along_axis(lp, seq.action.numpy()[..., None], -1)[..., 0].ravel()
    np.testing.assert_allclose(taken, np.concatenate([lps, lps])[:k], atol=2e-6)
    st = seq.step_type.numpy().ravel()
    assert st[0] == 0 and st[ep.n] == 0 and set(st[1:ep.n]) == {1}  # FIRST at each episode start
    assert seq.next_step_type.numpy().ravel()[ep.n - 1] == 2  # LAST after an episode's last decision
    np.testing.assert_array_equal(seq.reward.numpy().ravel()[:ep.n], np.float32(0.3))


def test_batches_and_per_decision_rewards(inline_session):
    spec, ep, *_ = stochastic_episode(inline_session)
    trajs = episodes_to_trajectories(spec, [ep, ep], [0.3, np.linspace(-1, 1, ep.n)], sequence_length=8,
                                     batch_size=16)
    assert len(trajs) == (2 * ep.n // 8) // 16 and all(t.action.shape == (16, 8) for t in trajs)
    with pytest.raises(ConfigError, match="fewer than one sequence"):
        episodes_to_trajectories(spec, [ep], [0.0], sequence_length=ep.n + 1)
