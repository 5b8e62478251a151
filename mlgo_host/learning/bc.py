"""Behavioural cloning: :func:`train_bc` trains the PPO actor on a trace of the compiler's default policy
(``mlgo-host trace``) with a cross-entropy loss and saves a policy PPO can warm-start from.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from typing import Sequence

import gin
import numpy as np
import tensorflow as tf

from mlgo_host.channel.problems import LEARNABLE, get_problem
from mlgo_host.errors import ConfigError
from mlgo_host.evaluation.traces import Trace, vocab_from_trace
from mlgo_host.fsutil import atomic_write_json
from mlgo_host.learning.export import save_policy
from mlgo_host.learning.networks import actor_logits, build_actor_network
from mlgo_host.learning.preprocessing import GinNormConfig
from mlgo_host.learning.tensor_specs import numpy_observations, observation_spec
from mlgo_host.policies.specs import PolicySpec
from mlgo_host.policies.vocab import NormConfig, Vocab
from mlgo_host.progress import progress_bar

log = logging.getLogger("mlgo_host.bc")


@dataclasses.dataclass
class BCResult:
    output_dir: str
    decisions: int
    train_decisions: int
    heldout_decisions: int
    accuracy: float  # numpy actor (as saved) vs the default decisions, all decisions
    train_accuracy: float
    heldout_accuracy: float | None
    default_positive_rate: float  # fraction of decisions that are 1 (inliner) / not "evict nothing"
    epochs: int
    steps: int
    wall_s: float


@gin.configurable(module="bc")
def train_bc(
    trace_dir: str,
    output_dir: str,
    *,
    vocab_dir: str | None = None,
    norm: NormConfig | None = None,
    fc_layer_params: Sequence[int] | None = None,
    epochs: int = 30,
    batch_size: int = 256,
    learning_rate: float = 3e-3,
    heldout_fraction: float = 0.1,
    num_buckets: int = 1000,
    seed: int = 0,
    saved_model: bool = True,
    progress: bool = True,
) -> BCResult:
    """Train the actor to imitate the traced decisions and save the policy; ``heldout_fraction`` of the
    modules measure the accuracy on unseen code."""
    t0 = time.monotonic()
    tf.random.set_seed(seed)
    norm = norm if norm is not None else GinNormConfig()
    trace = Trace(trace_dir)
    if not get_problem(trace.advisor).learnable:
        raise ConfigError(f"behavioural cloning supports {' and '.join(LEARNABLE)} traces, "
                          f"not {trace.advisor!r}")
    vocab = Vocab.load(vocab_dir) if vocab_dir else vocab_from_trace(trace_dir, num_buckets=num_buckets,
                                                                     seed=seed)
    logs = list(trace.logs())
    if not logs:
        raise ConfigError(f"trace {trace.path} has no decisions")
    spec = PolicySpec.from_header(logs[0].header, trace.advisor, vocab_names=vocab.names(),
                                  default_slot=trace.index.get("default_slot"))
    rng = np.random.default_rng(seed)
    mods = [_Data(numpy_observations(spec, lg.records, lg.n), lg.actions.astype(np.int64)) for lg in logs]
    train, held = _split_modules(mods, heldout_fraction, rng)
    # unset: the gin-bound (PPO actor's) layers, so the result warm-starts PPO
    layers = {} if fc_layer_params is None else {"fc_layer_params": tuple(fc_layer_params)}
    net = build_actor_network(spec, vocab, norm, **layers)
    steps = _fit(net, spec, learning_rate, train, held, epochs, batch_size, rng, progress)
    sp = save_policy(output_dir, net, spec, vocab, norm, compiler=trace.index.get("compiler"), training_step=0,
                     saved_model=saved_model,
                     extra={"bc": {"trace_policy": trace.index.get("policy"), "epochs": epochs, "steps": steps}})
    res = _measure_saved(sp, spec, train, held, epochs=epochs, steps=steps, t0=t0)
    atomic_write_json(os.path.join(sp.path, "bc_report.json"), dataclasses.asdict(res))
    ho = "n/a" if res.heldout_accuracy is None else f"{res.heldout_accuracy:.4f}"
    print(f"behavioural cloning: accuracy against the default decisions {res.accuracy:.4f} "
          f"(train {res.train_accuracy:.4f} on {res.train_decisions} decisions, held out {ho} on "
          f"{res.heldout_decisions}); policy saved to {sp.path}", file=sys.stderr)
    return res


def _split_modules(mods: list[_Data], heldout_fraction: float,
                   rng: np.random.Generator) -> tuple[_Data, _Data | None]:
    """(training data, held-out data or None), split by module with a seeded shuffle."""
    order = rng.permutation(len(mods))
    n_held = 0
    if heldout_fraction > 0 and len(mods) >= 2:
        n_held = max(1, min(int(round(heldout_fraction * len(mods))), len(mods) - 1))
    held = [mods[i] for i in order[:n_held]]
    train = [mods[i] for i in order[n_held:]]
    return _Data.concat(train), (_Data.concat(held) if held else None)


@dataclasses.dataclass
class _Data:
    """Observations (feature -> [N, ...]) and the decisions taken (N)."""

    x: dict[str, np.ndarray]
    y: np.ndarray

    @classmethod
    def concat(cls, parts: list[_Data]) -> _Data:
        return cls({k: np.concatenate([p.x[k] for p in parts]) for k in parts[0].x},
                   np.concatenate([p.y for p in parts]))

    @property
    def n(self) -> int:
        return int(self.y.shape[0])


def adam_step(net, spec: PolicySpec, learning_rate: float, loss_fn, *arg_specs):
    """A compiled Adam step of ``net`` on ``loss_fn(logits, *args)`` over a batch of ``spec``'s observations
    and ``args`` (as ``arg_specs``); returns the loss."""
    opt = tf.keras.optimizers.Adam(learning_rate=learning_rate)

    @tf.function(input_signature=[_batched_obs_spec(spec), *arg_specs])
    def step(obs, *args):
        with tf.GradientTape() as tape:
            loss = loss_fn(actor_logits(net, obs), *args)
        grads = tape.gradient(loss, net.trainable_variables)
        opt.apply_gradients(zip(grads, net.trainable_variables))
        return loss

    return step


def epoch_losses(step, x: dict[str, np.ndarray], args: Sequence[np.ndarray], batch_size: int,
                 rng: np.random.Generator) -> list[float]:
    """One pass of ``step`` over shuffled minibatches of ``x`` and ``args``; the losses."""
    perm = rng.permutation(len(args[0]))
    batches = (perm[s : s + batch_size] for s in range(0, len(perm), batch_size))
    return [float(step({k: v[idx] for k, v in x.items()}, *(a[idx] for a in args))) for idx in batches]


def _fit(net, spec: PolicySpec, learning_rate: float, train: _Data, held: _Data | None, epochs: int,
         batch_size: int, rng: np.random.Generator, progress: bool) -> int:
    """Shuffled minibatch passes of cross-entropy, accuracy logged every 5 epochs; returns the steps."""

    def cross_entropy(logits, y):
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))

    step = adam_step(net, spec, learning_rate, cross_entropy, tf.TensorSpec([None], tf.int64))
    predict = tf.function(lambda obs: tf.argmax(actor_logits(net, obs), axis=-1),
                          input_signature=[_batched_obs_spec(spec)])

    def accuracy(data: _Data | None) -> float:
        if data is None:
            return float("nan")
        hits = sum(int(np.sum(predict({k: v[s : s + 8192] for k, v in data.x.items()}).numpy() == data.y[s : s + 8192]))
                   for s in range(0, data.n, 8192))
        return hits / max(1, data.n)

    steps = 0
    with progress_bar(range(epochs), desc="behavioural cloning", unit="epoch", enabled=progress) as bar:
        for ep in bar:
            losses = epoch_losses(step, train.x, (train.y,), batch_size, rng)
            steps += len(losses)
            if ep == epochs - 1 or ep % 5 == 4:
                tr_acc, ho_acc = accuracy(train), accuracy(held)
                bar.set_postfix(loss=f"{np.mean(losses):.4f}", acc=f"{tr_acc:.4f}", heldout=f"{ho_acc:.4f}")
                log.info("epoch %d: loss %.4f, accuracy %.4f (train), %.4f (held out)", ep + 1, np.mean(losses),
                         tr_acc, ho_acc)
    return steps


def _measure_saved(sp, spec: PolicySpec, train: _Data, held: _Data | None, *, epochs: int, steps: int,
                   t0: float) -> BCResult:
    """Accuracy of what was saved: the numpy actor, greedy."""
    hits_tr = int(np.sum(sp.actor.greedy(train.x) == train.y))
    hits_ho = int(np.sum(sp.actor.greedy(held.x) == held.y)) if held is not None else 0
    n_tr, n_ho = train.n, (held.n if held is not None else 0)
    y_all = train.y if held is None else np.concatenate([train.y, held.y])
    pos = float(np.mean(y_all == 1 if spec.action.kind == "binary" else y_all != spec.num_actions - 1))
    return BCResult(
        output_dir=sp.path, decisions=n_tr + n_ho, train_decisions=n_tr, heldout_decisions=n_ho,
        accuracy=(hits_tr + hits_ho) / (n_tr + n_ho), train_accuracy=hits_tr / n_tr,
        heldout_accuracy=(hits_ho / n_ho) if n_ho else None, default_positive_rate=pos, epochs=epochs,
        steps=steps, wall_s=time.monotonic() - t0)


def _batched_obs_spec(spec: PolicySpec) -> dict:
    return {k: tf.TensorSpec([None] + list(s.shape), s.dtype, name=k) for k, s in observation_spec(spec).items()}
