"""PPO warm-started on clang-22 from the shipped policy, which was made on
clang-19: the learner keeps the start's inputs and what they meant, and
reads the default decision from clang-22's ``inlining_default``, so the TF
actor's logits on clang-22's episodes are the shipped policy's on the same
decisions.  A start reading a feature the training compiler does not send
is refused.  Real clang-19 and clang-22 (skipped where one is missing)."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from mlgo_host.channel.default_slot import BUGGY_SLOT, FIXED_SLOT
from mlgo_host.channel.problems import ready_advisor
from mlgo_host.channel.session import run_session
from mlgo_host.corpus import synth
from mlgo_host.episode import EpisodeRecorder
from mlgo_host.errors import ConfigError
from mlgo_host.learning.learner import Learner
from mlgo_host.learning.networks import tf_logits
from mlgo_host.learning.trajectories import episodes_to_steps
from mlgo_host.policies import load_policy
from mlgo_host.policies.saved import read_saved_policy
from mlgo_host.policies.specs import SAME_NAMES, PolicySpec
from mlgo_host.shipped import shipped_policy_dir

pytestmark = pytest.mark.skipif(any(shutil.which(c) is None for c in ("clang-19", "clang-22")),
                                reason="needs clang-19 and clang-22")


def _episode(clang: str, tmp_path, policy):
    src = tmp_path / "m.c"
    src.write_text(synth.inline_module(200, seed=3))
    res = run_session([clang, "-Oz", "-c", str(src), "-o", str(tmp_path / "m.o")], ready_advisor("inline", clang),
                      policy, recorder=EpisodeRecorder(), timeout=120)
    assert res.returncode == 0, res.stderr_tail
    return res.header, res.episode


def test_a_clang_19_warm_start_trains_on_clang_22_by_meaning(tmp_path):
    shipped_dir = shipped_policy_dir("pretrained-oz")
    shipped = read_saved_policy(shipped_dir)
    header, ep = _episode("clang-22", tmp_path, load_policy(shipped_dir))
    learner = Learner(header.to_json(), advisor="inline", vocab_dir=os.path.join(shipped_dir, "vocab"),
                      root_dir=str(tmp_path / "run"), clang="clang-22", keep_default=True, use_tf_function=False,
                      start_spec=shipped.spec)
    assert learner.spec.input_names == shipped.spec.input_names
    assert dict(learner.binding.sources) == {BUGGY_SLOT: FIXED_SLOT}
    learner.warmstart(shipped_dir)
    steps = episodes_to_steps(learner.spec, [ep], [0.0], learner.binding)
    want = shipped.actor.logits(ep.features(), learner.binding)
    np.testing.assert_allclose(tf_logits(learner.actor, learner.spec, steps.observation), want, rtol=1e-4, atol=1e-4)
    # read by name, the block count would stand in for the decision: other logits
    by_name = episodes_to_steps(learner.spec, [ep], [0.0], SAME_NAMES)
    assert not np.allclose(tf_logits(learner.actor, learner.spec, by_name.observation), want, atol=1e-2)


def test_a_start_reading_what_the_compiler_does_not_send_is_refused(tmp_path):
    """Made on clang-22 with the real block count an input: clang-19 has no
    block count to train it on."""
    header22, _ = _episode("clang-22", tmp_path, load_policy("default"))
    names = [f.name for f in header22.features]
    made_on_22 = PolicySpec.from_header(header22, "inline", vocab_names=names, default_slot=FIXED_SLOT)
    assert BUGGY_SLOT in made_on_22.input_names
    header19, _ = _episode("clang-19", tmp_path, load_policy("default"))
    with pytest.raises(ConfigError, match=f"warm-start policy input '{BUGGY_SLOT}' meant 'basic block count'"):
        Learner(header19.to_json(), advisor="inline", vocab_dir=os.path.join(shipped_policy_dir("pretrained-oz"),
                                                                             "vocab"),
                root_dir=str(tmp_path / "run"), clang="clang-19", use_tf_function=False, start_spec=made_on_22)
