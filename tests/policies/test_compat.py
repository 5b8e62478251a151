"""A policy made on one compiler served by another: the spec records which
slot carried the default decision (hence what ``callee_basic_block_count``
meant); binding reads each input from the feature that carries its meaning
on the serving compiler, refuses (or, allowed, warns once about) an input
whose meaning the compiler sends nowhere, and fails clearly when a used
feature is missing.  The headers are clang-19's (clang-22 sends
the same feature names; the compiler's slot is given through its advisor);
the last test serves saved policies with every installed clang."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

from mlgo_host.channel.advisors import InlineAdvisor
from mlgo_host.channel.codec import Header
from mlgo_host.channel.default_slot import BLOCK_COUNT, BUGGY_SLOT, DEFAULT_DECISION, FIXED_SLOT
from mlgo_host.errors import ConfigError
from mlgo_host.policies import actor as actor_mod
from mlgo_host.policies.actor import NumpyActor, NumpyPolicy
from mlgo_host.policies.saved import load_saved_policy
from mlgo_host.policies.specs import ALLOW_CHANGED_INPUTS, DISCARD, PolicySpec
from mlgo_host.policies.vocab import NormConfig, VocabBuilder

from _policy_helpers import random_weights, write_saved_policy

CLANG22 = "Debian clang version 22.1.8 (1~deb12u1)"


@pytest.fixture()
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(actor_mod, "_WARNED_MEANINGS", set())


def _actor(inline_session, trained_slot: str | None) -> NumpyActor:
    header, ep, _ = inline_session
    vb = VocabBuilder()
    vb.add(ep.features())
    vocab = vb.build(50)
    spec = PolicySpec.from_header(header, "inline", vocab_names=vocab.names(), default_slot=trained_slot)
    return NumpyActor(spec, vocab, NormConfig(), random_weights(len(spec.inputs) * 2, (8,), 2))


def test_the_spec_records_the_slot_and_what_the_inputs_meant(inline_session):
    old = _actor(inline_session, BUGGY_SLOT).spec  # made on clang-19
    new = _actor(inline_session, FIXED_SLOT).spec  # made on clang-22
    assert old.default_slot == BUGGY_SLOT and BUGGY_SLOT not in old.input_names
    assert old.feature(BUGGY_SLOT).role == DISCARD
    assert old.feature_meanings() == {BUGGY_SLOT: DEFAULT_DECISION, FIXED_SLOT: "always 0"}
    # clang-22's real block count is an input
    assert new.default_slot == FIXED_SLOT and BUGGY_SLOT in new.input_names
    assert new.feature_meanings() == {BUGGY_SLOT: BLOCK_COUNT, FIXED_SLOT: DEFAULT_DECISION}
    for spec in (old, new):
        js = json.loads(json.dumps(spec.to_json()))
        assert js["feature_meanings"] == spec.feature_meanings()
        assert PolicySpec.from_json(js).default_slot == spec.default_slot
    bad = dict(new.to_json(), default_slot="num_loops")
    with pytest.raises(ConfigError, match="default_slot 'num_loops'"):
        PolicySpec.from_json(bad)


def test_specs_saved_before_the_slot_was_recorded_are_inferred(inline_session):
    for slot in (BUGGY_SLOT, FIXED_SLOT):
        js = _actor(inline_session, slot).spec.to_json()
        del js["default_slot"], js["feature_meanings"]
        assert PolicySpec.from_json(js).trained_slot() == slot


def test_same_meaning_on_the_other_compiler_binds_silently(inline_session, fresh_warnings):
    header = inline_session[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # made on clang-19 (block count slot discarded), served by clang-22
        NumpyPolicy(_actor(inline_session, BUGGY_SLOT)).bind(header, InlineAdvisor(FIXED_SLOT))
        # made and served on the same kind of compiler
        NumpyPolicy(_actor(inline_session, FIXED_SLOT)).bind(header, InlineAdvisor(FIXED_SLOT))
        NumpyPolicy(_actor(inline_session, BUGGY_SLOT)).bind(header, InlineAdvisor(BUGGY_SLOT))


def test_an_input_the_compiler_cannot_supply_is_an_error_unless_allowed(inline_session, fresh_warnings,
                                                                       monkeypatch):
    """A clang-22 policy reads the real block count; clang-19 sends its
    default decision in that slot and the count nowhere: one error naming
    the input, both meanings and the way to go on; gone on, one warning."""
    header = inline_session[0]
    pol = NumpyPolicy(_actor(inline_session, FIXED_SLOT), trained_with=CLANG22)
    monkeypatch.delenv(ALLOW_CHANGED_INPUTS, raising=False)
    with pytest.raises(ConfigError) as e:
        pol.bind(header, InlineAdvisor(BUGGY_SLOT))
    msg = str(e.value)
    assert "\n" not in msg and repr(BUGGY_SLOT) in msg and BLOCK_COUNT in msg and DEFAULT_DECISION in msg
    assert CLANG22 in msg and "--allow-changed-inputs" in msg
    monkeypatch.setenv(ALLOW_CHANGED_INPUTS, "1")
    with pytest.warns(RuntimeWarning) as rec:
        pol.bind(header, InlineAdvisor(BUGGY_SLOT))
        pol.bind(header, InlineAdvisor(BUGGY_SLOT))  # the next compile of a server: no repeat
        NumpyPolicy(pol.actor, trained_with=CLANG22).bind(header, InlineAdvisor(BUGGY_SLOT))
    (w,) = rec.list
    assert repr(BUGGY_SLOT) in str(w.message) and BLOCK_COUNT in str(w.message)
    assert pol.fast_path  # still serves


@pytest.mark.parametrize("made_on, served_on", [(BUGGY_SLOT, FIXED_SLOT), (FIXED_SLOT, BUGGY_SLOT)],
                         ids=["19-on-22", "22-on-19"])
def test_the_default_decision_input_is_read_where_the_serving_compiler_sends_it(inline_session, made_on, served_on):
    """A policy reading the compiler's default decision (search then
    imitate) is bound to the slot that carries it on the serving compiler,
    and gives the same logits on the same decisions laid out as either
    compiler lays them out."""
    header, ep, _ = inline_session
    spec_made = _actor(inline_session, made_on).spec
    keep = PolicySpec.from_header(header, "inline", vocab_names=spec_made.input_names + (made_on,),
                                  default_slot=made_on, keep_default=True,
                                  discard=() if made_on == BUGGY_SLOT else (BUGGY_SLOT,))
    assert keep.default_input == made_on
    binding = keep.bind_inputs(served_on)
    assert dict(binding.sources) == {made_on: served_on} and not binding.lost
    feats = ep.features()  # clang-19's layout: the decision in the block-count slot
    made, served = _layouts(feats, made_on), _layouts(feats, served_on)
    vocab = VocabBuilder()
    vocab.add(made)
    vocab = vocab.build(50)
    actor = NumpyActor(keep, vocab, NormConfig(), random_weights(len(keep.inputs) * 2, (8,), 2, seed=4))
    want = actor.logits(made)
    assert not np.allclose(actor.logits(served), want)  # read by name: another policy
    np.testing.assert_allclose(actor.logits(served, binding), want)


def _layouts(feats, slot: str):
    """clang-19's records laid out as a compiler whose default decision is
    in ``slot`` lays them out (the other slot: 0, or a block count)."""
    decision = np.array(feats[BUGGY_SLOT])
    out = feats.copy()
    out[slot] = decision
    if slot == BUGGY_SLOT:
        out[FIXED_SLOT] = 0
    else:
        out[BUGGY_SLOT] = 2 + (3 * np.arange(decision.size) % 17).reshape(decision.shape)
    return out


def test_a_missing_used_feature_is_a_clear_error(inline_session):
    header = inline_session[0]
    pol = NumpyPolicy(_actor(inline_session, FIXED_SLOT), trained_with=CLANG22)
    older = Header(tuple(f for f in header.features if f.name != BUGGY_SLOT), header.advice)
    with pytest.raises(ConfigError, match=rf"'{BUGGY_SLOT}' is missing from its header.*{re.escape(CLANG22)}"):
        pol.bind(older, InlineAdvisor(FIXED_SLOT))
    # the clang-19 policy does not use it: fine without it
    NumpyPolicy(_actor(inline_session, BUGGY_SLOT)).bind(older, InlineAdvisor(FIXED_SLOT))


def test_saved_policy_reads_the_recorded_compiler(inline_session, tmp_path):
    path = write_saved_policy(tmp_path / "p", _actor(inline_session, FIXED_SLOT), compiler=CLANG22)
    pol = load_saved_policy(path)
    assert pol.trained_with == CLANG22 and pol.actor.spec.default_slot == FIXED_SLOT


@pytest.mark.parametrize("trained_slot", [BUGGY_SLOT, FIXED_SLOT], ids=["made-on-19", "made-on-22"])
def test_saved_policies_serve_every_installed_clang(toolchain, inline_session, trained_slot, tmp_path):
    """`mlgo-host run` with a saved policy: it compiles with every version
    whose features carry what the policy's inputs meant; a policy reading
    the real block count is one error on a compiler that sends its decision
    there, and serves with one warning under --allow-changed-inputs."""
    path = write_saved_policy(tmp_path / "p", _actor(inline_session, trained_slot), compiler="a test compiler")
    src = tmp_path / "m.c"
    src.write_text("static int sq(int x) { if (x > 3) return x * x; return x; }\n"
                   "int f(int a) { return sq(a) + sq(a + 1); }\n")
    lost = trained_slot == FIXED_SLOT and toolchain.default_slot == BUGGY_SLOT
    for allow in ([], ["--allow-changed-inputs"]):
        r = subprocess.run([sys.executable, "-m", "mlgo_host", "run", "--policy", path, *allow, "--",
                            toolchain.clang, "-Oz", "-c", str(src), "-o", str(tmp_path / "m.o")],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "TMPDIR": str(tmp_path)})
        if lost and not allow:
            assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
            assert r.stderr.startswith(f"mlgo-host run: error: policy input {BUGGY_SLOT!r} meant '{BLOCK_COUNT}'")
            assert "Traceback" not in r.stderr and not (tmp_path / "m.o").exists()
            continue
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["observations"] > 0
        assert r.stderr.count(f"policy input {BUGGY_SLOT!r} meant") == int(lost)


def test_eval_in_two_workers_refuses_once_or_warns_once_in_the_commands_style(small_corpus, inline_session,
                                                                              tmp_path):
    """A clang-22 policy evaluated with clang-19 on two pool workers: one
    error line before any work, or (gone on) one warning line,
    `mlgo-host eval: warning: ...`, not one Python warning per worker."""
    path = write_saved_policy(tmp_path / "p", _actor(inline_session, FIXED_SLOT), compiler=CLANG22)
    cmd = [sys.executable, "-m", "mlgo_host", "eval", "--corpus", str(small_corpus), "--policy", path,
           "--jobs", "2", "--no-progress", "--clang", "clang-19", "--baseline-cache", str(tmp_path / "baselines")]
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop(ALLOW_CHANGED_INPUTS, None)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"mlgo-host eval: error: policy input {BUGGY_SLOT!r} meant '{BLOCK_COUNT}'")
    r = subprocess.run(cmd + ["--allow-changed-inputs"], capture_output=True, text=True, timeout=600, env=env)
    assert "modules evaluated" in r.stdout, r.stderr
    warned = [ln for ln in r.stderr.splitlines() if "meant" in ln]
    assert len(warned) == 1, r.stderr
    assert warned[0].startswith(f"mlgo-host eval: warning: policy input {BUGGY_SLOT!r} meant '{BLOCK_COUNT}'")
    assert "Warning" not in r.stderr  # no Python-style "file:line: CompatibilityWarning: ..."


def test_serve_refuses_at_start_a_policy_input_its_compiler_cannot_supply(inline_session, tmp_path):
    """`serve` probes its compiler at start: a clang-22 policy reading the
    real block count, served for clang-19, is one error line before any
    client comes, and the channels directory is left empty."""
    path = write_saved_policy(tmp_path / "p", _actor(inline_session, FIXED_SLOT), compiler=CLANG22)
    env = {**os.environ, "TMPDIR": str(tmp_path), "MLGO_CLANG": "clang-19"}
    env.pop(ALLOW_CHANGED_INPUTS, None)
    ch = tmp_path / "ch"
    r = subprocess.run([sys.executable, "-m", "mlgo_host", "serve", "--channels", str(ch), "--policy", path],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"mlgo-host serve: error: policy input {BUGGY_SLOT!r} meant '{BLOCK_COUNT}'")
    assert not ch.exists() or not any(ch.iterdir())
