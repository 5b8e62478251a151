"""The numpy actor and NumpyPolicy on real clang-19 observations (no TF)."""

from __future__ import annotations

import numpy as np
import pytest

from mlgo_host.errors import ConfigError
from mlgo_host.policies.actor import NumpyActor, NumpyPolicy
from mlgo_host.policies.specs import PolicySpec
from mlgo_host.policies.vocab import NormConfig, VocabBuilder

from _policy_helpers import observations, random_weights

CONFIGS = [NormConfig(), NormConfig(with_square=False), NormConfig(with_sqrt=True, with_z_score=True)]


def _actor(session, cfg, layers=(40, 40, 20), seed=0, activation="relu"):
    header, ep, adv = session
    vb = VocabBuilder()
    vb.add(ep.features())
    vocab = vb.build(200)
    spec = PolicySpec.from_header(header, adv, vocab_names=vocab.names())
    outs = 2 if spec.action.kind == "binary" else 1
    w = random_weights(len(spec.inputs) * cfg.width, layers, outs, seed=seed)
    return NumpyActor(spec, vocab, cfg, w, activation=activation)


def _reference_logp(logits, a):
    fin = np.isfinite(logits)
    m = logits[fin].max()
    return float(logits[a] - m - np.log(np.exp(logits[fin] - m).sum()))


@pytest.mark.parametrize("cfg", CONFIGS, ids=["square", "linear", "sqrt+z"])
def test_inliner_fast_path_matches_the_reference(inline_session, cfg):
    header, ep, adv = inline_session
    actor = _actor(inline_session, cfg)
    ref = actor.logits(ep.features())
    obs = observations(header, ep)
    pol = NumpyPolicy(actor, greedy=True)
    pol.bind(header, adv)
    assert pol.fast_path  # int64 scalars: the vectorized path
    # the fast path folds the z-score into the first layer in float64 (the
    # reference computes it in float32, like TF): not bit-identical then
    tol = 1e-6 if cfg.with_z_score else 1e-9
    for o, lg in zip(obs, ref):
        a, lp = pol.act_logp(o)
        assert a == int(np.argmax(lg)) or abs(lg[0] - lg[1]) < tol
        assert pol.act(o) == a
        assert lp == pytest.approx(_reference_logp(lg, a), abs=tol)


@pytest.mark.parametrize("cfg", CONFIGS + [NormConfig(with_sqrt=True)], ids=["square", "linear", "sqrt+z", "sqrt"])
def test_generic_path_matches_the_fast_path(inline_session, cfg):
    header, ep, adv = inline_session
    actor = _actor(inline_session, cfg, activation="tanh")
    fast = NumpyPolicy(actor)
    fast.bind(header, adv)
    slow = NumpyPolicy(actor)
    slow.bind(header, adv)
    slow._bind_generic(header)  # force the generic path (the column code, one row)
    for o in observations(header, ep):
        # (the z-score: float64 folded into the first layer there, float32 here)
        assert fast._diff(o.raw) == pytest.approx(slow._diff(o.raw), abs=1e-6 if cfg.with_z_score else 1e-9)


def test_seeded_sampling_follows_the_probabilities(inline_session):
    header, ep, adv = inline_session
    actor = _actor(inline_session, NormConfig(), seed=3)
    obs = observations(header, ep)
    d = np.diff(actor.logits(ep.features()), axis=1)[:, 0]
    p1 = 1.0 / (1.0 + np.exp(-d))
    reps = 40
    runs = []
    for seed in (7, 7, 8):
        pol = NumpyPolicy(actor, greedy=False, seed=seed)
        pol.bind(header, adv)
        runs.append([pol.act_logp(o) for _ in range(reps) for o in obs])
    assert runs[0] == runs[1]  # same seed, same decisions
    assert runs[0] != runs[2]
    acts = np.array([a for a, _ in runs[0]], float).reshape(reps, len(obs))
    # empirical frequency of "inline" vs the model's probability (binomial, 5 sigma)
    se = np.sqrt(p1 * (1 - p1) / reps) + 1e-9
    assert np.all(np.abs(acts.mean(0) - p1) <= 5 * se + 1.0 / reps)
    lps = np.array([lp for _, lp in runs[0]]).reshape(reps, len(obs))
    want = np.where(acts == 1, np.log(p1), np.log1p(-p1))
    np.testing.assert_allclose(lps, want, atol=1e-9)


def test_eviction_never_picks_masked_columns(evict_session):
    header, ep, adv = evict_session
    actor = _actor(evict_session, NormConfig(), layers=(32, 16))
    feats = ep.features()
    ref = actor.logits(feats)
    mask = feats["mask"].reshape(ep.n, -1)
    assert np.all(np.isneginf(ref[mask == 0])) and np.all(np.isfinite(ref[mask != 0]))
    obs = observations(header, ep)
    greedy = NumpyPolicy(actor, greedy=True)
    greedy.bind(header, adv)
    sampler = NumpyPolicy(actor, greedy=False, seed=1)
    sampler.bind(header, adv)
    assert greedy.fast_path  # vectorized over features and columns
    for o, lg, m in zip(obs, ref, mask):
        a, lp = greedy.act_logp(o)
        assert a == int(np.argmax(lg))
        np.testing.assert_allclose(greedy._outputs(o.raw), lg, rtol=1e-9, atol=1e-9)
        assert lp == pytest.approx(_reference_logp(lg, a), abs=1e-9)
        s, slp = sampler.act_logp(o)
        assert m[s] != 0
        adv.validate(o, s)  # what the session checks before sending
        assert slp == pytest.approx(_reference_logp(lg, s), abs=1e-9)


def test_bind_rejects_a_foreign_header(inline_session, evict_session):
    actor = _actor(inline_session, NormConfig())
    pol = NumpyPolicy(actor)
    header, _, adv = evict_session
    with pytest.raises(ConfigError):
        pol.bind(header, adv)


def test_bad_weights_are_config_errors(inline_session):
    actor = _actor(inline_session, NormConfig())
    w = actor.weights()
    w["hidden_1_kernel"] = w["hidden_1_kernel"][:-1]
    with pytest.raises(ConfigError, match="layer 1"):
        NumpyActor(actor.spec, actor.vocab, actor.norm, w)
    with pytest.raises(ConfigError, match="activation"):
        NumpyActor(actor.spec, actor.vocab, actor.norm, actor.weights(), activation="swish")


def test_refuses_a_block_count_input_where_the_compiler_sends_its_decision(inline_session, monkeypatch):
    from mlgo_host.channel.advisors import InlineAdvisor
    from mlgo_host.policies import actor as actor_mod
    from mlgo_host.policies.specs import ALLOW_CHANGED_INPUTS

    monkeypatch.setattr(actor_mod, "_WARNED_MEANINGS", set())  # warned once per process
    monkeypatch.delenv(ALLOW_CHANGED_INPUTS, raising=False)
    header, ep, _ = inline_session
    vb = VocabBuilder()
    vb.add(ep.features())
    vocab = vb.build(50)
    # a spec made on a compiler without the include-default bug uses callee_basic_block_count
    spec = PolicySpec.from_header(header, "inline", vocab_names=vocab.names())
    assert "callee_basic_block_count" in spec.input_names
    actor = NumpyActor(spec, vocab, NormConfig(), random_weights(len(spec.inputs) * 2, (8,), 2))
    with pytest.raises(ConfigError, match="callee_basic_block_count"):
        NumpyPolicy(actor).bind(header, InlineAdvisor(default_slot="callee_basic_block_count"))
    monkeypatch.setenv(ALLOW_CHANGED_INPUTS, "1")
    with pytest.warns(RuntimeWarning, match="callee_basic_block_count"):
        NumpyPolicy(actor).bind(header, InlineAdvisor(default_slot="callee_basic_block_count"))


def test_gate_keeps_the_default_unless_the_model_is_confident(inline_session):
    """Behind a gate of p, a greedy decision leaves the compiler's default
    only where the model puts more than p on the other action: at p = 1 it
    is always the default, at p = 0.5 it is the plain greedy decision, and
    in between exactly the confident deviations."""
    header, ep, adv = inline_session
    actor = _actor(inline_session, NormConfig(), seed=3)
    obs = observations(header, ep)
    d = actor.logits(ep.features())
    p1 = 1.0 / (1.0 + np.exp(-(d[:, 1] - d[:, 0])))
    default = np.array([adv.default_advice(o) for o in obs])
    greedy = (p1 > 0.5).astype(int)
    assert (greedy != default).any(), "the random actor should disagree with the default somewhere"
    for gate in (0.5, 0.8, 1.0):
        pol = NumpyPolicy(actor, greedy=True, gate=gate)
        pol.bind(header, adv)
        got = np.array([pol.act(o) for o in obs])
        confident = np.where(default == 1, 1.0 - p1 > gate, p1 > gate)
        want = np.where(confident, 1 - default, default)
        assert (got == want).all(), gate
    assert (got == default).all()  # gate 1: the model never overrides the compiler
    with pytest.raises(ConfigError):
        NumpyPolicy(actor, gate=0.3)
