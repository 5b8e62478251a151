"""A model of each decision's effect, learned from measured flips.

Rows: the flip-effect table's training-split entries
(:mod:`mlgo_host.search.effects`: flips alone from the default) and the
search rounds' flips (:mod:`mlgo_host.training.search_loop`: flips around
the policy of the round), each a feature record, the action it flipped from
and the bytes the flip changed.  Only flips the compiler applied count.

The target is the same for both actions: **the bytes inlining saves** at
the decision, ``t = size(not inlined) - size(inlined)``: a flip from
``not inline`` changed the object by ``-t``, one from ``inline`` by ``t``.
The network is the project's actor (:func:`~mlgo_host.learning.imitate.fit_actor`,
the default decision an input), read as a regression: its logit difference
``d = logit[1] - logit[0]`` predicts ``slog(t) = sign(t) * log1p(|t|)``
(bytes span five orders of magnitude; the log keeps a few huge flips from
owning the fit while the weights, the bytes at stake, keep them important).

Deployed, ``d`` goes through the gate the imitation policy already has
(:class:`~mlgo_host.policies.actor.NumpyPolicy`): the default is left only
where the model predicts the flip saves more than ``tau`` bytes, i.e. ``d``
beyond ``log1p(tau)``, which is gate probability ``sigmoid(log1p(tau))``.
So an effect model is a normal saved policy (numpy ``actor.npz``, loadable
by ``--policy DIR``); ``metadata.json`` says what its output means
(``extra.effect_model``) and its gate carries ``tau_bytes``.
"""

from __future__ import annotations

import math
import os
import pickle
from typing import Any, Iterable, Sequence

import numpy as np

from mlgo_host.channel.codec import Header
from mlgo_host.errors import ConfigError
from mlgo_host.learning.imitate import Examples, fit_actor

#: a flip's weight: the bytes at stake, clipped (one huge flip must not be the whole loss)
MAX_WEIGHT = 4096.0


def bytes_saved_by_inlining(delta: np.ndarray, from_action: np.ndarray) -> np.ndarray:
    """``t`` of each flip (see the module docstring)."""
    return np.where(np.asarray(from_action) == 1, delta, -np.asarray(delta)).astype(np.float64)


def slog(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.log1p(np.abs(x))


def gate_of_tau(tau: float) -> float:
    """The gate probability that leaves the default only where the predicted
    saving exceeds ``tau`` bytes."""
    return 1.0 / (1.0 + math.exp(-math.log1p(max(float(tau), 0.0))))


def tau_of_gate(gate: float) -> float:
    g = min(max(float(gate), 0.5), 1.0 - 1e-12)
    return math.expm1(math.log(g / (1.0 - g)))


# -- rows --------------------------------------------------------------------------


def flips_of_table(entries: Iterable[dict], splits: Sequence[str] = ("train",)) -> list[tuple[dict, dict]]:
    """(entry, flip) of the table's entries in ``splits`` (applied flips)."""
    return [(e, f) for e in entries if e["status"] == "ok" and e["split"] in splits
            for f in e["flips"] if f["applied"] and f.get("raw")]


def flips_of_rounds(paths: Sequence[str], allowed: set[str]) -> list[tuple[dict, dict]]:
    """(result, flip) of search rounds' pickles, for modules in ``allowed``
    only (a round's module outside it is refused: a choice must not read a
    validation or held-out module)."""
    out = []
    for p in paths:
        with open(p, "rb") as f:
            results = pickle.load(f)
        for r in results:
            if r.get("status") != "ok":
                continue
            if r["name"] not in allowed:
                raise ConfigError(f"{os.path.basename(p)}: module {r['name']!r} is not in the training split")
            out += [(r, fl) for fl in r["flips"] if fl.get("raw") and fl.get("applied")]
    return out


def effect_examples(pairs: Sequence[tuple[dict, dict]], max_weight: float = MAX_WEIGHT) -> "EffectRows":
    """Feature records, flipped-from actions, deltas and weights of (source, flip) pairs sharing one header."""
    if not pairs:
        raise ConfigError("no measured flip to learn from")
    header = Header.from_json(pairs[0][0]["header"])
    dt = header.record_dtype
    recs = np.frombuffer(b"".join(f["raw"] for _, f in pairs), dtype=dt)
    frm = np.array([f["from"] for _, f in pairs], dtype=np.int64)
    delta = np.array([f["delta"] for _, f in pairs], dtype=np.float64)
    return EffectRows(header, recs, frm, delta, np.clip(np.abs(delta), 1.0, max_weight),
                      [src["name"] for src, _ in pairs])


class EffectRows:
    """Measured flips: records, the action flipped from, the change, the weight, the module."""

    def __init__(self, header: Header, records: np.ndarray, from_action: np.ndarray, delta: np.ndarray,
                 weights: np.ndarray, modules: list[str]):
        self.header, self.records, self.from_action = header, records, from_action
        self.delta, self.weights, self.modules = delta, weights, modules

    def __len__(self) -> int:
        return int(self.delta.shape[0])

    def __add__(self, other: "EffectRows") -> "EffectRows":
        return EffectRows(self.header, np.concatenate([self.records, other.records]),
                          np.concatenate([self.from_action, other.from_action]),
                          np.concatenate([self.delta, other.delta]), np.concatenate([self.weights, other.weights]),
                          self.modules + other.modules)

    @property
    def saved(self) -> np.ndarray:
        return bytes_saved_by_inlining(self.delta, self.from_action)

    def as_imitation(self) -> Examples:
        """The same flips as the imitation's examples: the better action
        (the flipped one when it shrank the object), weight the bytes at stake."""
        labels = np.where(self.delta < 0, 1 - self.from_action, self.from_action)
        return Examples(self.header, self.records, labels.astype(np.int64), self.weights)


# -- training ------------------------------------------------------------------------


def _loss(kind: str, huber_delta: float = 1.0):
    """A regression of the logit difference on the target (slog bytes)."""
    import tensorflow as tf

    def loss(logits, target, wts):
        d = logits[:, 1] - logits[:, 0]
        err = d - target
        if kind == "huber":
            a = tf.abs(err)
            per = tf.where(a <= huber_delta, 0.5 * err * err, huber_delta * (a - 0.5 * huber_delta))
        elif kind == "mse":
            per = err * err
        else:
            raise ConfigError(f"effect loss must be 'huber' or 'mse', got {kind!r}")
        return tf.reduce_sum(per * wts) / tf.reduce_sum(wts)

    return loss


#: example weights: the bytes at stake (clipped), their square root, or none
WEIGHTINGS = ("bytes", "sqrt", "none")


def _weights(rows: EffectRows, weighting: str) -> np.ndarray:
    if weighting not in WEIGHTINGS:
        raise ConfigError(f"effect weighting must be one of {', '.join(WEIGHTINGS)}, got {weighting!r}")
    return {"bytes": rows.weights, "sqrt": np.sqrt(rows.weights), "none": np.ones_like(rows.weights)}[weighting]


def train_effect_model(rows: EffectRows, output_dir: str, *, default_slot: str, loss: str = "huber",
                       weighting: str = "bytes", fc_layer_params: Sequence[int] = (40, 40, 20), epochs: int = 20,
                       seed: int = 0, compiler: str | None = None, extra: dict | None = None, **kw) -> dict[str, Any]:
    """Fit the effect regression (``fc_layer_params=()``: linear) on
    ``rows`` and save it as a policy (no gate yet: :func:`set_tau`)."""
    target = slog(rows.saved).astype(np.float32)
    info = {"target": "signed log1p of the bytes inlining saves (logit[1] - logit[0])", "loss": loss,
            "weighting": weighting, "rows": len(rows), **(extra or {})}
    sp, last = fit_actor(rows.header, rows.records, target, _weights(rows, weighting), _loss(loss), output_dir,
                         default_slot=default_slot, fc_layer_params=fc_layer_params, epochs=epochs, seed=seed,
                         compiler=compiler, saved_model=False, extra={"effect_model": info}, **kw)
    return {"rows": len(rows), "loss": last, **fit_report(sp.actor, rows)}


def predicted_saving(actor, records: np.ndarray) -> np.ndarray:
    """The bytes inlining saves, as the model predicts them."""
    lg = actor.logits(records)
    d = lg[:, 1] - lg[:, 0]
    return np.sign(d) * np.expm1(np.abs(d))


def fit_report(actor, rows: EffectRows, taus: Sequence[float] = (0.0, 8.0, 32.0)) -> dict[str, Any]:
    """How well the model ranks the flips of ``rows``: for flips it would
    take at each ``tau``, how many and the bytes they measured (a table's
    flips are alone from the default, so their sum is what taking them one
    by one would give)."""
    pred = predicted_saving(actor, rows.records)
    # the predicted change of flipping: -t from not inlined, t from inlined
    pflip = np.where(rows.from_action == 1, pred, -pred)
    out = {"weighted_sign_accuracy": float(np.sum((np.sign(pflip) == np.sign(rows.delta)) * rows.weights)
                                           / np.sum(rows.weights))}
    for tau in taus:
        take = pflip < -tau
        out[f"tau{tau:g}"] = {"flips": int(take.sum()), "bytes": int(rows.delta[take].sum())}
    return out


def set_tau(policy_dir: str, tau: float, **info) -> None:
    """Gate an effect model at ``tau`` bytes (see the module docstring)."""
    from mlgo_host.policies.saved import set_gate

    set_gate(policy_dir, gate_of_tau(tau), tau_bytes=float(tau), **info)
