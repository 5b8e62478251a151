"""Spec and codec unit tests: the ten C types, shapes, JSON round trips,
headers with score, outcome records, training-log files, typed errors."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from mlgo_host.channel import codec
from mlgo_host.channel.codec import AdviceEncoder, Context, Decoder, Header, Observation, Outcome
from mlgo_host.channel.spec import TensorSpec, c_types, record_dtype
from mlgo_host.errors import ProtocolError

def encode_outcome(index: int, payload: bytes) -> bytes:
    return b'{"outcome":%d}\n' % index + payload + b"\n"


def encode_records(records) -> bytes:
    """The stream of ``records``: the inverse of :func:`codec.decode`."""
    parts = []
    for r in records:
        if isinstance(r, Header):
            parts.append(codec.encode_header(r))
        elif isinstance(r, Context):
            parts.append(codec.encode_context(r.name))
        elif isinstance(r, Observation):
            parts.append(codec.encode_observation(r.index, r.raw))
        elif isinstance(r, Outcome):
            parts.append(encode_outcome(r.index, np.ascontiguousarray(r.value).tobytes()))
    return b"".join(parts)


ALL_TYPES = ["float", "double", "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t", "int64_t", "uint64_t"]
SIZES = dict(zip(ALL_TYPES, [4, 8, 1, 1, 2, 2, 4, 4, 8, 8]))


def test_all_ten_types_known():
    assert sorted(c_types()) == sorted(ALL_TYPES)
    for t in ALL_TYPES:
        assert c_types()[t].itemsize == SIZES[t]
        assert c_types()[t] == c_types()[t].newbyteorder("<")  # little-endian, whatever the host


@pytest.mark.parametrize("ctype", ALL_TYPES)
@pytest.mark.parametrize("shape", [(), (1,), (3,), (2, 5), (1, 33), (0,)])
def test_spec_json_roundtrip_and_bytes(ctype, shape):
    s = TensorSpec("t", ctype, shape, port=2)
    assert s.nbytes == SIZES[ctype] * int(np.prod(shape, dtype=np.int64))
    j = json.loads(json.dumps(s.to_json()))
    assert j == {"name": "t", "port": 2, "type": ctype, "shape": list(shape)}
    assert TensorSpec.from_json(j) == s


@pytest.mark.parametrize("bad,words", [
    ({"name": "x", "type": "bfloat16", "shape": [1]}, "unknown type 'bfloat16'"),
    ({"name": "x", "type": "float", "shape": [-1]}, "bad shape"),
    ({"name": "x", "type": "float", "shape": "1"}, "list of integers"),
    ({"name": "x", "type": "float", "shape": [True]}, "list of integers"),
    ({"name": "", "type": "float", "shape": [1]}, "non-empty"),
    ({"name": "x", "type": "float"}, "missing key 'shape'"),
    ({"name": "x", "type": "float", "shape": [1 << 20, 1 << 20]}, "larger than"),
    ({"name": "x", "type": "float", "shape": [1] * 40}, "bad shape"),
    ({"name": "x", "type": 3, "shape": [1]}, "type must be a string"),
    ([1, 2], "expected an object"),
])
def test_spec_errors(bad, words):
    with pytest.raises(ProtocolError, match=None) as e:
        TensorSpec.from_json(bad)
    assert words in str(e.value)


def _header(with_score=False):
    feats = tuple(TensorSpec(f"f_{t}", t, (2, 3) if i % 3 == 0 else (1,)) for i, t in enumerate(ALL_TYPES))
    score = TensorSpec("reward", "float", (1,)) if with_score else None
    return Header(features=feats, advice=TensorSpec("inlining_decision", "int64_t", (1,)), score=score)


def _values(hdr, seed):
    rng = np.random.default_rng(seed)
    rec = np.zeros(1, dtype=hdr.record_dtype)
    for f in hdr.features:
        info = np.finfo(f.dtype) if f.dtype.kind == "f" else np.iinfo(f.dtype)
        if f.dtype.kind == "f":
            v = rng.standard_normal(f.shape or ()) * 1e3
        else:
            v = rng.integers(info.min, info.max, size=f.shape or (), dtype=f.dtype, endpoint=True)
        rec[f.name][0] = v
    # make sure the bytes contain newlines: decoding must go by count
    rec["f_uint8_t"][0] = 10
    return rec


def test_first_values_reads_each_named_features_first_element_in_the_order_asked():
    # every type, tensors of 6 elements among them, names out of offset order and repeated
    hdr = _header()
    rec = _values(hdr, seed=3)
    names = ["f_double", "f_int8_t", "f_int64_t", "f_double", "f_uint8_t", "f_float"]
    got = hdr.first_values(names)(rec.tobytes())
    assert got == tuple(rec[n][0].ravel()[0].item() for n in names)
    with pytest.raises(KeyError):
        hdr.first_values(["nope"])


def test_header_json_roundtrip_with_score():
    h = _header(with_score=True)
    line = codec.encode_header(h)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert b'"score"' in line
    h2 = codec.decode(line)[0]
    assert h2 == h
    assert h2.observation_nbytes == sum(f.nbytes for f in h.features)
    assert h2.record_dtype.itemsize == h2.observation_nbytes
    # offsets are the packed layout
    off = 0
    for f in h.features:
        assert h2.offset(f.name) == off
        off += f.nbytes


def test_stream_roundtrip_all_types_and_outcomes():
    h = _header(with_score=True)
    parts = [codec.encode_header(h), codec.encode_context("main")]
    recs = []
    for i in range(4):
        rec = _values(h, i)
        parts.append(codec.encode_observation(i, rec.tobytes()))
        recs.append(rec)
    parts.append(codec.encode_context("other"))
    parts.append(codec.encode_observation(0, recs[0].tobytes()))
    parts.append(encode_outcome(0, np.float32(0.25).tobytes()))
    stream = b"".join(parts)
    out = codec.decode(stream)
    assert [type(r).__name__ for r in out] == ["Header", "Context"] + ["Observation"] * 4 + ["Context", "Observation", "Outcome"]
    obs = [r for r in out if isinstance(r, Observation)]
    for o, rec in zip(obs, recs + [recs[0]]):
        for f in h.features:
            got = o[f.name]
            assert got.dtype == f.dtype and got.shape == f.shape
            np.testing.assert_array_equal(got, rec[f.name][0])
    assert obs[-1].context == "other" and obs[0].context == "main"
    oc = out[-1]
    assert isinstance(oc, Outcome) and oc.index == 0 and oc.context == "other"
    assert oc.value.dtype == np.float32 and oc.value.shape == (1,) and oc.value[0] == 0.25
    assert encode_records(out) == stream


def test_training_log_file_roundtrip(tmp_path):
    """A log like clang's -training-log: advice as last feature, score, outcome."""
    h = _header()
    log_h = dataclasses.replace(h.as_training_log(), score=TensorSpec("reward", "float", (1,)))
    assert log_h.features[-1] == h.advice and log_h.advice is None and log_h.score is not None
    parts = [codec.encode_header(log_h), codec.encode_context("")]
    for i in range(50):
        raw = _values(h, i).tobytes() + np.int64(i % 2).tobytes()
        parts.append(codec.encode_observation(i, raw))
    parts.append(encode_outcome(49, np.float32(-1.5).tobytes()))
    p = tmp_path / "log"
    p.write_bytes(b"".join(parts))
    recs = list(codec.iter_log(str(p), chunk=97))
    obs = [r for r in recs if isinstance(r, Observation)]
    assert len(obs) == 50
    assert [int(o["inlining_decision"][0]) for o in obs] == [i % 2 for i in range(50)]
    assert encode_records(recs) == p.read_bytes()


@pytest.mark.parametrize("ctype", ALL_TYPES)
def test_advice_encoder_every_type(ctype):
    enc = AdviceEncoder(TensorSpec("a", ctype, (1,)))
    b = enc.encode(1)
    assert len(b) == SIZES[ctype]
    assert np.frombuffer(b, dtype=c_types()[ctype])[0] == 1
    enc3 = AdviceEncoder(TensorSpec("a", ctype, (3,)))
    assert len(enc3.encode([1, 2, 3])) == 3 * SIZES[ctype]
    with pytest.raises(ProtocolError, match="3 values for shape"):
        AdviceEncoder(TensorSpec("a", ctype, (2,))).encode([1, 2, 3])


def test_advice_encoder_float_and_numpy():
    assert AdviceEncoder(TensorSpec("p", "float", (1,))).encode(2.5) == np.float32(2.5).tobytes()
    assert AdviceEncoder(TensorSpec("i", "int64_t", (1,))).encode(np.int64(7)) == np.int64(7).tobytes()


def _small_stream():
    h = Header(features=(TensorSpec("a", "int64_t", (1,)), TensorSpec("b", "float", (2,))),
               advice=TensorSpec("inlining_decision", "int64_t", (1,)))
    raw = np.int64(10).tobytes() + np.array([1.0, 2.0], "<f4").tobytes()
    return h, raw


@pytest.mark.parametrize("tail,words", [
    (b'{"observation":0}\n' + b"x" * 16 + b"Y", "expected '\\n' after 16 tensor bytes, got byte 0x59"),
    (b'{"observation":-1}\n', "bad observation index"),
    (b'{"observation":01}\n', "not JSON"),
    (b'{"bogus":1}\n', "unknown event 'bogus'"),
    (b'{"context":5}\n', "context name must be a string"),
    (b'{"outcome":0}\n', "no score spec"),
    (b"[[[[" * 5000 + b"\n", "not JSON"),
    (b"\xff\xfe\n", "not JSON"),
])
def test_decoder_errors_say_where(tail, words):
    h, raw = _small_stream()
    head = codec.encode_header(h) + codec.encode_context("ctx") + codec.encode_observation(0, raw)
    with pytest.raises(ProtocolError) as e:
        codec.decode(head + tail)
    assert words in str(e.value)
    assert e.value.offset is not None and e.value.offset >= len(head)
    assert e.value.context == "ctx"
    assert "after 1 observations" in str(e.value)


@pytest.mark.parametrize("cut", [1, 10, 30])
def test_truncated_stream_detected_on_close(cut):
    h, raw = _small_stream()
    stream = codec.encode_header(h) + codec.encode_observation(0, raw) + codec.encode_observation(1, raw)
    d = Decoder()
    recs = d.feed(stream[:-cut])
    assert sum(isinstance(r, Observation) for r in recs) == 1
    with pytest.raises(ProtocolError, match="stream ended while waiting for"):
        d.close()


def test_garbage_header():
    with pytest.raises(ProtocolError, match="header is not JSON") as e:
        codec.decode(b"\x89PNG\r\n")
    assert e.value.offset == 0
    with pytest.raises(ProtocolError, match="duplicate feature names"):
        codec.decode(b'{"features":[{"name":"a","type":"float","shape":[1]},{"name":"a","type":"float","shape":[1]}]}\n')
    with pytest.raises(ProtocolError, match="'features' must be a list"):
        codec.decode(b'{"advice":{}}\n')


def test_frame_one_matches_feed():
    h, raw = _small_stream()
    d1, d2 = Decoder(), Decoder()
    head = codec.encode_header(h) + codec.encode_context("c")
    d1.feed(head)
    d2.feed(head)
    for i in (0, 7, 12345, 10 ** 15):
        chunk = codec.encode_observation(i, raw)
        nl = d1.frame_one(chunk)
        (b,) = d2.feed(chunk)
        assert nl >= 0 and (int(chunk[15 : nl - 1]), chunk[nl + 1 : -1]) == (b.index, b.raw)
        assert d1.offset == d2.offset and d1.observations == d2.observations
    # not exactly one observation: declines without consuming
    for chunk in (codec.encode_observation(1, raw)[:-1], codec.encode_observation(1, raw) * 2,
                  b'{"observation":01}\n' + raw + b"\n", codec.encode_context("x")):
        off = d1.offset
        assert d1.frame_one(chunk) == -1 and d1.offset == off


def test_record_dtype_is_packed():
    specs = [TensorSpec("a", "int8_t", (1,)), TensorSpec("b", "double", (2,)), TensorSpec("c", "int16_t", ())]
    dt = record_dtype(specs)
    assert dt.itemsize == 1 + 16 + 2
    arr = np.frombuffer(bytes(range(19)), dtype=dt)
    assert arr["a"][0][0] == 0 and arr["c"][0] == int.from_bytes(bytes([17, 18]), "little")
