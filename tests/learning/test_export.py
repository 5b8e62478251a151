"""A saved policy directory written from a TF actor: its files, the numpy
policy and the SavedModel decide as the TF actor does, and running it never
imports TensorFlow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from _policy_helpers import observations  # noqa: E402

from mlgo_host.learning.networks import tf_logits  # noqa: E402
from mlgo_host.policies import saved  # noqa: E402


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
    want = np.argmax(tf_logits(net, spec, ep.features()), -1)
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
