"""One place per decision problem (channel/problems.py): each advisor has its
problem, and what the rest of the package does per advisor follows from the
problem's attributes, checked on real clang-19 headers."""

from __future__ import annotations

import pytest

from mlgo_host.channel import problems
from mlgo_host.channel.advisors import ADVISORS
from mlgo_host.channel.default_slot import BUGGY_SLOT
from mlgo_host.channel.problems import BINARY, MASKED_CHOICE, PROBLEMS, get_problem, ready_advisor
from mlgo_host.errors import ConfigError
from mlgo_host.policies.specs import DISCARD, PolicySpec


def test_every_advisor_has_its_problem():
    assert set(PROBLEMS) == set(ADVISORS)
    for name, p in PROBLEMS.items():
        assert p.advice_name == ADVISORS[name].advice_name
    assert problems.LEARNABLE == ("inline", "regalloc-evict")
    with pytest.raises(ConfigError, match="unknown advisor 'nope'"):
        get_problem("nope")


def test_only_the_inliner_detects_its_compilers_default_slot():
    # clang-19: the include-default bug's slot; eviction has no such slot (no detecting compile)
    assert ready_advisor("inline", "clang-19").default_slot == BUGGY_SLOT
    assert get_problem("regalloc-evict").default_slot("clang-19") is None
    assert not hasattr(ready_advisor("regalloc-evict", "clang-19"), "default_slot")


@pytest.mark.parametrize("session, kind", [("inline_session", BINARY), ("evict_session", MASKED_CHOICE)])
def test_a_spec_acts_and_discards_as_its_problem_says(request, session, kind):
    header, _, adv = request.getfixturevalue(session)
    problem = get_problem(adv)
    spec = PolicySpec.from_header(header, adv)
    assert spec.action.kind == problem.action_kind == kind and spec.action.name == problem.advice_name
    for f in problem.discard:
        assert spec.feature(f).role == DISCARD
    # the detected slot is discarded too, and recorded, only where the problem has one
    assert (spec.default_slot == BUGGY_SLOT) == problem.detects_default_slot
    assert (BUGGY_SLOT not in spec.input_names) or not problem.detects_default_slot


def test_no_learned_policy_for_a_problem_without_an_action_kind(evict_session):
    header = evict_session[0]
    with pytest.raises(ConfigError, match="regalloc-priority .*not supported; they support inline, regalloc-evict"):
        PolicySpec.from_header(header, "regalloc-priority")
