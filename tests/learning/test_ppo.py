"""The tf-agents PPO agent trains on real episodes (inliner and eviction),
and its numpy twin still matches it afterwards."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from _policy_helpers import observations, spec_vocab  # noqa: E402

from mlgo_host.learning.networks import tf_logits  # noqa: E402
from mlgo_host.learning.ppo import create_ppo_agent  # noqa: E402
from mlgo_host.learning.trajectories import episodes_to_trajectories  # noqa: E402
from mlgo_host.learning.weights import export_actor_weights, numpy_actor  # noqa: E402
from mlgo_host.policies.actor import NumpyPolicy  # noqa: E402
from mlgo_host.policies.vocab import NormConfig  # noqa: E402


@pytest.mark.parametrize("session_name", ["inline_session", "evict_session"])
def test_ppo_agent_trains_on_real_episodes(request, session_name):
    header, ep, adv = request.getfixturevalue(session_name)
    spec, vocab = spec_vocab((header, ep, adv))
    agent = create_ppo_agent(spec, vocab, NormConfig(), num_epochs=2, learning_rate=1e-2)
    # episodes as the agent's stochastic numpy twin would collect them
    pol = NumpyPolicy(numpy_actor(agent.actor_net, spec, vocab, NormConfig()), greedy=False, seed=0)
    pol.bind(header, adv)
    acts, lps = zip(*[pol.act_logp(o) for o in observations(header, ep)])
    ep2 = type(ep)(header, ep.raw, np.array(acts, np.int64), np.array(lps, np.float32), ep.contexts)
    t = episodes_to_trajectories(spec, [ep2, ep2], [0.3, np.linspace(-1, 1, ep.n)], sequence_length=8,
                                 batch_size=16)[0]
    tf.nest.assert_same_structure(t.policy_info, agent.collect_data_spec.policy_info)
    before = export_actor_weights(agent.actor_net)
    loss = agent.train(t)
    assert np.isfinite(float(loss.loss))
    after = export_actor_weights(agent.actor_net)
    assert any(not np.array_equal(before[k], after[k]) for k in before)
    # the exported numpy twin still matches the trained TF actor
    lt = tf_logits(agent.actor_net, spec, ep.features())
    ln = numpy_actor(agent.actor_net, spec, vocab, NormConfig()).logits(ep.features())
    fin = np.isfinite(ln)
    assert np.max(np.abs(lt[fin] - ln[fin])) < 1e-5

