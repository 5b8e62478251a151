"""The TF side against the numpy side: normalization, actor logits, saved
policies, the PPO agent on real episodes, behavioural cloning.  The only
policy test module importing TensorFlow (keep the heavy calls few)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from _policy_helpers import observations, random_weights  # noqa: E402

from mlgo_host.policies import saved  # noqa: E402
from mlgo_host.trainers import export, tf_agent  # noqa: E402
from mlgo_host.policies.specs import PolicySpec  # noqa: E402
from mlgo_host.trainers.tf_features import normalize_fn  # noqa: E402
from mlgo_host.policies.vocab import FeatureVocab, NormConfig, VocabBuilder  # noqa: E402

CONFIGS = [NormConfig(), NormConfig(with_sqrt=True), NormConfig(with_sqrt=True, with_z_score=True)]
IDS = ["square", "sqrt", "all"]


def _spec_vocab(session, buckets=300):
    header, ep, adv = session
    vb = VocabBuilder()
    vb.add(ep.features())
    vocab = vb.build(buckets)
    return PolicySpec.from_header(header, adv, vocab_names=vocab.names()), vocab


@pytest.mark.parametrize("cfg", CONFIGS + [NormConfig(with_square=False)], ids=IDS + ["linear"])
def test_normalization_numpy_equals_tf(cfg):
    rng = np.random.default_rng(0)
    raw = np.sort(np.concatenate([rng.normal(0, 50, 200), rng.integers(0, 40, 300), [2.0**24 + 1, 3e9, -7.5]]))
    fv = FeatureVocab("f", raw)
    b = fv.boundaries.astype(np.float64)
    ints = np.concatenate([rng.integers(-400, 400, 2000), np.round(b).astype(np.int64), np.round(b).astype(np.int64) + 1,
                           [0, -1, 2**24, 2**24 + 1, 2**24 + 3, 3 * 10**9, 2**62, -(2**62), 2**63 - 1]])
    floats = np.concatenate([rng.normal(0, 80, 2000), b, np.nextafter(b, np.inf), np.nextafter(b, -np.inf),
                             [np.inf, -np.inf, np.nan, -0.0, 0.0, 1e38, -1e38]]).astype(np.float32)
    f = normalize_fn(fv, cfg)
    ints = ints[: ints.size // 4 * 4]
    for v in (ints, ints.reshape(-1, 4), floats, floats.astype(np.float64)):
        want = fv.normalize(v, cfg)
        got = f(tf.constant(v)).numpy()
        assert got.shape == want.shape == v.shape + (cfg.width,)
        np.testing.assert_array_equal(got, want)


def _agreement(session, cfg, layers):
    spec, vocab = _spec_vocab(session)
    net = tf_agent.build_actor_network(spec, vocab, cfg, fc_layer_params=layers)
    outs = 2 if spec.action.kind == "binary" else 1
    tf_agent.import_actor_weights(net, random_weights(len(spec.inputs) * cfg.width, layers, outs, seed=5))
    actor = tf_agent.numpy_actor(net, spec, vocab, cfg)
    feats = [session[1].features(), export.random_features(spec, vocab, 400, seed=1)]
    for x in feats:
        lt = tf_agent.tf_logits(net, spec, x)
        ln = actor.logits(x)
        fin = np.isfinite(ln)
        if cfg.with_z_score:
            # z-scores of near-constant features are huge (std ~ 0): compare relatively
            assert np.max(np.abs(lt[fin] - ln[fin]) / np.maximum(1.0, np.abs(ln[fin]))) < 1e-5
        else:
            assert 1.0 < np.ptp(ln[fin]) < 100  # logits of a realistic size, not all near zero
            assert np.max(np.abs(lt[fin] - ln[fin])) < 1e-5
        assert np.all(lt[~fin] <= np.finfo(np.float32).min)  # TF masks with the dtype's minimum
        np.testing.assert_array_equal(np.argmax(lt, -1), np.argmax(ln, -1))


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_numpy_and_tf_actor_agree_inliner(inline_session, cfg):
    _agreement(inline_session, cfg, (40, 40, 20))


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_numpy_and_tf_actor_agree_eviction(evict_session, cfg):
    _agreement(evict_session, cfg, (32, 16))


@pytest.fixture(scope="module")
def saved_inliner(inline_session, tmp_path_factory):
    spec, vocab = _spec_vocab(inline_session)
    cfg = NormConfig()
    net = tf_agent.build_actor_network(spec, vocab, cfg, fc_layer_params=(24, 12))
    tf_agent.import_actor_weights(net, random_weights(len(spec.inputs) * cfg.width, (24, 12), 2, seed=9))
    d = tmp_path_factory.mktemp("pol") / "policy"
    sp = export.save_policy(str(d), net, spec, vocab, cfg, compiler="clang-19 (test)", training_step=7)
    return d, net, spec, vocab


def test_saved_policy_round_trip(saved_inliner, inline_session):
    d, net, spec, vocab = saved_inliner
    header, ep, adv = inline_session
    assert sorted(os.listdir(d)) == ["actor.npz", "metadata.json", "saved_model", "vocab"]
    md = json.loads((d / "metadata.json").read_text())
    assert md["advisor"] == "inline" and md["training_step"] == 7 and md["compiler"] == "clang-19 (test)"
    assert md["input_features"] == list(spec.input_names) and md["fc_layer_params"] == [24, 12]
    assert sorted(p.name[:-8] for p in (d / "vocab").iterdir()) == sorted(spec.input_names)
    out_spec = json.loads((d / "saved_model" / "output_spec.json").read_text())
    assert out_spec[0]["logging_name"] == "inlining_decision"
    assert out_spec[0]["tensor_spec"]["type"] == "int64_t" and out_spec[0]["tensor_spec"]["shape"] == [1]
    pol = saved.load_saved_policy(str(d))
    pol.bind(header, adv)
    want = np.argmax(tf_agent.tf_logits(net, spec, ep.features()), -1)
    got = np.array([pol.act(o) for o in observations(header, ep)])
    np.testing.assert_array_equal(got, want)
    # the SavedModel's action signature decides the same
    sm = tf.saved_model.load(str(d / "saved_model"))
    act = sm.signatures["action"]
    feats = ep.features()
    for i in range(0, ep.n, max(1, ep.n // 5)):
        kw = {f.name: tf.constant(np.asarray(feats[f.name][i:i + 1]).reshape((1,) + f.tf_shape)) for f in spec.features}
        kw.update(step_type=tf.constant([1], tf.int32), reward=tf.constant([0.0]), discount=tf.constant([1.0]))
        assert int(act(**kw)["inlining_decision"].numpy()[0]) == want[i]


def test_loading_and_running_a_saved_policy_never_imports_tensorflow(saved_inliner, inline_session, tmp_path):
    d, *_ = saved_inliner
    src = tmp_path / "x.c"
    from mlgo_host.corpus import synth

    src.write_text(synth.inline_module(40, seed=2))
    script = textwrap.dedent(f"""
        import json, sys, io, contextlib
        from mlgo_host.cli import main
        from mlgo_host.policies import load_policy
        pol = load_policy({str(d)!r}, seed=1, greedy=False)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = main(["run", "--policy", {str(d)!r}, "--", "clang-19", "-Oz", "-c", {str(src)!r},
                       "-o", {str(tmp_path / "x.o")!r}])
        res = json.loads(buf.getvalue())
        assert rc == 0 and res["observations"] > 0, res
        assert "tensorflow" not in sys.modules, "tensorflow was imported"
        assert not [m for m in sys.modules if m.startswith(("tf_agents", "keras"))]
        print("NO_TF", res["observations"])
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("NO_TF")


def test_ppo_agent_trains_on_real_episodes(inline_session, evict_session, saved_inliner):
    for session in (inline_session, evict_session):
        header, ep, adv = session
        spec, vocab = _spec_vocab(session)
        agent = tf_agent.create_ppo_agent(spec, vocab, NormConfig(), num_epochs=2, learning_rate=1e-2)
        actor = tf_agent.numpy_actor(agent.actor_net, spec, vocab, NormConfig())
        # episodes as a stochastic numpy policy would produce them
        from mlgo_host.policies.actor import NumpyPolicy

        pol = NumpyPolicy(actor, greedy=False, seed=0)
        pol.bind(header, adv)
        acts, lps = zip(*[pol.act_logp(o) for o in observations(header, ep)])
        ep2 = type(ep)(header, ep.raw, np.array(acts, np.int64), np.array(lps, np.float32), ep.contexts)
        trajs = tf_agent.episodes_to_trajectories(spec, [ep2, ep2], [0.3, np.linspace(-1, 1, ep.n)],
                                                  sequence_length=8, batch_size=16)
        assert all(t.action.shape == (16, 8) for t in trajs)
        t = trajs[0]
        tf.nest.assert_same_structure(t.policy_info, agent.collect_data_spec.policy_info)
        # in order (no shuffle): the steps of both episodes; the rebuilt logits
        # give back the logged log-probability of the action taken
        (seq,) = tf_agent.episodes_to_trajectories(spec, [ep2, ep2], [0.3, 0.0], sequence_length=8, batch_size=None,
                                                   shuffle=False)
        k = seq.action.shape[0] * 8
        np.testing.assert_array_equal(seq.action.numpy().ravel(), np.concatenate([acts, acts])[:k])
        lp = tf.nn.log_softmax(seq.policy_info["dist_params"]["logits"]).numpy()
        taken = np.take_along_axis(lp, seq.action.numpy()[..., None], -1)[..., 0].ravel()
        np.testing.assert_allclose(taken, np.concatenate([lps, lps])[:k], atol=2e-6)
        st = seq.step_type.numpy().ravel()
        assert st[0] == 0 and st[ep.n] == 0 and set(st[1:ep.n]) == {1}  # FIRST at each episode start
        assert seq.next_step_type.numpy().ravel()[ep.n - 1] == 2  # LAST after an episode's last decision
        np.testing.assert_array_equal(seq.reward.numpy().ravel()[:ep.n], np.float32(0.3))
        before = tf_agent.export_actor_weights(agent.actor_net)
        loss = agent.train(t)
        assert np.isfinite(float(loss.loss))
        after = tf_agent.export_actor_weights(agent.actor_net)
        assert any(not np.array_equal(before[k], after[k]) for k in before)
        # the exported numpy twin still matches the trained TF actor
        lt = tf_agent.tf_logits(agent.actor_net, spec, ep.features())
        ln = tf_agent.numpy_actor(agent.actor_net, spec, vocab, NormConfig()).logits(ep.features())
        fin = np.isfinite(ln)
        assert np.max(np.abs(lt[fin] - ln[fin])) < 1e-5
    # warm start from a saved policy: the agent's actor carries its weights
    d, net, spec, vocab = saved_inliner
    agent, sp = tf_agent.create_ppo_agent_from_saved(str(d))
    got = tf_agent.export_actor_weights(agent.actor_net)
    for k, v in sp.actor.weights().items():
        np.testing.assert_array_equal(got[k], v)


def test_behavioural_cloning_on_a_default_trace(default_trace, tmp_path, inline_session):
    from mlgo_host.trainers.bc import train_bc
    from mlgo_host.trainers.traces import load_trace

    out, index = default_trace
    res = train_bc(str(out), str(tmp_path / "bc"), epochs=25, batch_size=32, learning_rate=3e-3,
                   fc_layer_params=(40, 40, 20), saved_model=False, progress=False)
    majority = max(res.default_positive_rate, 1 - res.default_positive_rate)
    assert res.decisions == index["totals"]["observations"]
    assert res.train_accuracy >= 0.93 and res.accuracy > majority + 0.05, res
    # the saved directory is a numpy policy that reproduces the reported accuracy
    pol = saved.read_saved_policy(str(tmp_path / "bc"))
    assert index["default_slot"] in pol.spec.discarded and "inlining_default" in pol.spec.discarded
    hits = n = 0
    for lg in load_trace(str(out)).logs():
        hits += int(np.sum(pol.actor.greedy(lg.records) == lg.actions))
        n += lg.n
    assert hits / n == pytest.approx(res.accuracy)
    report = json.loads((tmp_path / "bc" / "bc_report.json").read_text())
    assert report["accuracy"] == pytest.approx(res.accuracy)
