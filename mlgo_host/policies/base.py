"""The policy interface: bound to a session's header first (to precompute offsets), then ``act``
once per decision, in the compiler's critical path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from mlgo_host.channel.advisors import Advisor
    from mlgo_host.channel.codec import Header, Observation


class Policy:
    """Subclasses implement :meth:`act`; stochastic ones also :meth:`act_logp` (for PPO)."""

    #: a short name used in reports ("default", "never", a saved policy's dir name)
    name: str = "policy"
    #: True when act() samples (training); False for greedy/heuristic policies
    stochastic: bool = False

    def bind(self, header: "Header", advisor: "Advisor") -> None:
        self.header = header
        self.advisor = advisor

    def act(self, obs: "Observation") -> Any:
        raise NotImplementedError

    def act_logp(self, obs: "Observation") -> tuple[Any, float]:
        return self.act(obs), 0.0

    def for_language(self, language: str | None) -> "Policy":
        """The policy answering a compile of ``language`` ("C", "C++", None: unknown)."""
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"
