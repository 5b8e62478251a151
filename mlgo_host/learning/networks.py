"""The TF networks of a policy, the vocab normalization as preprocessing layers: tf-agents'
``ActorDistributionNetwork`` for the inliner, :class:`ColumnActorNetwork` for eviction, a ``ValueNetwork``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import gin
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from tf_agents.networks import actor_distribution_network, network, value_network
from tf_agents.networks import utils as network_utils
from tf_agents.specs import distribution_spec, tensor_spec
from tf_agents.utils import nest_utils

from mlgo_host.errors import ConfigError
from mlgo_host.learning.preprocessing import preprocessing_layers
from mlgo_host.learning.tensor_specs import action_spec, numpy_observations, observation_spec
from mlgo_host.policies.actor import ACTIVATIONS
from mlgo_host.policies.specs import BINARY, PolicySpec
from mlgo_host.policies.vocab import NormConfig, Vocab


class ColumnActorNetwork(network.DistributionNetwork):
    """Eviction actor: the same dense layers score every column ``[N, W, D]``; masked columns get the dtype's
    minimum logit (tf-agents' convention)."""

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


def activation_name(fn) -> str:
    name = tf.keras.activations.serialize(fn) if fn is not None else "linear"
    if isinstance(name, dict):
        name = name.get("config", {}).get("name", str(name))
    return str(name)


@gin.configurable
def build_actor_network(spec: PolicySpec, vocab: Vocab, norm: NormConfig,
                        fc_layer_params: Sequence[int] = (40, 40, 20),
                        activation_fn=tf.keras.activations.relu) -> network.DistributionNetwork:
    """The actor network of ``spec``, variables created; only activations the numpy actor has."""
    if activation_name(activation_fn) not in ACTIVATIONS:
        raise ConfigError(f"activation {activation_fn!r} has no numpy version (have {', '.join(ACTIVATIONS)})")
    obs_spec = observation_spec(spec)
    pre = preprocessing_layers(spec, vocab, norm)
    if spec.action.kind == BINARY:
        net = actor_distribution_network.ActorDistributionNetwork(
            obs_spec, action_spec(spec), preprocessing_layers=pre,
            preprocessing_combiner=tf.keras.layers.Concatenate(), fc_layer_params=tuple(fc_layer_params),
            activation_fn=activation_fn, name="ActorDistributionNetwork")
    else:  # MASKED_CHOICE: PolicySpec rejects any other kind
        net = ColumnActorNetwork(obs_spec, action_spec(spec), pre, fc_layer_params=tuple(fc_layer_params),
                                 activation_fn=activation_fn, mask_name=spec.mask.name)  # type: ignore[union-attr]
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


def tf_logits(actor_net, spec: PolicySpec, features: Any) -> np.ndarray:
    """The TF actor's logits ``[N, num_actions]`` on N records, as numpy."""
    obs = {k: tf.constant(v) for k, v in numpy_observations(spec, features).items()}
    return actor_logits(actor_net, obs).numpy()


def actor_logits(actor_net, obs) -> tf.Tensor:
    dist, _ = actor_net(obs, step_type=None, network_state=(), training=False)
    return dist.logits_parameter()
