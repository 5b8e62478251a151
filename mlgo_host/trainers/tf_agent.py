"""The learner's side of a policy: TF networks, the tf-agents PPO agent,
weights TF <-> numpy, and episodes -> trajectories.  Imports TensorFlow.

* Inliner: the actor is tf-agents' ``ActorDistributionNetwork`` (dense
  layers, categorical projection over 2 actions) with the vocab
  normalization as per-feature preprocessing layers and a ``Concatenate``
  combiner, as in ml-compiler-opt's ``ppo_nn_agent.gin``.
* Eviction: :class:`ColumnActorNetwork`, a tf-agents ``DistributionNetwork``
  scoring each of the W candidate columns with the same dense layers, the
  logits of ``mask == 0`` columns replaced by the dtype's minimum (tf-agents'
  masking convention; the numpy actor uses -inf).
* The value network is tf-agents' ``ValueNetwork`` on the same preprocessing.

:func:`create_ppo_agent` is gin-configurable (layer sizes, learning rate,
clipping, entropy, epochs, GAE lambda, discount, ...).  Weights are exported
with :func:`export_actor_weights` to the dict the numpy actor
(:mod:`mlgo_host.policies.actor`) reads, and imported back with
:func:`import_actor_weights` (warm start from a saved policy).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Iterable, Mapping, Sequence

import gin
import numpy as np
import tensorflow as tf
from tf_agents.agents.ppo import ppo_agent, ppo_clip_agent
from tf_agents.networks import actor_distribution_network, network, value_network
from tf_agents.networks import utils as network_utils
from tf_agents.specs import distribution_spec, tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory
from tf_agents.utils import common as tfa_common
from tf_agents.utils import nest_utils
import tensorflow_probability as tfp

from mlgo_host.errors import ConfigError
from mlgo_host.policies.actor import ACTIVATIONS, NumpyActor
from mlgo_host.policies.saved import read_saved_policy
from mlgo_host.policies.specs import BINARY, DISCARD, MASKED_CHOICE, PolicySpec
from mlgo_host.trainers.tf_features import preprocessing_layers, tf_dtype
from mlgo_host.policies.vocab import NormConfig, Vocab

#: gin-configurable normalization options (``NormConfig.with_sqrt = True`` ...)
GinNormConfig = gin.external_configurable(NormConfig, "NormConfig")


# -- specs ------------------------------------------------------------------
def observation_spec(spec: PolicySpec) -> dict[str, tf.TensorSpec]:
    """Every observation feature of the policy (inputs, mask and discarded
    ones alike, like ml-compiler-opt's signature specs), shapes without the
    leading 1s."""
    return {f.name: tf.TensorSpec(shape=f.tf_shape, dtype=tf_dtype(f.ctype), name=f.name) for f in spec.features}


def action_spec(spec: PolicySpec) -> tensor_spec.BoundedTensorSpec:
    return tensor_spec.BoundedTensorSpec(shape=(), dtype=tf.int64, minimum=0, maximum=spec.num_actions - 1,
                                         name=spec.action.name)


def time_step_spec(spec: PolicySpec) -> ts.TimeStep:
    return ts.time_step_spec(observation_spec(spec), tf.TensorSpec(shape=(), dtype=tf.float32, name="reward"))


# -- networks ---------------------------------------------------------------
class ColumnActorNetwork(network.DistributionNetwork):
    """Eviction actor: per-column features ``[N, W, D]`` -> the same dense
    layers on every column -> one logit per column -> mask -> Categorical."""

    def __init__(self, input_tensor_spec, output_tensor_spec, preprocessing: Mapping[str, tf.keras.layers.Layer],
                 fc_layer_params: Sequence[int] = (40, 40, 20), activation_fn=tf.keras.activations.relu,
                 mask_name: str = "mask", logits_init_output_factor: float = 0.1, name: str = "ColumnActorNetwork"):
        num = int(output_tensor_spec.maximum - output_tensor_spec.minimum + 1)
        out_spec = distribution_spec.DistributionSpec(
            tfp.distributions.Categorical,
            {"logits": tensor_spec.TensorSpec(shape=(num,), dtype=tf.float32, name=name + "_logits")},
            sample_spec=output_tensor_spec, dtype=output_tensor_spec.dtype)
        super().__init__(input_tensor_spec=input_tensor_spec, state_spec=(), output_spec=out_spec, name=name)
        self._names = sorted(preprocessing)
        self._pre = [preprocessing[n] for n in self._names]
        init = tf.compat.v1.keras.initializers.glorot_uniform()
        self._dense = [tf.keras.layers.Dense(u, activation=activation_fn, kernel_initializer=init, name=f"dense_{i}")
                       for i, u in enumerate(fc_layer_params)]
        self._logits = tf.keras.layers.Dense(
            1, kernel_initializer=tf.compat.v1.keras.initializers.VarianceScaling(scale=logits_init_output_factor),
            bias_initializer=tf.keras.initializers.Zeros(), name="logits")
        self._mask_name = mask_name
        self._num = num

    # (the attribute names stay private: checkpoints key the weights by them)
    @property
    def dense_layers(self) -> list[tf.keras.layers.Dense]:
        return list(self._dense)

    @property
    def logits_layer(self) -> tf.keras.layers.Dense:
        return self._logits

    def call(self, observations, step_type=None, network_state=(), training=False, mask=None):
        del step_type, mask
        outer_rank = nest_utils.get_outer_rank(observations, self.input_tensor_spec)
        squash = network_utils.BatchSquash(outer_rank)
        obs = tf.nest.map_structure(squash.flatten, observations)
        x = tf.concat([layer(obs[n], training=training) for n, layer in zip(self._names, self._pre)], axis=-1)
        for d in self._dense:
            x = d(x, training=training)
        logits = tf.reshape(self._logits(x, training=training), [-1, self._num])
        m = obs[self._mask_name]
        logits = tf.where(tf.not_equal(m, 0), logits, tf.constant(logits.dtype.min, logits.dtype))
        logits = squash.unflatten(logits)
        return self.output_spec.build_distribution(logits=logits), network_state


def _activation_name(fn) -> str:
    name = tf.keras.activations.serialize(fn) if fn is not None else "linear"
    if isinstance(name, dict):
        name = name.get("config", {}).get("name", str(name))
    return str(name)


@gin.configurable
def build_actor_network(spec: PolicySpec, vocab: Vocab, norm: NormConfig,
                        fc_layer_params: Sequence[int] = (40, 40, 20),
                        activation_fn=tf.keras.activations.relu) -> network.DistributionNetwork:
    """The actor: ``ActorDistributionNetwork`` (inliner) or
    :class:`ColumnActorNetwork` (eviction); variables created."""
    if _activation_name(activation_fn) not in ACTIVATIONS:
        raise ConfigError(f"activation {activation_fn!r} has no numpy version (have {', '.join(ACTIVATIONS)})")
    obs_spec = observation_spec(spec)
    pre = preprocessing_layers(spec, vocab, norm)
    if spec.action.kind == BINARY:
        net = actor_distribution_network.ActorDistributionNetwork(
            obs_spec, action_spec(spec), preprocessing_layers=pre,
            preprocessing_combiner=tf.keras.layers.Concatenate(), fc_layer_params=tuple(fc_layer_params),
            activation_fn=activation_fn, name="ActorDistributionNetwork")
    elif spec.action.kind == MASKED_CHOICE:
        net = ColumnActorNetwork(obs_spec, action_spec(spec), pre, fc_layer_params=tuple(fc_layer_params),
                                 activation_fn=activation_fn, mask_name=spec.mask.name)  # type: ignore[union-attr]
    else:  # pragma: no cover - PolicySpec rejects it
        raise ConfigError(f"unsupported action kind {spec.action.kind!r}")
    net.create_variables(obs_spec)
    return net


@gin.configurable
def build_value_network(spec: PolicySpec, vocab: Vocab, norm: NormConfig,
                        fc_layer_params: Sequence[int] = (40, 40, 20),
                        activation_fn=tf.keras.activations.relu) -> network.Network:
    obs_spec = observation_spec(spec)
    net = value_network.ValueNetwork(
        obs_spec, preprocessing_layers=preprocessing_layers(spec, vocab, norm),
        preprocessing_combiner=tf.keras.layers.Concatenate(), fc_layer_params=tuple(fc_layer_params),
        activation_fn=activation_fn, name="ValueNetwork")
    net.create_variables(obs_spec)
    return net


def _actor_dense_layers(actor_net) -> tuple[list[tf.keras.layers.Dense], tf.keras.layers.Dense]:
    if isinstance(actor_net, ColumnActorNetwork):
        return actor_net.dense_layers, actor_net.logits_layer
    if isinstance(actor_net, actor_distribution_network.ActorDistributionNetwork):
        # Private tf-agents attributes, unavoidably: ActorDistributionNetwork
        # exposes neither its encoder's dense layers nor the projection layer,
        # and the numpy actor needs exactly those weights, layer by layer
        # (tf-agents is pinned to 0.19.0 in pyproject.toml).
        enc = actor_net._encoder
        hidden = [l for l in enc._postprocessing_layers if isinstance(l, tf.keras.layers.Dense)]
        others = [l for l in enc._postprocessing_layers
                  if not isinstance(l, (tf.keras.layers.Dense, tf.keras.layers.Flatten))]
        if others:
            raise ConfigError(f"the numpy actor supports dense layers only, the encoder has {others}")
        return hidden, actor_net._projection_networks._projection_layer
    raise ConfigError(f"cannot export the weights of {type(actor_net).__name__}")


def actor_activation(actor_net) -> str:
    hidden, _ = _actor_dense_layers(actor_net)
    names = {_activation_name(l.activation) for l in hidden} or {"relu"}
    if len(names) != 1:
        raise ConfigError(f"mixed activations {names} are not supported by the numpy actor")
    return names.pop()


def export_actor_weights(actor_net) -> dict[str, np.ndarray]:
    """TF actor -> the numpy actor's weight dict (float32 arrays)."""
    hidden, proj = _actor_dense_layers(actor_net)
    out: dict[str, np.ndarray] = {}
    for i, layer in enumerate(hidden):
        k, b = layer.get_weights()
        out[f"hidden_{i}_kernel"], out[f"hidden_{i}_bias"] = k.astype(np.float32), b.astype(np.float32)
    k, b = proj.get_weights()
    out["logits_kernel"], out["logits_bias"] = k.astype(np.float32), b.astype(np.float32)
    return out


def import_actor_weights(actor_net, weights: Mapping[str, np.ndarray]) -> None:
    """numpy weight dict -> TF actor (warm start).  Shapes must match."""
    hidden, proj = _actor_dense_layers(actor_net)
    n = sum(1 for k in weights if k.startswith("hidden_") and k.endswith("_kernel"))
    if n != len(hidden):
        raise ConfigError(f"weights have {n} hidden layers, the actor has {len(hidden)}")
    pairs = [(hidden[i], f"hidden_{i}") for i in range(n)] + [(proj, "logits")]
    for layer, key in pairs:
        new = [np.asarray(weights[f"{key}_kernel"]), np.asarray(weights[f"{key}_bias"])]
        old = layer.get_weights()
        if [w.shape for w in old] != [w.shape for w in new]:
            raise ConfigError(f"layer {key}: weights {[w.shape for w in new]} do not fit {[w.shape for w in old]}")
        layer.set_weights(new)


def numpy_actor(actor_net, spec: PolicySpec, vocab: Vocab, norm: NormConfig) -> NumpyActor:
    """The numpy twin of a TF actor."""
    return NumpyActor(spec, vocab, norm, export_actor_weights(actor_net), activation=actor_activation(actor_net))


def tf_logits(actor_net, spec: PolicySpec, features: Any) -> np.ndarray:
    """Logits of the TF actor on N observations (structured array or
    mapping), as numpy ``[N, num_actions]``."""
    obs = observations_from_features(spec, features)
    dist, _ = actor_net(obs, step_type=None, network_state=(), training=False)
    return dist.logits_parameter().numpy() if hasattr(dist, "logits_parameter") else dist.logits.numpy()


# -- the agent --------------------------------------------------------------
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
    warm_start: str | Mapping[str, np.ndarray] | None = None,
    actor_fc_layer_params: Sequence[int] | None = None,
    debug_summaries: bool = False,
):
    """A tf-agents PPO agent (``PPOClipAgent``, or ``PPOAgent`` with the KL
    penalty when ``clip_agent=False``) for ``spec``; ``warm_start`` is a saved
    policy directory, an ``actor.npz`` or a weight dict.  Defaults follow
    ml-compiler-opt's inlining PPO config (discount 0, lambda 0: every
    decision gets its module's reward), with a learned value baseline.
    ``actor_fc_layer_params`` overrides ``build_actor_network.fc_layer_params``."""
    norm = norm if norm is not None else GinNormConfig()
    if actor_fc_layer_params is not None:
        actor = build_actor_network(spec, vocab, norm, fc_layer_params=tuple(actor_fc_layer_params))
    else:
        actor = build_actor_network(spec, vocab, norm)
    value = build_value_network(spec, vocab, norm)
    if warm_start is not None:
        import_actor_weights(actor, _load_weights(warm_start))
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
    # Keras makes Adam's moments on the first update; make them now, in the
    # order PPOAgent trains the variables (sorted by name), so that a
    # checkpoint holds them and a resumed run keeps the optimizer state.
    optimizer.build(sorted(actor.trainable_weights + value.trainable_weights, key=lambda v: v.name))
    return agent


def create_ppo_agent_from_saved(path: str, **kwargs):
    """A PPO agent continuing from a saved policy directory (e.g. the
    behavioural-cloning warm start): its spec, vocab, normalization, layer
    sizes and actor weights; other agent options as :func:`create_ppo_agent`.
    Returns ``(agent, saved_policy)``."""
    sp = read_saved_policy(path)
    a = sp.actor
    layers = sp.metadata.get("fc_layer_params") or [w.shape[1] for w, _ in a.hidden]
    agent = create_ppo_agent(sp.spec, a.vocab, a.norm, warm_start=a.weights(), actor_fc_layer_params=layers,
                             **kwargs)
    return agent, sp


def _load_weights(src) -> dict[str, np.ndarray]:
    if isinstance(src, Mapping):
        return dict(src)
    path = os.path.join(src, "actor.npz") if os.path.isdir(src) else src
    return NumpyActor.load_weights(path)


def train_function(agent):
    """``agent.train`` wrapped in a ``tf.function`` (traced once per batch shape)."""
    return tfa_common.function(agent.train, autograph=False)


# -- episodes -> trajectories ------------------------------------------------
def observations_from_features(spec: PolicySpec, features: Any, n: int | None = None) -> dict[str, tf.Tensor]:
    """The observation dict (every spec feature, TF shapes) of N records.
    Discarded features missing from the records are zeros; a missing used
    feature is a :class:`ConfigError`."""
    return {k: tf.constant(v) for k, v in numpy_observations(spec, features, n).items()}


def numpy_observations(spec: PolicySpec, features: Any, n: int | None = None) -> dict[str, np.ndarray]:
    names = set(features.dtype.names) if hasattr(features, "dtype") and features.dtype.names else set(features)
    if n is None:
        first = next(f.name for f in spec.features if f.name in names)
        n = int(np.asarray(features[first]).shape[0])
    out = {}
    for f in spec.features:
        shape = (n,) + f.tf_shape
        if f.name in names:
            out[f.name] = np.ascontiguousarray(np.asarray(features[f.name]).reshape(shape), dtype=f.dtype)
        elif f.role == DISCARD:
            out[f.name] = np.zeros(shape, dtype=f.dtype)
        else:
            raise ConfigError(f"the episodes have no feature {f.name!r}, which the policy uses")
    return out


def old_logits(spec: PolicySpec, actions: np.ndarray, logps: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """Logits of the collecting policy rebuilt from the log-probability of the
    action taken (episodes keep only that): exact for 2 actions; for a masked
    choice the remaining probability is spread evenly over the other legal
    columns (the importance ratio stays exact, the KL is approximate)."""
    n = actions.shape[0]
    lp = np.minimum(np.asarray(logps, np.float64), np.log1p(-1e-6))
    rest = np.log(-np.expm1(lp))  # log(1 - p)
    A = spec.num_actions
    floor = np.finfo(np.float32).min
    if spec.action.kind == BINARY:
        out = np.empty((n, 2))
        out[np.arange(n), actions] = lp
        out[np.arange(n), 1 - actions] = rest
        return out.astype(np.float32)
    legal = (mask.reshape(n, A) != 0) if mask is not None else np.ones((n, A), bool)
    legal[np.arange(n), actions] = True
    k = legal.sum(axis=1)
    others = np.where(k > 1, rest - np.log(np.maximum(k - 1, 1)), floor)
    out = np.where(legal, others[:, None], floor)
    out[np.arange(n), actions] = lp
    return out.astype(np.float32)


@dataclasses.dataclass
class StepArrays:
    """Flat per-decision arrays of many episodes (numpy)."""

    observation: dict[str, np.ndarray]
    action: np.ndarray
    logits: np.ndarray
    reward: np.ndarray
    step_type: np.ndarray
    next_step_type: np.ndarray

    @property
    def n(self) -> int:
        return int(self.action.shape[0])


def episodes_to_steps(spec: PolicySpec, episodes: Iterable[Any], rewards: Iterable[Any]) -> StepArrays:
    """Concatenate episodes (each an :class:`mlgo_host.episode.Episode`)
    step by step.  ``rewards``: per episode, a scalar (given to every
    decision, ml-compiler-opt's convention) or an array of one reward per
    decision.  Step types as ``trajectory.from_episode``: FIRST, MID, ...;
    the next step type of an episode's last decision is LAST."""
    obs_parts: dict[str, list[np.ndarray]] = {f.name: [] for f in spec.features}
    acts, logits, rews, st, nst = [], [], [], [], []
    for ep, r in zip(episodes, rewards, strict=True):
        n = ep.n
        if n == 0:
            continue
        feats = ep.features()
        o = numpy_observations(spec, feats, n)
        for k, v in o.items():
            obs_parts[k].append(v)
        a = np.asarray(ep.actions).reshape(n).astype(np.int64)
        if a.min() < 0 or a.max() >= spec.num_actions:
            raise ConfigError(f"episode actions outside [0, {spec.num_actions})")
        acts.append(a)
        m = o[spec.mask.name] if spec.mask is not None else None
        logits.append(old_logits(spec, a, np.asarray(ep.logps).reshape(n), m))
        rr = np.asarray(r, np.float32)
        rews.append(np.full(n, rr, np.float32) if rr.ndim == 0 else rr.reshape(n))
        s = np.full(n, ts.StepType.MID, np.int32)
        s[0] = ts.StepType.FIRST
        ns = np.full(n, ts.StepType.MID, np.int32)
        ns[-1] = ts.StepType.LAST
        st.append(s)
        nst.append(ns)
    if not acts:
        raise ConfigError("no decisions in the episodes")
    return StepArrays({k: np.concatenate(v) for k, v in obs_parts.items()}, np.concatenate(acts),
                      np.concatenate(logits), np.concatenate(rews), np.concatenate(st), np.concatenate(nst))


def episodes_to_trajectories(
    spec: PolicySpec,
    episodes: Iterable[Any],
    rewards: Iterable[Any],
    *,
    sequence_length: int = 16,
    batch_size: int | None = 256,
    seed: int = 0,
    shuffle: bool = True,
) -> list[trajectory.Trajectory]:
    """Episodes -> batches for ``agent.train``: the decisions of all episodes
    in order, cut into windows of ``sequence_length`` (the remainder is
    dropped), windows shuffled (seeded) and grouped ``batch_size`` at a time
    (a last partial batch is dropped; ``None``: one batch of every window).
    This is ml-compiler-opt's ``create_sequence_example_dataset_fn`` without
    tf.data.  Each batch is a ``Trajectory`` of tensors ``[B, T, ...]`` with
    ``policy_info = {'dist_params': {'logits': ...}}``."""
    if sequence_length < 2:
        raise ConfigError("sequence_length must be at least 2 (PPO needs a next step)")
    steps = episodes_to_steps(spec, episodes, rewards)
    T = sequence_length
    nw = steps.n // T
    if nw == 0:
        raise ConfigError(f"{steps.n} decisions: fewer than one sequence of {T}")
    order = np.arange(nw)
    if shuffle:
        np.random.default_rng(seed).shuffle(order)
    B = nw if batch_size is None else int(batch_size)
    if B > nw:
        B = nw
    out = []
    for start in range(0, nw - B + 1, B):
        idx = (order[start : start + B, None] * T + np.arange(T)[None, :])  # [B, T]
        take = lambda a: tf.constant(a[idx])  # noqa: E731
        out.append(trajectory.Trajectory(
            step_type=take(steps.step_type),
            observation={k: take(v) for k, v in steps.observation.items()},
            action=take(steps.action),
            policy_info={"dist_params": {"logits": take(steps.logits)}},
            next_step_type=take(steps.next_step_type),
            reward=take(steps.reward),
            discount=tf.ones(idx.shape, tf.float32),
        ))
    return out
