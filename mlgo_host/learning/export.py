"""Saved policy directories from a TF actor network: the numpy weights and vocab the workers read, the
metadata, and the tf-agents SavedModel with LLVM's ``output_spec.json``.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, Mapping

import numpy as np
import tensorflow as tf
from tf_agents.policies import actor_policy, greedy_policy, policy_saver

from mlgo_host.errors import ConfigError
from mlgo_host.fsutil import dir_built_aside
from mlgo_host.learning.networks import tf_logits
from mlgo_host.learning.preprocessing import TF_DTYPES
from mlgo_host.learning.tensor_specs import action_spec, time_step_spec
from mlgo_host.learning.weights import actor_activation, export_actor_weights
from mlgo_host.policies.actor import NumpyActor
from mlgo_host.policies.saved import (FORMAT, METADATA, OUTPUT_SPEC, SAVED_MODEL_DIR, VOCAB_DIR, WEIGHTS, SavedPolicy,
                                      read_saved_policy)
from mlgo_host.policies.specs import PolicySpec
from mlgo_host.policies.vocab import NormConfig, Vocab


def save_policy(
    path: str,
    actor_net: Any,
    spec: PolicySpec,
    vocab: Vocab,
    norm: NormConfig,
    *,
    compiler: str | None = None,
    training_step: int = 0,
    extra: Mapping[str, Any] | None = None,
    saved_model: bool = True,
) -> SavedPolicy:
    """Write a saved policy directory (built aside, renamed into place), checked: the numpy actor read back
    must give the TF actor's logits.  ``saved_model=False`` skips the SavedModel (seconds of TF work)."""
    missing = [n for n in spec.input_names if n not in vocab]
    if missing:
        raise ConfigError(f"the vocab has no boundaries for input features {missing}")
    with dir_built_aside(path) as tmp:
        weights = export_actor_weights(actor_net)
        NumpyActor.save_weights(os.path.join(tmp, WEIGHTS), weights)
        vdir = os.path.join(tmp, VOCAB_DIR)
        os.mkdir(vdir)
        Vocab({n: vocab[n] for n in spec.input_names}).write_into(vdir)
        md = {
            "format": FORMAT, "advisor": spec.advisor, "spec": spec.to_json(), "norm": norm.to_json(),
            "activation": actor_activation(actor_net),
            "fc_layer_params": [int(weights[f"hidden_{i}_bias"].shape[0]) for i in range(len(weights) // 2 - 1)],
            "input_features": list(spec.input_names), "compiler": compiler,
            # what the compiler-dependent inputs meant (clang-19 vs 21+; checked when served)
            "default_slot": spec.default_slot, "feature_meanings": spec.feature_meanings(),
            "training_step": int(training_step), "saved_model": SAVED_MODEL_DIR if saved_model else None,
        }
        if extra:
            md["extra"] = dict(extra)
        with open(os.path.join(tmp, METADATA), "w", encoding="utf-8") as f:
            f.write(json.dumps(md, indent=1, sort_keys=True) + "\n")
        if saved_model:
            write_saved_model(os.path.join(tmp, SAVED_MODEL_DIR), actor_net, spec)
        sp = read_saved_policy(tmp)
        _check_export(actor_net, sp.actor, spec)
    sp.path = os.path.abspath(path)
    return sp


def _check_export(actor_net: Any, actor: NumpyActor, spec: PolicySpec, n: int = 64) -> None:
    feats = random_features(spec, actor.vocab, n, seed=0)
    lt = tf_logits(actor_net, spec, feats)
    ln = actor.logits(feats)
    fin = np.isfinite(ln)
    err = float(np.max(np.abs(lt[fin] - ln[fin]))) if fin.any() else 0.0
    if not err <= 1e-4 * max(1.0, float(np.max(np.abs(ln[fin])) if fin.any() else 1.0)):
        raise ConfigError(f"exported numpy actor disagrees with the TF actor (max |logit diff| {err:.3g})")


def random_features(spec: PolicySpec, vocab: Vocab, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` random observations spread over each input's vocab range and beyond; a mask gets random legal
    columns (at least one)."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for f in spec.features:
        shape = (n,) + f.shape
        if f.role == "mask":
            m = (rng.random(shape) < 0.6).astype(f.dtype)
            flat = m.reshape(n, -1)
            flat[np.arange(n), rng.integers(0, flat.shape[1], n)] = 1
            out[f.name] = m
            continue
        if f.name in vocab:
            b = vocab[f.name].raw
            lo, hi = float(b[0]), float(b[-1])
            span = max(hi - lo, 1.0)
            v = rng.uniform(lo - 0.25 * span, hi + 0.25 * span, shape)
            # half of the values exactly on boundaries (the ties matter)
            v = np.where(rng.random(shape) < 0.5, rng.choice(b, shape), v)
        else:
            v = rng.uniform(-10, 10, shape)
        if f.dtype.kind in "iu":
            info = np.iinfo(f.dtype)
            v = np.clip(np.round(v), info.min, info.max)
        out[f.name] = v.astype(f.dtype)
    return out


def write_saved_model(directory: str, actor_net: Any, spec: PolicySpec) -> None:
    """tf-agents PolicySaver SavedModel of the greedy policy of ``actor_net``, plus ``output_spec.json`` (as
    ml-compiler-opt's policy saver writes it)."""
    pol = greedy_policy.GreedyPolicy(actor_policy.ActorPolicy(
        time_step_spec(spec), action_spec(spec), actor_network=actor_net))
    saver = policy_saver.PolicySaver(pol, batch_size=1, use_nest_path_signatures=False)
    with warnings.catch_warnings():
        # TF warns on every save that the Deterministic distribution spec needs
        # tensorflow-probability to load back: harmless, the ``action`` signature does not.
        warnings.filterwarnings("ignore", message="Encoding a StructuredValue", category=UserWarning)
        saver.save(directory)
    with open(os.path.join(directory, OUTPUT_SPEC), "w", encoding="utf-8") as f:
        f.write(json.dumps(_output_spec(directory, saver), indent=1) + "\n")


def _output_spec(directory: str, saver: Any) -> list[dict]:
    names = {v: k for k, v in TF_DTYPES.items()}
    sm = tf.saved_model.load(directory)
    sig = sm.signatures["action"]
    index = {s.name.lower(): i for i, s in enumerate(tf.nest.flatten(sig.structured_outputs))}
    entries = []
    wanted = [s.name for s in tf.nest.flatten((saver.policy_step_spec.action, saver.policy_step_spec.info))]
    for logging_name in wanted:
        t = sig.outputs[index[logging_name.lower()]]
        while t.op.name.startswith("Identity"):  # the real op behind the signature's identities
            t = t.op.inputs[0]
        op, _, port = t.name.partition(":")
        entries.append({"logging_name": logging_name, "tensor_spec": {
            "name": op, "port": int(port or 0), "type": names[t.dtype], "shape": t.shape.as_list()}})
    return entries
