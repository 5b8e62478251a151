"""The tf-agents PPO agent of a policy (gin-configurable) and its training step as a ``tf.function``."""

from __future__ import annotations

import gin
import tensorflow as tf
from tf_agents.agents.ppo import ppo_agent, ppo_clip_agent

from mlgo_host.learning.networks import build_actor_network, build_value_network
from mlgo_host.learning.preprocessing import GinNormConfig
from mlgo_host.learning.tensor_specs import action_spec, time_step_spec
from mlgo_host.policies.specs import PolicySpec
from mlgo_host.policies.vocab import NormConfig, Vocab


@gin.configurable
def create_ppo_agent(
    spec: PolicySpec,
    vocab: Vocab,
    norm: NormConfig | None = None,
    *,
    clip_agent: bool = True,
    learning_rate: float = 3e-4,
    adam_epsilon: float = 1e-5,
    importance_ratio_clipping: float = 0.2,
    entropy_regularization: float = 0.003,
    num_epochs: int = 1,
    lambda_value: float = 0.0,
    discount_factor: float = 0.0,
    use_gae: bool = False,
    use_td_lambda_return: bool = False,
    value_pred_loss_coef: float = 0.5,
    policy_l2_reg: float = 1e-6,
    gradient_clipping: float | None = None,
    normalize_rewards: bool = False,
    debug_summaries: bool = False,
):
    """A ``PPOClipAgent`` (``PPOAgent`` with the KL penalty when not ``clip_agent``).  Defaults follow
    ml-compiler-opt's inlining PPO config (discount 0, lambda 0: every decision gets its module's reward)."""
    norm = norm if norm is not None else GinNormConfig()
    actor = build_actor_network(spec, vocab, norm)
    value = build_value_network(spec, vocab, norm)
    optimizer = tf.keras.optimizers.Adam(learning_rate=learning_rate, epsilon=adam_epsilon)
    common = dict(
        optimizer=optimizer, actor_net=actor, value_net=value, importance_ratio_clipping=importance_ratio_clipping,
        lambda_value=lambda_value, discount_factor=discount_factor, entropy_regularization=entropy_regularization,
        policy_l2_reg=policy_l2_reg, value_pred_loss_coef=value_pred_loss_coef, num_epochs=num_epochs,
        use_gae=use_gae, use_td_lambda_return=use_td_lambda_return, normalize_rewards=normalize_rewards,
        normalize_observations=False, gradient_clipping=gradient_clipping,
        compute_value_and_advantage_in_train=True, update_normalizers_in_train=False,
        debug_summaries=debug_summaries, train_step_counter=tf.Variable(0, dtype=tf.int64, name="train_step"))
    cls = ppo_clip_agent.PPOClipAgent if clip_agent else ppo_agent.PPOAgent
    agent = cls(time_step_spec(spec), action_spec(spec), **common)
    agent.initialize()
    # Adam's moments made now, in PPOAgent's variable order (by name), so a
    # checkpoint holds them and a resumed run keeps the optimizer state.
    optimizer.build(sorted(actor.trainable_weights + value.trainable_weights, key=lambda v: v.name))
    return agent

