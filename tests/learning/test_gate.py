"""The gate's rule (learning/imitate.choose_gate): the threshold with the smallest validation total among
those that grow no module too much and save at least the minimum, else 1.0 (always the default)."""

import pytest

from mlgo_host.learning.imitate import GateRule, choose_gate

DEFAULT = {"a": 1000, "b": 1000, "c": 1000}


def test_the_smallest_total_wins_among_thresholds_that_grow_no_module_too_much():
    sizes = {0.5: {"a": 900, "b": 1000, "c": 1020},   # -2.67 %, but c +2 %
             0.7: {"a": 960, "b": 990, "c": 1005},    # -1.5 %, c +0.5 %
             0.9: {"a": 990, "b": 1000, "c": 1000}}   # -0.33 %
    gate, table = choose_gate(sizes, DEFAULT, GateRule(max_module_growth_pct=1.0, min_gain_pct=0.1))
    assert gate == 0.7
    assert table[0.5]["worst_module_pct"] == pytest.approx(2.0)
    assert table[0.7]["size_change_pct"] == pytest.approx(-1.5)


def test_a_saving_below_the_minimum_leaves_the_default():
    sizes = {0.5: {"a": 999, "b": 1000, "c": 1000}}  # -0.033 %
    assert choose_gate(sizes, DEFAULT, GateRule(min_gain_pct=0.1))[0] == 1.0
    assert choose_gate(sizes, DEFAULT, GateRule(min_gain_pct=0.0))[0] == 0.5
    assert choose_gate(sizes, DEFAULT)[0] == 1.0  # the default rule asks for 0.1 %


def test_no_saving_or_a_missing_module_leaves_the_default():
    assert choose_gate({0.5: dict(DEFAULT)}, DEFAULT, GateRule(min_gain_pct=0.0))[0] == 1.0
    assert choose_gate({0.5: {"a": 500, "b": 500}}, DEFAULT, GateRule(min_gain_pct=0.0))[0] == 1.0
