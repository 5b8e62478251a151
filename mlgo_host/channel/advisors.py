"""Advisor kinds: compiler flags, advice, default decision and the legality check of each advice
(clang fails, crashes or is undefined on illegal advice: docs/channel.md)."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from mlgo_host.channel.codec import Header, Observation
from mlgo_host.errors import AdviceError, ProtocolError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


def is_clang_driver(compiler: str) -> bool:
    """A clang driver needs ``-mllvm`` before LLVM flags; ``opt``/``llc`` take them bare."""
    base = os.path.basename(compiler)
    return "clang" in base or base.startswith("mlgo-clang")


class Advisor:
    """One decision point of the compiler served over the channel."""

    name: str = ""
    advice_name: str = ""
    #: flags that enable the advisor in release (interactive) mode
    enable_flags: tuple[str, ...] = ()
    #: the flag naming the channel base path
    channel_flag: str = ""
    #: the advice is one of a few values (counted per session), not a continuous one
    discrete: bool = True

    def flags(self, base: str, compiler: str) -> list[str]:
        bare = list(self.enable_flags) + [f"{self.channel_flag}={base}"]
        return [x for f in bare for x in ("-mllvm", f)] if is_clang_driver(compiler) else bare

    def bind(self, header: Header) -> None:
        """Check the header describes this advisor; precompute offsets."""
        if header.advice is None:
            raise ProtocolError(f"{self.name}: the header has no advice spec")
        if header.advice.name != self.advice_name:
            raise ProtocolError(f"{self.name}: the compiler asks for advice {header.advice.name!r}, expected "
                                f"{self.advice_name!r} (wrong --advisor for this channel?)")
        self.header = header

    def default_advice(self, obs: Observation) -> Any:
        raise NotImplementedError

    def validate(self, obs: Observation, advice: Any) -> None:
        raise NotImplementedError

    def default_flag_offset(self) -> int | None:
        """After :meth:`bind`: the byte offset of the int64 slot whose nonzero-ness is the default
        advice (the session's fast path reads it from the received bytes); None otherwise."""
        return None

    def __repr__(self) -> str:
        return f"<advisor {self.name}>"


class InlineAdvisor(Advisor):
    """The ML inliner: advice ``inlining_decision`` int64 [1], nonzero = inline.  The slot of the
    default decision depends on the compiler (:mod:`mlgo_host.channel.default_slot`)."""

    name = "inline"
    advice_name = "inlining_decision"
    # The ML advisor stops inlining without asking once its size estimate passes this factor of
    # the initial one (default 2); -Oz has no such stop, so with 2 the channel's "default" is not
    # -Oz on small modules.  -Oz's decisions stay below 10x; an inline-everything policy is still stopped.
    enable_flags = ("-enable-ml-inliner=release", "-inliner-interactive-include-default",
                    "-ml-advisor-size-increase-threshold=10")
    channel_flag = "-inliner-interactive-channel-base"

    def __init__(self, default_slot: str | None = None):
        #: None until problems.ready_advisor sets it for a compiler
        self.default_slot = default_slot
        self._off = -1

    def bind(self, header: Header) -> None:
        super().bind(header)
        spec = header.feature(self.default_slot)
        if spec is None or spec.ctype != "int64_t" or spec.size != 1:
            raise ProtocolError(f"inline: the header has no int64 [1] feature {self.default_slot!r} for the default decision")
        self._off = header.offset(self.default_slot)

    def default_advice(self, obs: Observation) -> int:
        o = self._off
        return 1 if int.from_bytes(obs.raw[o : o + 8], "little", signed=True) else 0

    def default_flag_offset(self) -> int | None:
        return self._off if self._off >= 0 else None

    def validate(self, obs: Observation, advice: Any) -> None:
        if advice not in (0, 1):
            raise AdviceError(f"inline: advice must be 0 or 1, got {advice!r} (observation {obs.index})")


class EvictAdvisor(Advisor):
    """Eviction: advice ``index_to_evict`` int64 [1], a column of the ``[1, W]`` candidates; the last
    column ("evict nothing") is legal only when its mask is 1."""

    name = "regalloc-evict"
    advice_name = "index_to_evict"
    enable_flags = ("-regalloc-enable-advisor=release",)
    channel_flag = "-regalloc-evict-interactive-channel-base"

    def bind(self, header: Header) -> None:
        super().bind(header)
        mask = header.feature("mask")
        if mask is None or mask.ctype != "int64_t" or len(mask.shape) == 0:
            raise ProtocolError("regalloc-evict: the header has no int64 'mask' feature")
        import numpy as np  # the inliner's default path runs without numpy

        self._np = np
        self.width = mask.shape[-1]
        self._mask_off = header.offset("mask")
        self._mask_dt = np.dtype("<i8")
        dens = header.feature("use_def_density")
        self._dens_off = header.offset("use_def_density") if dens is not None and dens.ctype == "float" else None

    def mask(self, obs: Observation) -> "np.ndarray":
        return self._np.frombuffer(obs.raw, dtype=self._mask_dt, count=self.width, offset=self._mask_off)

    def default_advice(self, obs: Observation) -> int:
        """Evict nothing when allowed, else the legal candidate with the lowest spill weight (as greedy does)."""
        m = self.mask(obs)
        w = self.width
        if m[w - 1]:
            return w - 1
        np = self._np
        legal = np.flatnonzero(m[: w - 1])
        if legal.size == 0:
            raise AdviceError(f"regalloc-evict: observation {obs.index} has no legal candidate (all masks 0)")
        if self._dens_off is None:
            return int(legal[0])
        dens = np.frombuffer(obs.raw, dtype="<f4", count=w, offset=self._dens_off)
        return int(legal[np.argmin(dens[legal])])

    def validate(self, obs: Observation, advice: Any) -> None:
        try:
            i = int(advice)
        except (TypeError, ValueError):
            raise AdviceError(f"regalloc-evict: advice {advice!r} is not an integer (observation {obs.index})") from None
        if i != advice or not 0 <= i < self.width:
            raise AdviceError(f"regalloc-evict: index {advice!r} outside [0, {self.width}) (observation {obs.index})")
        if not self.mask(obs)[i]:
            raise AdviceError(f"regalloc-evict: index {i} has mask 0 (observation {obs.index}, context {obs.context!r})")


class PriorityAdvisor(Advisor):
    """Priority: advice ``priority`` float [1], converted to ``unsigned`` (finite, in ``[0, 2^32)``)."""

    name = "regalloc-priority"
    advice_name = "priority"
    enable_flags = ("-regalloc-enable-priority-advisor=release",)
    channel_flag = "-regalloc-priority-interactive-channel-base"
    MAX = float(2**32 - 256)  # largest float32 below 2^32
    discrete = False

    def bind(self, header: Header) -> None:
        super().bind(header)
        self._size = header.offset("li_size") if header.feature("li_size") is not None else None

    def default_advice(self, obs: Observation) -> float:
        """The clamped ``li_size`` (the compiler sends no priority of its own: an approximation of greedy's order)."""
        if self._size is None:
            return 0.0
        o = self._size
        v = int.from_bytes(obs.raw[o : o + 8], "little", signed=True)
        return float(min(max(v, 0), 2**24))

    def validate(self, obs: Observation, advice: Any) -> None:
        try:
            v = float(advice)
        except (TypeError, ValueError):
            raise AdviceError(f"regalloc-priority: advice {advice!r} is not a number (observation {obs.index})") from None
        if not math.isfinite(v) or not 0.0 <= v <= self.MAX:
            raise AdviceError(f"regalloc-priority: priority {v!r} not finite in [0, 2^32) (observation {obs.index})")


ADVISORS = {c.name: c for c in (InlineAdvisor, EvictAdvisor, PriorityAdvisor)}


def get_advisor(name: str | Advisor) -> Advisor:
    """A fresh advisor by name."""
    if isinstance(name, Advisor):
        return name
    try:
        return ADVISORS[name]()
    except KeyError:
        raise ValueError(f"unknown advisor {name!r}; choose from {', '.join(ADVISORS)}") from None
