"""The outline rule: ``-Oz``'s inlining decisions, except an inlining of a callee a logistic model
expects to be better left out everywhere (an *outline group*, which imitating single decisions
does not learn).  Never inlining more than ``-Oz``, it cannot start a cascade.
``bench/outline_model.py`` fits a model (JSON ``mlgo_host.outline/1``).
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from mlgo_host.errors import ConfigError
from mlgo_host.formats import read_format_json
from mlgo_host.fsutil import atomic_write_json
from mlgo_host.policies.base import Policy

FORMAT = "mlgo_host.outline/1"
#: the features that say whether a site may be an outline group's at all
USERS, LAST_CALL = "callee_users", "last_call_to_static_bonus"


def log_scaled(x: np.ndarray, log: np.ndarray) -> np.ndarray:
    """``x`` with the columns ``log`` marks as sign(x)·log(1 + |x|) (counts and costs span decades)."""
    return np.where(log, np.sign(x) * np.log1p(np.abs(x)), x)


@dataclasses.dataclass(frozen=True)
class OutlineModel:
    features: tuple[str, ...]
    log: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    weights: np.ndarray
    bias: float
    threshold: float
    trained_on: dict = dataclasses.field(default_factory=dict)

    def logit(self, x: np.ndarray):
        """The model's log-odds of one feature vector ``x`` (its features' order), or of each row of a matrix."""
        return ((log_scaled(x, self.log) - self.mean) / self.std) @ self.weights + self.bias

    def probability(self, x: np.ndarray) -> float:
        z = float(self.logit(x))
        return 1.0 / (1.0 + math.exp(-z)) if z > -500 else 0.0

    def probabilities(self, records: np.ndarray) -> np.ndarray:
        """:meth:`probability` of each of ``records`` (a structured array with the model's features)."""
        x = np.stack([np.asarray(records[f], dtype=float).reshape(len(records)) for f in self.features], axis=1)
        return 1.0 / (1.0 + np.exp(-np.clip(self.logit(x), -500.0, 500.0)))

    def refuses(self, records: np.ndarray, default: np.ndarray) -> np.ndarray:
        """Which of ``records`` are inlinings (``default``: -Oz's decisions) the rule may refuse: of a
        callee with at least two uses, not its last call to a static callee (as
        :meth:`OutlinePolicy.act` tells one record)."""
        users = np.asarray(records[USERS]).reshape(len(records))
        last = np.asarray(records[LAST_CALL]).reshape(len(records))
        return (np.asarray(default).reshape(len(records)) == 1) & (users >= 2) & (last == 0)

    def save(self, path: str | os.PathLike) -> None:
        atomic_write_json(os.fspath(path), {
            "format": FORMAT, "features": list(self.features), "log": self.log.tolist(),
            "mean": self.mean.tolist(), "std": self.std.tolist(), "weights": self.weights.tolist(),
            "bias": self.bias, "threshold": self.threshold, "trained_on": self.trained_on})

    @classmethod
    def load(cls, path: str | os.PathLike) -> "OutlineModel":
        doc = read_format_json(path, FORMAT, "outline model")
        try:
            feats = tuple(str(f) for f in doc["features"])
            arrays = [np.asarray(doc[k], dtype=float) for k in ("log", "mean", "std", "weights")]
            model = cls(feats, arrays[0].astype(bool), *arrays[1:], float(doc["bias"]), float(doc["threshold"]),
                        dict(doc.get("trained_on") or {}))
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{os.fspath(path)}: bad outline model: {e}") from None
        if any(a.shape != (len(feats),) for a in (model.log, model.mean, model.std, model.weights)) \
                or not np.all(model.std > 0):
            raise ConfigError(f"{os.fspath(path)}: bad outline model: one value per feature, every std > 0")
        return model


class OutlinePolicy(Policy):
    """``-Oz``'s decision, except an inlining of a callee with at least two uses that the model refuses."""

    def __init__(self, model: OutlineModel, name: str = "outline"):
        self.model, self.name = model, name

    def bind(self, header, advisor) -> None:
        missing = [f for f in (*self.model.features, USERS, LAST_CALL) if header.feature(f) is None]
        if missing:
            raise ConfigError(f"outline policy {self.name!r}: the compiler sends no {', '.join(missing)} "
                              "(an inliner policy on another advisor?)")
        super().bind(header, advisor)
        self._default = advisor.default_advice
        self._read = header.first_values((USERS, LAST_CALL, *self.model.features))

    def act(self, obs):
        d = self._default(obs)
        if d != 1:
            return d
        users, last_call, *x = self._read(obs.raw)
        if users < 2 or last_call != 0:
            return d
        return 0 if self.model.probability(np.array(x, dtype=float)) > self.model.threshold else d


class ByLanguage(Policy):
    """One policy per source language; ``base`` for the others and for an unknown language."""

    def __init__(self, base: Policy, parts: dict[str, Policy]):
        self.base, self.parts = base, dict(parts)
        self.name = base.name
        self.stochastic = base.stochastic

    def for_language(self, language: str | None) -> Policy:
        return self.parts.get(language, self.base) if language else self.base

    def bind(self, header, advisor) -> None:
        self.base.bind(header, advisor)

    def act(self, obs):
        return self.base.act(obs)

    def act_logp(self, obs):
        return self.base.act_logp(obs)
