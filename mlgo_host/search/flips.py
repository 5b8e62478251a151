"""Which flips of a module to measure first (:func:`flip_scores`): the measured winner patterns, a flip-gain model
fitted on the flips measured so far, or a trained policy's probability of the other action, which leads when given."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from mlgo_host.channel.codec import Header

#: features the pattern prior reads (inliner, present in every clang >= 17 header)
_USERS, _COST, _MULTI = "callee_users", "cost_estimate", "is_multiple_blocks"


def _log_features(feats: np.ndarray, names: Sequence[str]) -> np.ndarray:
    """Signed log1p of each named scalar feature: the model's inputs."""
    cols = [np.asarray(feats[n], dtype=np.float64).reshape(len(feats), -1)[:, 0] for n in names]
    x = np.stack(cols, axis=1) if cols else np.zeros((len(feats), 0))
    return np.sign(x) * np.log1p(np.abs(x))


@dataclasses.dataclass
class FlipGainModel:
    """P(a flip shrinks the object | observation, base action): logistic regression, one weight
    vector per base action (inline -> no and no -> inline gain for different reasons)."""

    names: list[str]
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray  # [2, 1 + len(names)]: bias first, per base action

    def predict(self, feats: np.ndarray, base_actions: np.ndarray) -> np.ndarray:
        x = (_log_features(feats, self.names) - self.mean) / self.scale
        w = self.weights[np.asarray(base_actions, dtype=np.int64).clip(0, 1)]
        z = w[:, 0] + np.einsum("ij,ij->i", x, w[:, 1:])
        return 1.0 / (1.0 + np.exp(-z))

    def to_json(self) -> dict:
        return {"names": list(self.names), "mean": self.mean.tolist(), "scale": self.scale.tolist(),
                "weights": self.weights.tolist()}

    @classmethod
    def from_json(cls, d: dict) -> "FlipGainModel":
        return cls(list(d["names"]), np.asarray(d["mean"]), np.asarray(d["scale"]), np.asarray(d["weights"]))

    @classmethod
    def fit(cls, feats: np.ndarray, base_actions: np.ndarray, gained: np.ndarray, names: Sequence[str],
            l2: float = 1.0, steps: int = 300, lr: float = 0.5) -> "FlipGainModel":
        """Fit on tried flips: ``gained`` is 1 where the flip shrank the object."""
        names = list(names)
        x = _log_features(feats, names)
        mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-6
        x = (x - mean) / scale
        w = np.zeros((2, 1 + len(names)))
        for a in (0, 1):
            sel = np.asarray(base_actions) == a
            if sel.sum() < 8:
                continue
            xa = np.hstack([np.ones((int(sel.sum()), 1)), x[sel]])
            ya = np.asarray(gained, dtype=np.float64)[sel]
            for _ in range(steps):  # full-batch gradient descent: a few thousand rows at most
                p = 1.0 / (1.0 + np.exp(-(xa @ w[a])))
                w[a] -= lr * (xa.T @ (p - ya) / len(ya) + l2 * np.r_[0.0, w[a, 1:]] / len(ya))
        return cls(names, mean, scale, w)


def pattern_scores(feats: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """The measured winner patterns, as a score in [0, 1] per decision."""
    names = feats.dtype.names or ()
    n = len(actions)
    if not all(k in names for k in (_USERS, _COST, _MULTI)):
        return np.zeros(n)
    users, cost, multi = (feats[k].reshape(n, -1)[:, 0].astype(np.float64) for k in (_USERS, _COST, _MULTI))
    refused = actions == 0
    # inline where the default refused: few callee users, a cost just above the threshold, several blocks
    s_in = 0.3 * (users <= 2) + 0.2 * (multi > 0) + 0.5 / (1.0 + np.maximum(cost, 0.0) / 60.0)
    # don't inline a tiny callee with two or more users; never first where the inliner's cost is
    # negative (a bonus, e.g. the last call of a static function): leaving such a call out rarely pays
    s_out = 0.6 * (users >= 2) + 0.4 * ((cost >= 0) & (cost < 30)) - 0.6 * (cost < 0)
    return np.where(refused, s_in, s_out)


def flip_scores(feats: np.ndarray, actions: np.ndarray, *, model: FlipGainModel | None = None,
                prior_flip_p: np.ndarray | None = None) -> np.ndarray:
    """Where to flip first (higher = earlier): ``prior_flip_p`` leads when given, then the model (else the patterns)."""
    s = model.predict(feats, actions) if model is not None else pattern_scores(feats, actions)
    if prior_flip_p is not None:
        s = PRIOR_WEIGHT * np.asarray(prior_flip_p, dtype=np.float64) + s
    return s


#: the trained prior's weight against the patterns' (or the fitted model's) score in [0, 1]
PRIOR_WEIGHT = 4.0


def fit_flip_model(results: Sequence[dict], min_flips: int = 32) -> FlipGainModel | None:
    """The model fitted on every flip of ``results`` (sharing one header), or None below ``min_flips``."""
    flips = [f for r in results for f in r.get("flips", ()) if f.get("raw")]  # exposed sites have no features
    if len(flips) < min_flips:
        return None
    header = Header.from_json(next(r["header"] for r in results if r.get("header")))
    feats = np.concatenate([np.frombuffer(f["raw"], dtype=header.record_dtype) for f in flips])
    names = [s.name for s in header.features if s.size == 1 and s.name != (header.advice.name if header.advice else "")]
    return FlipGainModel.fit(feats, np.array([f["from"] for f in flips]),
                             np.array([f["accepted"] for f in flips], dtype=np.float64), names)
