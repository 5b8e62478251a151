"""Imitate the searched decisions (:mod:`mlgo_host.search.driver`): weighted behavioural cloning of each
module's best trajectory and every flip tried (labelled with what shrank the object, weighted by the bytes at
stake), the compiler's default decision an input; then a gate (:func:`choose_gate`): leave the default only
where the other action's probability is above it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import gin
import numpy as np
import tensorflow as tf

from mlgo_host.channel.codec import Header
from mlgo_host.errors import ConfigError
from mlgo_host.learning.bc import adam_step, epoch_losses
from mlgo_host.learning.export import save_policy
from mlgo_host.learning.networks import build_actor_network
from mlgo_host.learning.tensor_specs import numpy_observations
from mlgo_host.policies.specs import PolicySpec
from mlgo_host.policies.vocab import NormConfig, Vocab, VocabBuilder

#: a flip's weight: the bytes at stake, clipped
MAX_FLIP_WEIGHT = 4096.0


@dataclasses.dataclass
class Examples:
    header: Header
    records: np.ndarray
    labels: np.ndarray
    weights: np.ndarray

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def examples_from_search(results: Sequence[dict]) -> Examples:
    """The imitation examples of search results sharing one header."""
    ok = [r for r in results if r.get("status") == "ok" and r.get("header")]
    if not ok:
        raise ConfigError("no search result to imitate")
    header = Header.from_json(ok[0]["header"])
    dt = header.record_dtype
    recs, labels, weights = [], [], []
    for r in ok:
        traj = np.frombuffer(r["raw"], dtype=dt)
        recs.append(traj)
        labels.append(np.asarray(r["actions"], dtype=np.int64))
        weights.append(np.full(len(traj), 1.0))
        for f in r["flips"]:
            if not f.get("raw"):  # a site a flip exposed: no channel decision, no features
                continue
            recs.append(np.frombuffer(f["raw"], dtype=dt))
            labels.append(np.array([1 - f["from"] if f["accepted"] else f["from"]], dtype=np.int64))
            weights.append(np.array([min(max(abs(float(f["delta"])), 1.0), MAX_FLIP_WEIGHT)]))
    return Examples(header, np.concatenate(recs), np.concatenate(labels), np.concatenate(weights))


@gin.configurable(module="imitate")
def train_imitation(
    examples: Examples,
    output_dir: str,
    *,
    default_slot: str,
    vocab: Vocab | None = None,
    norm: NormConfig | None = None,
    fc_layer_params: Sequence[int] = (40, 40, 20),
    epochs: int = 20,
    batch_size: int = 512,
    learning_rate: float = 3e-3,
    seed: int = 0,
    compiler: str | None = None,
    saved_model: bool = True,
    extra: dict | None = None,
) -> dict[str, Any]:
    """Train the actor on ``examples`` (weighted cross-entropy), save it; returns a summary."""

    def cross_entropy(logits, labels, wts):
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        return tf.reduce_sum(ce * wts) / tf.reduce_sum(wts)

    y = examples.labels
    sp, loss = fit_actor(examples.header, examples.records, y, examples.weights, cross_entropy, output_dir,
                         default_slot=default_slot, vocab=vocab, norm=norm, fc_layer_params=fc_layer_params,
                         epochs=epochs, batch_size=batch_size, learning_rate=learning_rate, seed=seed,
                         compiler=compiler, saved_model=saved_model,
                         extra={"imitation": dict(extra or {}, examples=len(examples))})
    pred = sp.actor.greedy(examples.records)
    acc = float(np.sum((pred == y) * examples.weights) / np.sum(examples.weights))
    defaults = (examples.records[default_slot].reshape(len(y), -1)[:, 0] != 0).astype(np.int64)
    return {"examples": len(examples), "loss": loss, "weighted_accuracy": acc,
            "deviations_labelled": int(np.sum(y != defaults))}


def fit_actor(header: Header, records: np.ndarray, targets: np.ndarray, weights: np.ndarray, loss_fn,
              output_dir: str, *, default_slot: str, vocab: Vocab | None = None, norm: NormConfig | None = None,
              fc_layer_params: Sequence[int] = (40, 40, 20), epochs: int = 20, batch_size: int = 512,
              learning_rate: float = 3e-3, seed: int = 0, compiler: str | None = None, saved_model: bool = True,
              extra: dict | None = None):
    """The actor (the default decision an input) fitted by Adam to ``loss_fn(logits [N, 2], targets, weights)``
    (weights scaled to mean 1) and saved; returns the saved policy and the last epoch's mean loss."""
    tf.random.set_seed(seed)
    rng = np.random.default_rng(seed)
    norm = norm if norm is not None else NormConfig(with_square=True)
    if vocab is None:
        vb = VocabBuilder()
        vb.add(records)
        vocab = vb.build(1000)
    spec = PolicySpec.from_header(header, "inline", vocab_names=vocab.names(), default_slot=default_slot,
                                  keep_default=True)
    n = int(records.shape[0])
    x = numpy_observations(spec, records, n)
    tdt = tf.int64 if np.asarray(targets).dtype.kind in "iu" else tf.float32
    y = np.asarray(targets, dtype=np.int64 if tdt == tf.int64 else np.float32)
    w = (weights / weights.mean()).astype(np.float32)
    net = build_actor_network(spec, vocab, norm, fc_layer_params=tuple(fc_layer_params))
    step = adam_step(net, spec, learning_rate, loss_fn, tf.TensorSpec([None], tdt),
                     tf.TensorSpec([None], tf.float32))
    losses = [float(np.mean(epoch_losses(step, x, (y, w), batch_size, rng))) for _ in range(epochs)]
    sp = save_policy(output_dir, net, spec, vocab, norm, compiler=compiler, saved_model=saved_model, extra=extra)
    return sp, (losses[-1] if losses else float("nan"))


@dataclasses.dataclass(frozen=True)
class GateRule:
    """What a gate threshold must do on the validation split to be chosen."""

    #: no validation module may grow more than this, in % of its -Oz size
    max_module_growth_pct: float = 1.0
    #: the validation total must be at least this much smaller than -Oz's, in %: a saving below it is
    #: what picking the best of a few thresholds and rounds on a few projects finds by chance
    min_gain_pct: float = 0.1

    def admits(self, worst_module_pct: float, complete: bool) -> bool:
        """A candidate at all: every validation module compiled, none grew past the limit."""
        return complete and worst_module_pct <= self.max_module_growth_pct

    def saves(self, saving_pct: float) -> bool:
        """A saving (in % of -Oz's total) large enough to replace what is there."""
        return saving_pct > 0 and saving_pct >= self.min_gain_pct


def choose_gate(sizes_by_threshold: dict[float, dict[str, int]], default_sizes: dict[str, int],
                rule: GateRule = GateRule()) -> tuple[float, dict[str, Any]]:
    """(The gate threshold with the smallest validation total among those that meet ``rule``, else 1.0
    (always the default); the table of every threshold tried)."""
    table = {}
    for thr, sizes in sorted(sizes_by_threshold.items()):
        common = [m for m in default_sizes if m in sizes]
        d = sum(default_sizes[m] for m in common)
        p = sum(sizes[m] for m in common)
        worst = max((100.0 * (sizes[m] - default_sizes[m]) / max(default_sizes[m], 1) for m in common), default=0.0)
        table[thr] = {"size_change_pct": 100.0 * (p - d) / d if d else 0.0, "worst_module_pct": worst,
                      "modules": len(common), "missing": len(default_sizes) - len(common)}
    ok = [(v["size_change_pct"], -t, t) for t, v in table.items()
          if rule.admits(v["worst_module_pct"], v["missing"] == 0) and rule.saves(-v["size_change_pct"])]
    return (min(ok)[2] if ok else 1.0), table
