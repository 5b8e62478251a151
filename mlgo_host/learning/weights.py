"""An actor's dense-layer weights between a TF network and the numpy actor's dict, both ways."""

from __future__ import annotations

from typing import Mapping

import numpy as np
import tensorflow as tf
from tf_agents.networks import actor_distribution_network

from mlgo_host.errors import ConfigError
from mlgo_host.learning.networks import ColumnActorNetwork, activation_name
from mlgo_host.policies.actor import NumpyActor
from mlgo_host.policies.specs import PolicySpec
from mlgo_host.policies.vocab import NormConfig, Vocab


def _actor_dense_layers(actor_net) -> tuple[list[tf.keras.layers.Dense], tf.keras.layers.Dense]:
    if isinstance(actor_net, ColumnActorNetwork):  # (its private names: checkpoints key the weights by them)
        return list(actor_net._dense), actor_net._logits
    if isinstance(actor_net, actor_distribution_network.ActorDistributionNetwork):
        # private attributes, unavoidably: the network exposes neither its dense
        # layers nor its projection layer (tf-agents is pinned to 0.19.0)
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
    names = {activation_name(l.activation) for l in hidden} or {"relu"}
    if len(names) != 1:
        raise ConfigError(f"mixed activations {names} are not supported by the numpy actor")
    return names.pop()


def export_actor_weights(actor_net) -> dict[str, np.ndarray]:
    """TF actor -> the numpy actor's weight dict (float32 arrays)."""
    hidden, proj = _actor_dense_layers(actor_net)
    out: dict[str, np.ndarray] = {}
    for key, layer in [(f"hidden_{i}", layer) for i, layer in enumerate(hidden)] + [("logits", proj)]:
        k, b = layer.get_weights()
        out[f"{key}_kernel"], out[f"{key}_bias"] = k.astype(np.float32), b.astype(np.float32)
    return out


def import_actor_weights(actor_net, weights: Mapping[str, np.ndarray]) -> None:
    """numpy weight dict -> TF actor (warm start); shapes must match."""
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
    return NumpyActor(spec, vocab, norm, export_actor_weights(actor_net), activation=actor_activation(actor_net))
