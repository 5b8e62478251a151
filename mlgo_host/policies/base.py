"""The policy interface: an observation in, an advice value out.

A policy is bound to one session's header (and advisor) before the first
decision, so it can precompute offsets and views; ``act`` is then called once
per decision in the compiler's critical path and must stay cheap (a few µs).
Nothing here imports TensorFlow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from mlgo_host.channel.advisors import Advisor
    from mlgo_host.channel.codec import Header, Observation


class Policy:
    """Base class. Subclasses implement :meth:`act`; stochastic ones also
    :meth:`act_logp` (the advice and the log-probability of having chosen it,
    which PPO needs)."""

    #: a short name used in reports ("default", "never", a saved policy's dir name)
    name: str = "policy"
    #: True when act() samples (training); False for greedy/heuristic policies
    stochastic: bool = False

    def bind(self, header: "Header", advisor: "Advisor") -> None:
        """Called once per session, after the header arrived."""
        self.header = header
        self.advisor = advisor

    def act(self, obs: "Observation") -> Any:
        raise NotImplementedError

    def act_logp(self, obs: "Observation") -> tuple[Any, float]:
        """Advice and its log-probability under this policy. Deterministic
        policies return log-probability 0."""
        return self.act(obs), 0.0

    def for_language(self, language: str | None) -> "Policy":
        """The policy that answers a compile of ``language`` ("C", "C++";
        None: not known): itself, unless it holds one per language."""
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"
