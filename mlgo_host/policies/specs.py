"""Observation and action specs of a learned policy, derived from the compiler's header: every
feature with its role (``input``, ``mask``: eviction's column mask, or ``discard`` with the reason).

Features are looked up *by name* in a later header, so a clang with more features works unchanged.
A name does not fix a feature's *meaning* (the inliner's default-decision slot depends on the
compiler, :mod:`mlgo_host.channel.default_slot`): an inliner spec records the slot it was made
with, and on the other kind of compiler its inputs are bound by meaning (:meth:`PolicySpec.bind_inputs`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
from typing import Any, Iterable, Mapping

from mlgo_host.channel.codec import Header
from mlgo_host.channel.default_slot import BUGGY_SLOT, FIXED_SLOT, SLOTS, feature_meanings
from mlgo_host.channel.problems import BINARY, LEARNABLE, MASKED_CHOICE, PROBLEMS, get_problem
from mlgo_host.channel.spec import FORMATS, c_types
from mlgo_host.errors import ConfigError

INPUT, MASK, DISCARD = "input", "mask", "discard"
MASK_FEATURE = "mask"

#: set to 1 (``--allow-changed-inputs``) to serve a policy with lost inputs from their own slots
ALLOW_CHANGED_INPUTS = "MLGO_ALLOW_CHANGED_INPUTS"


def changed_inputs_allowed() -> bool:
    return os.environ.get(ALLOW_CHANGED_INPUTS, "") not in ("", "0")


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """One observation tensor as the compiler described it, and its role."""

    name: str
    ctype: str
    shape: tuple[int, ...]
    role: str = INPUT

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def dtype(self):
        return c_types()[self.ctype]

    @property
    def tf_shape(self) -> tuple[int, ...]:
        """Shape without the leading 1s (``[1, W]`` -> ``(W,)``), as ml-compiler-opt's signature specs."""
        return tuple(itertools.dropwhile(lambda d: d == 1, self.shape))

    def to_json(self) -> dict:
        return {"name": self.name, "type": self.ctype, "shape": list(self.shape), "role": self.role}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FeatureSpec":
        try:
            spec = cls(str(d["name"]), str(d["type"]), tuple(int(x) for x in d["shape"]), str(d.get("role", INPUT)))
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"bad feature spec {d!r}: {e}") from None
        if spec.ctype not in FORMATS or spec.role not in (INPUT, MASK, DISCARD):
            raise ConfigError(f"bad feature spec {d!r}: unknown type or role")
        return spec


@dataclasses.dataclass(frozen=True)
class ActionSpec:
    name: str
    ctype: str
    kind: str
    num_actions: int

    def to_json(self) -> dict:
        return {"name": self.name, "type": self.ctype, "kind": self.kind, "num_actions": self.num_actions}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ActionSpec":
        try:
            return cls(str(d["name"]), str(d["type"]), str(d["kind"]), int(d["num_actions"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"bad action spec {d!r}: {e}") from None


@dataclasses.dataclass(frozen=True)
class InputBinding:
    """A spec's inputs bound by meaning to one compiler's features.  ``sources``: input -> the feature
    feeding it, where not its own name; ``lost``: ``(input, meaning when trained, meaning here)``
    for inputs whose meaning no feature carries."""

    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)
    lost: tuple[tuple[str, str, str], ...] = ()

    def source(self, name: str) -> str:
        return self.sources.get(name, name)


#: no renaming (served by the kind of compiler the spec was made with)
SAME_NAMES = InputBinding()


@dataclasses.dataclass(frozen=True)
class PolicySpec:
    """What a learned policy reads and answers."""

    advisor: str
    features: tuple[FeatureSpec, ...]
    action: ActionSpec
    #: eviction: number of columns W (None for the inliner)
    width: int | None = None
    #: discarded feature -> why
    discarded: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: inliner: the feature that carried the compiler's default decision when
    #: the spec was made (None: not recorded; see :meth:`trained_slot`)
    default_slot: str | None = None

    @property
    def inputs(self) -> tuple[FeatureSpec, ...]:
        """Input features in network order: by name (as ``tf.nest.flatten`` orders the observation)."""
        return tuple(sorted((f for f in self.features if f.role == INPUT), key=lambda f: f.name))

    @property
    def default_input(self) -> str | None:
        """The default-decision slot when the policy takes it as an input (imitating policies do), else None."""
        f = self.feature(self.default_slot) if self.default_slot else None
        return f.name if f is not None and f.role == INPUT else None

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.inputs)

    @property
    def mask(self) -> FeatureSpec | None:
        return next((f for f in self.features if f.role == MASK), None)

    def feature(self, name: str) -> FeatureSpec | None:
        return next((f for f in self.features if f.name == name), None)

    @property
    def num_actions(self) -> int:
        return self.action.num_actions

    def trained_slot(self) -> str | None:
        """The default-decision slot of the compiler the spec was made with, else inferred from the
        roles for specs that do not record it; None for regalloc or when nothing tells."""
        if not PROBLEMS[self.advisor].detects_default_slot:
            return None
        if self.default_slot:
            return self.default_slot
        if BUGGY_SLOT in self.discarded and "default decision" in self.discarded[BUGGY_SLOT]:
            return BUGGY_SLOT
        return FIXED_SLOT if BUGGY_SLOT in self.input_names else None

    def feature_meanings(self) -> dict[str, str]:
        """Compiler-dependent feature -> what it carried when the spec was made (``{}``: unknown)."""
        slot = self.trained_slot()
        return feature_meanings(slot) if slot else {}

    def meaning_changes(self, compiler_slot: str | None) -> list[tuple[str, str, str]]:
        """``(input, meaning when trained, meaning here)`` for each input whose meaning differs on a
        compiler with the default decision in ``compiler_slot``."""
        if not PROBLEMS[self.advisor].detects_default_slot or not compiler_slot:
            return []
        was, now = self.feature_meanings(), feature_meanings(compiler_slot)
        return [(n, was[n], now[n]) for n in self.input_names if n in was and n in now and was[n] != now[n]]

    def bind_inputs(self, compiler_slot: str | None) -> "InputBinding":
        """Each input read, on a compiler with the default decision in ``compiler_slot``, from the feature
        carrying what it meant when the spec was made (clang-19's ``callee_basic_block_count`` is
        clang-22's ``inlining_default``)."""
        carrier = {m: n for n, m in feature_meanings(compiler_slot).items()} if compiler_slot else {}
        changes = self.meaning_changes(compiler_slot)
        return InputBinding({name: carrier[was] for name, was, _ in changes if was in carrier},
                            tuple(c for c in changes if c[1] not in carrier))

    @classmethod
    def from_header(cls, header: Header, advisor: Any, *, vocab_names: Iterable[str] | None = None,
                    discard: Iterable[str] = (), default_slot: str | None = None,
                    keep_default: bool = False) -> "PolicySpec":
        """The spec of a session or training-log header.  The inliner's default slot (``default_slot``,
        else the advisor's) is discarded unless ``keep_default``; so are features without a vocab
        when ``vocab_names`` is given, and ``discard``."""
        problem = get_problem(advisor)
        name = problem.name
        if not problem.learnable:
            raise ConfigError(f"learned policies for {name} (a continuous advice) are not supported; "
                              f"they support {', '.join(LEARNABLE)}")
        advice_name, kind = problem.advice_name, problem.action_kind
        if default_slot is None and not isinstance(advisor, str):
            default_slot = getattr(advisor, "default_slot", None)
        adv_spec = header.advice or header.feature(advice_name)
        if adv_spec is None or adv_spec.name != advice_name:
            raise ConfigError(f"{name}: the header has no advice {advice_name!r}")
        drop = dict.fromkeys(problem.discard, "the compiler's own decision")
        slotted = problem.detects_default_slot and default_slot
        if keep_default and slotted:
            drop.pop(default_slot, None)
        elif slotted and default_slot not in drop:
            drop[default_slot] = "carries the compiler's default decision (include-default slot)"
        for f in discard:
            drop.setdefault(f, "discarded by configuration")
        vocab = None if vocab_names is None else set(vocab_names)
        width = None
        if kind == MASKED_CHOICE:
            m = header.feature(MASK_FEATURE)
            if m is None or len(m.shape) == 0 or m.ctype not in ("int64_t", "int32_t"):
                raise ConfigError(f"{name}: the header has no integer '{MASK_FEATURE}' feature")
            width = int(m.shape[-1])
            if width < 2 or m.size != width:
                raise ConfigError(f"{name}: mask shape {list(m.shape)} is not [1, W] with W >= 2")
        feats = []
        reasons: dict[str, str] = {}
        for s in header.features:
            if s.name == advice_name:
                continue  # a training log: the advice taken is the last feature
            role, why = INPUT, ""
            if kind == MASKED_CHOICE and s.name == MASK_FEATURE:
                role = MASK
            elif s.name in drop:
                role, why = DISCARD, drop[s.name]
            elif kind == BINARY and s.size != 1:
                role, why = DISCARD, f"shape {list(s.shape)}: the inliner network takes scalars"
            elif kind == MASKED_CHOICE and s.size not in (1, width):
                role, why = DISCARD, f"shape {list(s.shape)}: neither per-candidate [1, {width}] nor scalar"
            elif vocab is not None and s.name not in vocab:
                role, why = DISCARD, "no vocab"
            feats.append(FeatureSpec(s.name, s.ctype, tuple(s.shape), role))
            if why:
                reasons[s.name] = why
        num = 2 if kind == BINARY else int(width)  # type: ignore[arg-type]
        spec = cls(name, tuple(feats), ActionSpec(advice_name, adv_spec.ctype, kind, num), width, reasons,
                   default_slot=default_slot if problem.detects_default_slot else None)
        if not spec.inputs:
            raise ConfigError(f"{name}: no usable input feature in the header (discarded: {sorted(reasons)})")
        return spec

    def check_header(self, header: Header, binding: InputBinding = SAME_NAMES) -> None:
        """ConfigError unless every used feature is in the header (under the name ``binding`` reads it
        from) with the same type and shape."""
        problems = []
        for f in self.features:
            if f.role == DISCARD:
                continue
            src = binding.source(f.name)
            h = header.feature(src)
            if h is None:
                problems.append(f"{src!r} is missing from its header")
            elif h.ctype != f.ctype or tuple(h.shape) != f.shape:
                problems.append(f"{src!r} is {h.ctype}{list(h.shape)}, the policy expects {f.ctype}{list(f.shape)}")
        adv = header.advice
        if adv is not None and adv.name != self.action.name:
            problems.append(f"the compiler asks for {adv.name!r}, the policy answers {self.action.name!r}")
        if problems:
            raise ConfigError(f"{self.advisor} policy does not fit this compiler's features: " + "; ".join(problems))

    def to_json(self) -> dict:
        return {"advisor": self.advisor, "features": [f.to_json() for f in self.features],
                "action": self.action.to_json(), "width": self.width, "discarded": dict(self.discarded),
                "default_slot": self.default_slot,
                "feature_meanings": self.feature_meanings(),  # informative: derived from default_slot
                "default_input": self.default_input}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "PolicySpec":
        try:
            spec = cls(advisor=str(d["advisor"]), features=tuple(FeatureSpec.from_json(f) for f in d["features"]),
                       action=ActionSpec.from_json(d["action"]),
                       width=None if d.get("width") is None else int(d["width"]),
                       discarded=dict(d.get("discarded", {})),
                       default_slot=None if d.get("default_slot") is None else str(d["default_slot"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"bad policy spec: {e}") from None
        problem = PROBLEMS.get(spec.advisor)
        if problem is None or not problem.learnable or spec.action.kind != problem.action_kind:
            raise ConfigError(f"bad policy spec: advisor {spec.advisor!r} with action kind {spec.action.kind!r}")
        if spec.default_slot is not None and spec.default_slot not in SLOTS:
            raise ConfigError(f"bad policy spec: default_slot {spec.default_slot!r} is not one of {', '.join(SLOTS)}")
        if spec.action.kind == MASKED_CHOICE and (spec.width is None or spec.mask is None):
            raise ConfigError("bad policy spec: an eviction policy needs a width and a mask feature")
        return spec
