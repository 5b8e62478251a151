"""Policy benchmark: what one decision costs, batch 1, from real observation bytes.

Compiles a generated module with clang-19 (-Oz, the default policy, ~600
inliner decisions) to get real observations, builds a quantile vocab from
them and an inliner actor with ml-compiler-opt's sizes (40, 40, 20; random
weights of a trained actor's scale), then times per decision:

* numpy ``NumpyPolicy.act_logp`` (normalization + actor + sampling, what a
  training worker runs) and ``act`` (greedy);
* the same for eviction (masked choice over the header's width), from a
  register-pressure module;
* for comparison, TensorFlow with the very same weights: the tf-agents
  SavedModel's ``action`` signature (PolicySaver, greedy policy) and a
  ``tf.function`` of the actor network + sampling, each fed the observation
  as batch-1 tensors (decoding included).

Each figure is the median over --reps passes over all observations, in
CPU time of this process (the primary figure on a shared machine) and in
wall time (with the fastest pass); the numpy inliner figures are measured in
--rounds rounds a few seconds apart and the best round is kept (all rounds
are in the JSON), since other processes on a shared machine disturb some.  Prints a table and writes
bench/results/policy.json.

usage: python bench/policy.py [--reps N] [--rounds N] [--tf-decisions N] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402

from mlgo_host.corpus import synth  # noqa: E402
from mlgo_host.channel.problems import ready_advisor  # noqa: E402
from mlgo_host.channel.codec import Observation  # noqa: E402
from mlgo_host.channel.session import run_session  # noqa: E402
from mlgo_host.episode import EpisodeRecorder  # noqa: E402
from mlgo_host.fsutil import atomic_write_json  # noqa: E402
from mlgo_host.policies import load_policy  # noqa: E402
from mlgo_host.policies.actor import NumpyActor, NumpyPolicy  # noqa: E402
from mlgo_host.policies.specs import PolicySpec  # noqa: E402
from mlgo_host.policies.vocab import NormConfig, VocabBuilder  # noqa: E402

LAYERS = (40, 40, 20)


def he_weights(d, layers, outs, seed=0):
    rng = np.random.default_rng(seed)
    w = {}
    for i, u in enumerate(layers):
        w[f"hidden_{i}_kernel"] = rng.normal(0, np.sqrt(2.0 / d), (d, u)).astype(np.float32)
        w[f"hidden_{i}_bias"] = rng.normal(0, 0.1, u).astype(np.float32)
        d = u
    w["logits_kernel"] = rng.normal(0, 2.0 / np.sqrt(d), (d, outs)).astype(np.float32)
    w["logits_bias"] = np.zeros(outs, np.float32)
    return w


def session(tmp, advisor, source, opt):
    src = os.path.join(tmp, f"{advisor}.c")
    with open(src, "w") as f:
        f.write(source)
    adv = ready_advisor(advisor, "clang-19")
    res = run_session(["clang-19", opt, "-c", src, "-o", os.path.join(tmp, f"{advisor}.o")], adv,
                      load_policy("default"), recorder=EpisodeRecorder(), timeout=300)
    if res.returncode != 0 or res.episode is None:
        raise SystemExit(f"compile failed: {res.stderr_tail[-400:]}")
    ep = res.episode
    nb = res.header.observation_nbytes
    obs = [Observation(i, "", ep.raw[i * nb:(i + 1) * nb], res.header) for i in range(ep.n)]
    return res.header, ep, adv, obs


def per_decision_us(fn, obs, reps):
    """(median CPU µs, median wall µs, min wall µs) per decision over ``reps``
    passes.  CPU time (this process) is the primary figure: on a shared
    machine the wall time also counts the time other processes ran."""
    cpu, wall = [], []
    for _ in range(reps):
        c0, t0 = time.process_time(), time.perf_counter()
        for o in obs:
            fn(o)
        wall.append((time.perf_counter() - t0) / len(obs) * 1e6)
        cpu.append((time.process_time() - c0) / len(obs) * 1e6)
    return statistics.median(cpu), statistics.median(wall), min(wall)


def numpy_policy(header, ep, adv, cfg, seed=0):
    vb = VocabBuilder()
    vb.add(ep.features())
    vocab = vb.build()
    spec = PolicySpec.from_header(header, adv, vocab_names=vocab.names())
    outs = 2 if spec.action.kind == "binary" else 1
    actor = NumpyActor(spec, vocab, cfg, he_weights(len(spec.inputs) * cfg.width, LAYERS, outs, seed))
    return actor


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15, help="passes over the observations per figure")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the numpy inliner figures (best one kept)")
    ap.add_argument("--pause", type=float, default=2.0, help="seconds between rounds")
    ap.add_argument("--tf-decisions", type=int, default=300, help="decisions timed for each TensorFlow variant")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "policy.json"))
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="mlgo-bench-policy-")
    results: dict = {"loadavg_start": list(os.getloadavg()), "cpu": platform.processor() or platform.machine(),
                     "python": platform.python_version(), "numpy": np.__version__, "layers": list(LAYERS),
                     "reps": args.reps}
    header, ep, adv, obs = session(tmp, "inline", synth.inline_module(330, seed=2), "-Oz")
    results["inliner_decisions"] = len(obs)
    results["inliner_features"] = len(header.features)
    rows = []
    for label, cfg in (("square", NormConfig()), ("sqrt+z", NormConfig(with_sqrt=True, with_z_score=True))):
        actor = numpy_policy(header, ep, adv, cfg)
        results.setdefault("inliner_inputs", len(actor.spec.inputs))
        samp = NumpyPolicy(actor, greedy=False, seed=0)
        samp.bind(header, adv)
        greedy = NumpyPolicy(actor, greedy=True)
        greedy.bind(header, adv)
        for name, pol, fn in (("sample", samp, samp.act_logp), ("greedy", greedy, greedy.act)):
            # several rounds a few seconds apart: other processes on a shared
            # machine disturb some; the best round's median is the figure
            rounds = []
            for r in range(args.rounds):
                if r:
                    time.sleep(args.pause)
                rounds.append(per_decision_us(fn, obs, args.reps))
            cpu, med, mn = min(rounds)
            key = f"numpy_inliner_{label}_{name}"
            results[key + "_cpu_us"] = round(cpu, 2)
            results[key + "_cpu_rounds_us"] = [round(r[0], 2) for r in rounds]
            results[key + "_wall_us"] = round(med, 2)
            results[key + "_wall_min_us"] = round(mn, 2)
            rows.append((f"numpy inliner {name} ({label}{', fast path' if pol.fast_path else ''})", cpu, med, mn))
    eh, eep, eadv, eobs = session(tmp, "regalloc-evict", synth.pressure_module(2, 36, seed=4), "-O2")
    eact = numpy_policy(eh, eep, eadv, NormConfig())
    ep_s = NumpyPolicy(eact, greedy=False, seed=0)
    ep_s.bind(eh, eadv)
    cpu, med, mn = per_decision_us(ep_s.act_logp, eobs, max(3, args.reps // 3))
    results["numpy_eviction_sample_cpu_us"] = round(cpu, 2)
    results["numpy_eviction_sample_wall_us"] = round(med, 2)
    results["eviction_width"] = eact.spec.width
    results["eviction_decisions"] = len(eobs)
    rows.append((f"numpy eviction sample (W={eact.spec.width})", cpu, med, mn))

    # -- TensorFlow, same inliner weights ------------------------------------
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from mlgo_host.learning import export
    from mlgo_host.learning.networks import build_actor_network
    from mlgo_host.learning.weights import import_actor_weights

    cfg = NormConfig()
    actor = numpy_policy(header, ep, adv, cfg)
    net = build_actor_network(actor.spec, actor.vocab, cfg, fc_layer_params=LAYERS)
    import_actor_weights(net, actor.weights())
    spec = actor.spec
    tobs = obs[: args.tf_decisions]

    def tensors(o):
        rec = o.record
        return {f.name: tf.constant(rec[f.name].reshape((1,) + f.tf_shape)) for f in spec.features}

    sm_dir = os.path.join(tmp, "sm")
    export.write_saved_model(sm_dir, net, spec)
    sm = tf.saved_model.load(sm_dir)
    sig = sm.signatures["action"]
    extra = {"step_type": tf.constant([1], tf.int32), "reward": tf.constant([0.0]), "discount": tf.constant([1.0])}

    def sm_act(o):
        return int(sig(**tensors(o), **extra)["inlining_decision"].numpy()[0])

    @tf.function
    def tf_step(obs_t):
        dist, _ = net(obs_t, step_type=None, network_state=(), training=False)
        a = dist.sample()
        return a, dist.log_prob(a)

    def tf_act(o):
        a, lp = tf_step(tensors(o))
        return int(a.numpy()[0]), float(lp.numpy()[0])

    for name, fn in (("SavedModel action signature (greedy)", sm_act), ("tf.function actor + sampling", tf_act)):
        for o in tobs[:20]:
            fn(o)  # warm up / trace
        cpu, med, mn = per_decision_us(fn, tobs, 3)
        key = "savedmodel" if name.startswith("Saved") else "tf_function"
        results[key + "_cpu_us"] = round(cpu, 1)  # all TF threads
        results[key + "_wall_us"] = round(med, 1)
        rows.append((f"TF {name}", cpu, med, mn))
    # the greedy decisions agree (same weights)
    g = NumpyPolicy(actor, greedy=True)
    g.bind(header, adv)
    results["savedmodel_agrees_with_numpy"] = all(sm_act(o) == g.act(o) for o in tobs[:100])
    results["loadavg_end"] = list(os.getloadavg())
    results["target_us"] = 10.0
    results["meets_target"] = results["numpy_inliner_square_sample_cpu_us"] <= 10.0

    print(f"{'per decision, batch 1':52s} {'CPU µs':>9s} {'wall µs':>9s} {'min wall':>9s}")
    for name, cpu, med, mn in rows:
        print(f"{name:52s} {cpu:9.2f} {med:9.2f} {mn:9.2f}")
    print(f"inliner: {results['inliner_decisions']} real decisions, {results['inliner_inputs']} input features; "
          f"load average {results['loadavg_start'][0]:.1f} -> {results['loadavg_end'][0]:.1f}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    atomic_write_json(args.out, results)
    print(f"wrote {args.out}")
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
