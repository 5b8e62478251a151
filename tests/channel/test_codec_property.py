"""Property tests of the decoder: any chunking of a valid stream gives the
same records; random and mutated streams give correct records or the codec's
own ProtocolError, never another exception and never chunking-dependent
results."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlgo_host.channel import codec
from mlgo_host.channel.codec import Context, Decoder, Header, Observation, Outcome
from mlgo_host.channel.spec import TensorSpec, c_types
from mlgo_host.errors import ProtocolError

from test_codec import encode_records

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

names = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8)
specs = st.builds(lambda n, t, s: TensorSpec(n, t, tuple(s)), names, st.sampled_from(sorted(c_types())),
                  st.lists(st.integers(0, 4), max_size=2))


@st.composite
def streams(draw):
    feats = draw(st.lists(specs, min_size=1, max_size=5, unique_by=lambda s: s.name))
    score = draw(st.sampled_from([None, TensorSpec("reward", "float", (1,)), TensorSpec("r", "double", (2,))]))
    hdr = Header(tuple(feats), advice=TensorSpec("inlining_decision", "int64_t", (1,)), score=score)
    recs: list = [hdr]
    ctx = ""
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["ctx", "obs", "obs", "out"] if score else ["ctx", "obs", "obs"]))
        if kind == "ctx":
            ctx = draw(names | st.just(""))
            recs.append(Context(ctx))
        elif kind == "obs":
            raw = draw(st.binary(min_size=hdr.observation_nbytes, max_size=hdr.observation_nbytes))
            recs.append(Observation(draw(st.integers(0, 10 ** 6)), ctx, raw, hdr))
        else:
            val = np.frombuffer(draw(st.binary(min_size=score.nbytes, max_size=score.nbytes)), dtype=score.dtype)
            recs.append(Outcome(draw(st.integers(0, 99)), ctx, val.reshape(score.shape)))
    return recs, encode_records(recs)


def chunked(data: bytes, cuts: list[int]):
    d = Decoder()
    out = []
    prev = 0
    for c in sorted(set(x % (len(data) + 1) for x in cuts)) + [len(data)]:
        out += d.feed(data[prev:c])
        prev = c
    d.close()
    return out


def same_records(a, b) -> None:
    assert [type(r) for r in a] == [type(r) for r in b]
    assert encode_records(a) == encode_records(b)
    for x, y in zip(a, b):
        if isinstance(x, Observation):
            assert (x.index, x.context, x.raw) == (y.index, y.context, y.raw)


@SETTINGS
@given(streams(), st.lists(st.integers(0, 10 ** 6), max_size=12))
def test_any_chunking_same_records(s, cuts):
    recs, data = s
    whole = codec.decode(data)
    same_records(whole, recs)
    same_records(chunked(data, cuts), recs)
    # contexts are attached to the observations that follow them
    ctx = ""
    for r in whole:
        if isinstance(r, Context):
            ctx = r.name
        elif isinstance(r, Observation):
            assert r.context == ctx
            for f in r.header.features:
                assert r[f.name].shape == f.shape


@settings(max_examples=20, deadline=None)
@given(streams())
def test_byte_by_byte(s):
    recs, data = s
    same_records(chunked(data, list(range(len(data)))), recs)


def outcome(data: bytes, cuts):
    try:
        return "ok", chunked(data, cuts)
    except ProtocolError as e:  # the only exception allowed
        assert e.offset is None or 0 <= e.offset <= len(data)
        return "error", str(e)


@st.composite
def mutated(draw):
    _, data = draw(streams())
    b = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "splice"]))
        i = draw(st.integers(0, max(len(b) - 1, 0)))
        if op == "flip" and b:
            b[i] = draw(st.integers(0, 255))
        elif op == "insert":
            b[i:i] = draw(st.sampled_from([b"\n", b"{", b'{"observation":1}\n', b'{"context":"x"}\n', b"\x00"]))
        elif op == "delete" and b:
            del b[i:i + draw(st.integers(1, 5))]
        elif op == "truncate":
            del b[i:]
        elif op == "splice":
            b[i:i] = draw(st.binary(max_size=20))
    return bytes(b)


@SETTINGS
@given(mutated(), st.lists(st.integers(0, 10 ** 6), max_size=8))
def test_mutated_streams_records_or_protocol_error(data, cuts):
    a = outcome(data, [])
    b = outcome(data, cuts)
    assert a[0] == b[0]
    if a[0] == "error":
        assert a[1] == b[1]  # same message, same offset, whatever the chunking
    else:
        same_records(a[1], b[1])
        assert not a[1] or isinstance(a[1][0], Header)
        # records that decode are self-consistent: re-encoding round-trips
        same_records(codec.decode(encode_records(a[1])), a[1])


@SETTINGS
@given(st.binary(max_size=300), st.lists(st.integers(0, 10 ** 6), max_size=6))
def test_random_bytes_records_or_protocol_error(data, cuts):
    a = outcome(data, [])
    b = outcome(data, cuts)
    assert a[0] == b[0]
