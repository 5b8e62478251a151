"""Helpers shared by the policy and learning tests."""

from __future__ import annotations

import numpy as np

from mlgo_host.policies.vocab import NormConfig

#: the normalizations the TF and numpy sides must agree on
NORM_CONFIGS = [NormConfig(), NormConfig(with_sqrt=True), NormConfig(with_sqrt=True, with_z_score=True)]
NORM_IDS = ["square", "sqrt", "all"]


def spec_vocab(session, buckets: int = 300):
    """The policy spec and a quantile vocab of one session's episode."""
    from mlgo_host.policies.specs import PolicySpec
    from mlgo_host.policies.vocab import VocabBuilder

    header, ep, adv = session
    vb = VocabBuilder()
    vb.add(ep.features())
    vocab = vb.build(buckets)
    return PolicySpec.from_header(header, adv, vocab_names=vocab.names()), vocab


def observations(header, episode):
    """The episode's observations as Observation objects (what a session hands a policy)."""
    from mlgo_host.channel.codec import Observation

    nb = header.observation_nbytes
    return [Observation(i, "", episode.raw[i * nb:(i + 1) * nb], header) for i in range(episode.n)]


def random_weights(input_dim: int, layers, outputs: int, seed: int = 0, gain: float = 1.0) -> dict:
    """He-scaled random dense weights (logits of order 1, like a trained actor's)."""
    rng = np.random.default_rng(seed)
    w = {}
    d = input_dim
    for i, u in enumerate(layers):
        w[f"hidden_{i}_kernel"] = rng.normal(0, gain * np.sqrt(2.0 / d), (d, u)).astype(np.float32)
        w[f"hidden_{i}_bias"] = rng.normal(0, 0.1, u).astype(np.float32)
        d = u
    w["logits_kernel"] = rng.normal(0, 2.0 / np.sqrt(d), (d, outputs)).astype(np.float32)
    w["logits_bias"] = rng.normal(0, 0.1, outputs).astype(np.float32)
    return w


def write_saved_policy(path, actor, compiler: str | None = None) -> str:
    """A saved policy directory of a numpy actor, written without TensorFlow
    (what :func:`mlgo_host.learning.export.save_policy` writes, minus the
    SavedModel)."""
    import json
    import os

    from mlgo_host.policies.saved import FORMAT, METADATA, VOCAB_DIR, WEIGHTS

    path = str(path)
    os.makedirs(os.path.join(path, VOCAB_DIR))
    actor.save_weights(os.path.join(path, WEIGHTS), actor.weights())
    actor.vocab.write_into(os.path.join(path, VOCAB_DIR))
    spec = actor.spec
    md = {"format": FORMAT, "advisor": spec.advisor, "spec": spec.to_json(), "norm": actor.norm.to_json(),
          "activation": actor.activation, "input_features": list(spec.input_names), "compiler": compiler,
          "default_slot": spec.default_slot, "feature_meanings": spec.feature_meanings()}
    with open(os.path.join(path, METADATA), "w") as f:
        json.dump(md, f)
    return path


#: libstdc++ code where the shipped policy leaves the compiler's default at
#: some sites, and its object is smaller than -Oz's
LIBSTDCXX_MODULE = r"""
#include <algorithm>
#include <map>
#include <string>
#include <vector>
std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string r;
  for (size_t i = 0; i < v.size(); ++i) { if (i) r += sep; r += v[i]; }
  return r;
}
std::map<std::string, int> count(const std::vector<std::string>& v) {
  std::map<std::string, int> m;
  for (auto& s : v) m[s]++;
  return m;
}
std::vector<int> sorted_lengths(const std::vector<std::string>& v) {
  std::vector<int> r;
  for (auto& s : v) r.push_back((int)s.size());
  std::sort(r.begin(), r.end());
  return r;
}
"""
