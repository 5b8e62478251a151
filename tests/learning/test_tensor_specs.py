"""The tf-agents specs of a policy and the observation dicts built from
records: every feature of the header, in the spec's shapes and dtypes;
discarded features the records lack are zeros, a missing input is refused."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")

from _policy_helpers import spec_vocab  # noqa: E402

from mlgo_host.errors import ConfigError  # noqa: E402
from mlgo_host.learning.tensor_specs import action_spec, numpy_observations, observation_spec  # noqa: E402


@pytest.mark.parametrize("session_name", ["inline_session", "evict_session"])
def test_specs_cover_every_feature_and_action(request, session_name):
    session = request.getfixturevalue(session_name)
    spec, _ = spec_vocab(session)
    obs = observation_spec(spec)
    assert list(obs) == [f.name for f in spec.features]
    for f in spec.features:
        assert obs[f.name].shape == f.tf_shape
    act = action_spec(spec)
    assert (int(act.minimum), int(act.maximum)) == (0, spec.num_actions - 1)
    ep = session[1]
    for name, v in numpy_observations(spec, ep.features()).items():
        assert v.shape == (ep.n,) + obs[name].shape and v.dtype == obs[name].dtype.as_numpy_dtype


def test_records_without_a_feature(inline_session):
    spec, _ = spec_vocab(inline_session)
    feats = inline_session[1].features()
    names = list(feats.dtype.names)
    discarded = next(f.name for f in spec.features if f.name in spec.discarded and f.name in names)
    kept = {n: feats[n] for n in names if n != discarded}
    out = numpy_observations(spec, kept)
    assert not out[discarded].any()
    used = spec.input_names[0]
    with pytest.raises(ConfigError, match=f"no feature '{used}'"):
        numpy_observations(spec, {n: feats[n] for n in names if n != used})
