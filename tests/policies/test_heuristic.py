"""The ``spill-weight`` heuristic with the real clang-19: the priority it answers is the live range's spill
weight, scaled and clamped into what the compiler converts to ``unsigned``; bound to any other advisor it
is a one-line error."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from _channel_helpers import run_cli
from _corpus_helpers import needs_clang
from mlgo_host.channel.codec import Observation
from mlgo_host.channel.session import run_session
from mlgo_host.corpus import synth
from mlgo_host.policies import HEURISTICS, make_heuristic
from mlgo_host.policies.heuristic import SpillWeightPriority

pytestmark = needs_clang


class _Seen(SpillWeightPriority):
    def __init__(self):
        self.seen = []

    def act(self, obs):
        a = super().act(obs)
        self.seen.append((obs, a))
        return a


@pytest.fixture(scope="module")
def pressure(tmp_path_factory):
    d = tmp_path_factory.mktemp("sw")
    (d / "p.c").write_text(synth.pressure_module(n_funcs=2, live=36, seed=4))
    return d


def test_spill_weight_answers_each_priority_with_the_scaled_weight(pressure, tmp_path):
    assert "spill-weight" in HEURISTICS and isinstance(make_heuristic("spill-weight"), SpillWeightPriority)
    pol = _Seen()
    res = run_session(["clang-19", "-Oz", "-c", str(pressure / "p.c"), "-o", str(tmp_path / "p.o")],
                      "regalloc-priority", pol, timeout=120, tmpdir=str(tmp_path))
    assert res.returncode == 0, res.stderr_tail
    assert res.observations > 100 and len(pol.seen) == res.observations
    weights = np.array([float(obs["weight"].reshape(-1)[0]) for obs, _ in pol.seen])
    answers = np.array([a for _, a in pol.seen])
    assert len(set(answers)) > 10  # the weights tell the ranges apart
    assert np.array_equal(answers, np.minimum(np.maximum(weights, 0.0) * 1e6, 2.0**31))


def test_a_weight_that_is_not_a_plain_number_still_gives_a_legal_priority(pressure, tmp_path):
    pol = _Seen()
    run_session(["clang-19", "-Oz", "-c", str(pressure / "p.c"), "-o", str(tmp_path / "p.o")],
                "regalloc-priority", pol, timeout=120, tmpdir=str(tmp_path))
    obs = pol.seen[0][0]
    at = obs.header.offset("weight")
    for weight, want in ((math.inf, 2.0**31), (math.nan, 0.0), (-3.0, 0.0), (2.5e-6, 2.5)):
        raw = obs.raw[:at] + struct.pack("<f", weight) + obs.raw[at + 4:]
        got = SpillWeightPriority.act(pol, Observation(0, obs.context, raw, obs.header))
        assert got == pytest.approx(want) and 0.0 <= got < 2.0**32
        pol.advisor.validate(obs, got)


def test_spill_weight_for_another_advisor_is_a_one_line_error(pressure, tmp_path):
    r = run_cli(["run", "--advisor", "inline", "--policy", "spill-weight", "--",
                 "clang-19", "-Oz", "-c", str(pressure / "p.c"), "-o", str(tmp_path / "p.o")], timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "spill-weight answers the regalloc-priority" in r.stderr
