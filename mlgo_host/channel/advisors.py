"""Advisor kinds: the compiler flags, the advice, the default decision and
the legality check of each advice before it is sent.

Each check exists because the compiler crashes or silently misbehaves on
illegal advice (docs/channel.md, "How a compiler hangs or breaks"): an eviction index on a ``mask==0`` slot
makes clang fail with "ran out of registers", an index out of the width
segfaults, a priority outside ``[0, 2^32)`` is undefined when converted to
``unsigned``.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from mlgo_host.channel.codec import Header, Observation
from mlgo_host.errors import AdviceError, ProtocolError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


def is_clang_driver(compiler: str) -> bool:
    """True when ``compiler`` is a clang driver (flags need ``-mllvm``);
    ``opt``/``llc`` take LLVM flags bare."""
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

    def flags(self, base: str, compiler: str) -> list[str]:
        bare = list(self.enable_flags) + [f"{self.channel_flag}={base}"]
        if is_clang_driver(compiler):
            out: list[str] = []
            for f in bare:
                out += ["-mllvm", f]
            return out
        return bare

    def bind(self, header: Header) -> None:
        """Check the header describes this advisor; precompute offsets."""
        if header.advice is None:
            raise ProtocolError(f"{self.name}: the header has no advice spec")
        if header.advice.name != self.advice_name:
            raise ProtocolError(
                f"{self.name}: the compiler asks for advice {header.advice.name!r}, expected {self.advice_name!r} "
                "(wrong --advisor for this channel?)"
            )
        self.header = header

    def num_actions(self, header: Header) -> int:
        raise NotImplementedError

    def default_advice(self, obs: Observation) -> Any:
        raise NotImplementedError

    def validate(self, obs: Observation, advice: Any) -> None:
        raise NotImplementedError

    def default_flag_offset(self) -> int | None:
        """After :meth:`bind`: when the default advice is 1 if an int64 slot
        of the observation is nonzero and 0 otherwise, that slot's byte offset
        (the session's default fast path then reads it straight from the
        received bytes); None when the default needs more than that."""
        return None

    def __repr__(self) -> str:
        return f"<advisor {self.name}>"


#: the ML advisor's size-increase stop, raised from 2 (see InlineAdvisor.enable_flags)
SIZE_INCREASE_STOP = 10


class InlineAdvisor(Advisor):
    """The ML inliner: advice ``inlining_decision`` int64 [1], nonzero = inline.

    The default decision comes through ``-inliner-interactive-include-default``.
    clang-19 writes it into the ``callee_basic_block_count`` slot and leaves
    ``inlining_default`` at 0 (fixed upstream later): which slot holds it is
    detected per compiler by :mod:`mlgo_host.channel.default_slot`, and set
    with :meth:`set_default_slot` before the session starts.
    """

    name = "inline"
    advice_name = "inlining_decision"
    # The ML advisor stops inlining (answers "no" without asking) once its
    # estimate of the module's native size passes this factor of the initial
    # one (default 2); -Oz's heuristic has no such stop, so on small modules
    # the channel's "default" was not -Oz (libsass stylesheet: 244 B against
    # 191, clang-19 and clang-22).  Raised to SIZE_INCREASE_STOP: -Oz's own
    # decisions stay below it, and a policy that inlines everything is still
    # stopped (always-inline on a generated module: 4 s and 117 KB at 10x,
    # 100 s and 2.1 MB without a stop, 1.6 s and 28 KB at 2x).
    enable_flags = ("-enable-ml-inliner=release", "-inliner-interactive-include-default",
                    f"-ml-advisor-size-increase-threshold={SIZE_INCREASE_STOP:g}")
    channel_flag = "-inliner-interactive-channel-base"

    def __init__(self, default_slot: str | None = None):
        #: None = not known yet: problems.ready_advisor sets it for a compiler
        self.default_slot = default_slot
        self._off = -1

    def set_default_slot(self, slot: str) -> None:
        self.default_slot = slot

    def bind(self, header: Header) -> None:
        super().bind(header)
        spec = header.feature(self.default_slot)
        if spec is None or spec.ctype != "int64_t" or spec.size != 1:
            raise ProtocolError(f"inline: the header has no int64 [1] feature {self.default_slot!r} for the default decision")
        self._off = header.offset(self.default_slot)

    def num_actions(self, header: Header) -> int:
        return 2

    def default_advice(self, obs: Observation) -> int:
        o = self._off
        return 1 if int.from_bytes(obs.raw[o : o + 8], "little", signed=True) else 0

    def default_flag_offset(self) -> int | None:
        return self._off if self._off >= 0 else None

    def validate(self, obs: Observation, advice: Any) -> None:
        if advice not in (0, 1):
            raise AdviceError(f"inline: advice must be 0 or 1, got {advice!r} (observation {obs.index})")


class EvictAdvisor(Advisor):
    """Register-allocation eviction: advice ``index_to_evict`` int64 [1], a
    column of the ``[1, W]`` candidate tensors; W is read from the header. The
    last column is the live range being allocated ("evict nothing"), legal only
    when its mask is 1 (the compiler masks it when it must evict)."""

    name = "regalloc-evict"
    advice_name = "index_to_evict"
    enable_flags = ("-regalloc-enable-advisor=release",)
    channel_flag = "-regalloc-evict-interactive-channel-base"

    def bind(self, header: Header) -> None:
        super().bind(header)
        mask = header.feature("mask")
        if mask is None or mask.ctype != "int64_t" or len(mask.shape) == 0:
            raise ProtocolError("regalloc-evict: the header has no int64 'mask' feature")
        import numpy as np  # not at module import: the inliner's default path runs without numpy

        self._np = np
        self.width = mask.shape[-1]
        self._mask_off = header.offset("mask")
        self._mask_dt = np.dtype("<i8")
        dens = header.feature("use_def_density")
        self._dens_off = header.offset("use_def_density") if dens is not None and dens.ctype == "float" else None

    def num_actions(self, header: Header) -> int:
        mask = header.feature("mask")
        if mask is None:
            raise ProtocolError("regalloc-evict: the header has no 'mask' feature")
        return mask.shape[-1]

    def mask(self, obs: Observation) -> "np.ndarray":
        return self._np.frombuffer(obs.raw, dtype=self._mask_dt, count=self.width, offset=self._mask_off)

    def default_advice(self, obs: Observation) -> int:
        """Evict nothing when allowed; otherwise the legal candidate with the
        lowest spill weight (what the greedy allocator's heuristic prefers)."""
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
    """Register-allocation priority: advice ``priority`` float [1]. The compiler
    converts it to ``unsigned``: it must be finite and in ``[0, 2^32)``."""

    name = "regalloc-priority"
    advice_name = "priority"
    enable_flags = ("-regalloc-enable-priority-advisor=release",)
    channel_flag = "-regalloc-priority-interactive-channel-base"
    MAX = float(2**32 - 256)  # largest float32 below 2^32

    def bind(self, header: Header) -> None:
        super().bind(header)
        self._size = header.offset("li_size") if header.feature("li_size") is not None else None

    def num_actions(self, header: Header) -> int:
        return 0  # continuous

    def default_advice(self, obs: Observation) -> float:
        """The live range's size (``li_size``), clamped: larger ranges first,
        like the greedy allocator's size-based order. The compiler does not send
        its own priority, so this is an approximation of the default."""
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


#: the channel half of each problem (channel/problems.py), by name
ADVISORS = {c.name: c for c in (InlineAdvisor, EvictAdvisor, PriorityAdvisor)}


def get_advisor(name: str | Advisor) -> Advisor:
    """A fresh advisor by name (``inline``, ``regalloc-evict``, ``regalloc-priority``)."""
    if isinstance(name, Advisor):
        return name
    try:
        return ADVISORS[name]()
    except KeyError:
        raise ValueError(f"unknown advisor {name!r}; choose from {', '.join(ADVISORS)}") from None
