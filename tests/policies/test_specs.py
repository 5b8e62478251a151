"""Policy specs from real clang-19 headers."""

from __future__ import annotations

import dataclasses

import pytest

from mlgo_host.channel.codec import Header
from mlgo_host.channel.spec import TensorSpec
from mlgo_host.errors import ConfigError
from mlgo_host.policies.specs import DISCARD, INPUT, MASK, PolicySpec


def test_inliner_spec_discards_the_default_decision(inline_session):
    header, _, adv = inline_session
    spec = PolicySpec.from_header(header, adv)
    assert spec.advisor == "inline" and spec.num_actions == 2 and spec.width is None
    roles = {f.name: f.role for f in spec.features}
    assert roles["inlining_default"] == DISCARD
    # the advisor says where this compiler puts its default decision: never an input
    assert roles[adv.default_slot] == DISCARD
    assert set(roles) == {f.name for f in header.features}
    assert list(spec.input_names) == sorted(n for n, r in roles.items() if r == INPUT)
    assert all(f.tf_shape == () for f in spec.inputs)


def test_eviction_spec_width_and_mask_come_from_the_header(evict_session):
    header, _, adv = evict_session
    spec = PolicySpec.from_header(header, adv)
    w = header.feature("mask").shape[-1]
    assert spec.width == w and spec.num_actions == w
    assert spec.mask.name == "mask" and spec.mask.role == MASK
    assert "mask" not in spec.input_names
    for f in spec.inputs:
        assert f.size in (1, w)
    # a narrower target (W=17) is read from the header, not assumed
    narrow = Header(tuple(TensorSpec(f.name, f.ctype, (1, 17)) if f.size == w else f for f in header.features),
                    header.advice)
    assert PolicySpec.from_header(narrow, adv).width == 17


def test_unknown_features_are_ignored_and_missing_ones_rejected(inline_session):
    header, _, adv = inline_session
    spec = PolicySpec.from_header(header, adv)
    newer = Header(header.features + (TensorSpec("some_future_feature", "int64_t", (1,)),), header.advice)
    spec.check_header(newer)  # more features: fine
    used = spec.inputs[0].name
    older = Header(tuple(f for f in header.features if f.name != used), header.advice)
    with pytest.raises(ConfigError, match=used):
        spec.check_header(older)
    retyped = Header(tuple(dataclasses.replace(f, ctype="float") if f.name == used else f for f in header.features),
                     header.advice)
    with pytest.raises(ConfigError, match="expects int64_t"):
        spec.check_header(retyped)
    # a discarded feature may disappear
    spec.check_header(Header(tuple(f for f in header.features if f.name != "inlining_default"), header.advice))


def test_vocab_and_training_log_headers(inline_session):
    header, _, adv = inline_session
    names = [f.name for f in header.features][:5]
    spec = PolicySpec.from_header(header.as_training_log(), "inline", vocab_names=names,
                                  default_slot="callee_basic_block_count")
    assert "inlining_decision" not in {f.name for f in spec.features}  # the advice is not a feature
    assert set(spec.input_names) <= set(names)
    for f in spec.features:
        if f.name not in names and f.name not in ("inlining_default", "callee_basic_block_count"):
            assert f.role == DISCARD and spec.discarded[f.name] == "no vocab"
    back = PolicySpec.from_json(spec.to_json())
    assert back == dataclasses.replace(spec, discarded=dict(spec.discarded))


def test_unsupported_advisors():
    h = Header((TensorSpec("x", "int64_t", (1,)),), TensorSpec("priority", "float", (1,)))
    with pytest.raises(ConfigError, match="not supported"):
        PolicySpec.from_header(h, "regalloc-priority")
    with pytest.raises(ConfigError, match="unknown advisor"):
        PolicySpec.from_header(h, "nope")
    with pytest.raises(ConfigError, match="no advice"):
        PolicySpec.from_header(h, "inline")
