"""An episode: every decision of one compile, as the trainer needs it. Observations stay raw bytes,
decoded in one ``np.frombuffer`` when the learner asks: the hot loop only appends."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from mlgo_host.channel.codec import Header


@dataclasses.dataclass
class Episode:
    header: Header
    raw: bytes
    actions: np.ndarray
    logps: np.ndarray
    contexts: list[str] = dataclasses.field(default_factory=list)

    @property
    def n(self) -> int:
        return int(self.actions.shape[0])

    def features(self) -> np.ndarray:
        """Structured array of N records (fields = the header's features)."""
        return np.frombuffer(self.raw, dtype=self.header.record_dtype, count=self.n)

    def to_state(self) -> dict[str, Any]:
        """A picklable, TF-free form (for worker -> learner transfer)."""
        return {"header": self.header.to_json(), "raw": self.raw, "actions": self.actions,
                "logps": self.logps, "contexts": self.contexts}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> "Episode":
        return cls(Header.from_json(d["header"]), d["raw"], d["actions"], d["logps"], list(d["contexts"]))


@dataclasses.dataclass(slots=True)
class EpisodeRecorder:
    """Appends decisions during a session; :meth:`finish` builds the Episode."""

    raws: list[bytes] = dataclasses.field(default_factory=list)
    actions: list[Any] = dataclasses.field(default_factory=list)
    logps: list[float] = dataclasses.field(default_factory=list)
    contexts: list[str] = dataclasses.field(default_factory=list)

    def add(self, obs, action, logp: float) -> None:
        self.raws.append(obs.raw)
        self.actions.append(action)
        self.logps.append(logp)
        self.contexts.append(obs.context)

    def finish(self, header: Header) -> Episode:
        adv = header.advice
        dt = adv.dtype if adv is not None else np.int64
        return Episode(header, b"".join(self.raws), np.asarray(self.actions, dtype=dt).reshape(len(self.actions)),
                       np.asarray(self.logps, dtype=np.float32), self.contexts)
