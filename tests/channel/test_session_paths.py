"""The session loop's paths over real FIFOs, with a thread playing the
compiler: whole observations in one read (``Decoder.frame_one`` fast path,
and the default-flag path that answers without an Observation object), event
lines split from their tensors, records glued together in one write. Every
chunking must give the same advice, counts, episode and training log."""

from __future__ import annotations

import json
import struct
import threading
import time

import pytest

from mlgo_host.channel import codec
from mlgo_host.channel.advisors import InlineAdvisor
from mlgo_host.channel.fifo import Channel
from mlgo_host.channel.session import TrainingLogWriter, serve_channel
from mlgo_host.episode import EpisodeRecorder
from mlgo_host.errors import AdviceError, CompilerError
from mlgo_host.policies import make_heuristic
from mlgo_host.policies.base import Policy

FEATS = [{"name": "callee_users", "port": 0, "type": "int64_t", "shape": [1]},
         {"name": "callee_basic_block_count", "port": 0, "type": "int64_t", "shape": [1]},
         {"name": "inlining_default", "port": 0, "type": "int64_t", "shape": [1]},
         {"name": "weights", "port": 0, "type": "float", "shape": [2, 3]}]
HEADER = {"features": FEATS, "advice": {"name": "inlining_decision", "port": 0, "type": "int64_t", "shape": [1]}}
N = 24


def _default(i: int) -> int:
    return int(i % 3 == 0)


def _tensors(i: int) -> bytes:
    # 10 == '\n' in the tensor bytes on purpose; a nonzero default that is not 1
    return struct.pack("<qqq6f", 10, 7 * _default(i), 0, *([0.5 + i] * 6))


def _events() -> list[tuple[bytes, bool]]:
    """(bytes, expects advice) in the compiler's order."""
    ev = [(json.dumps(HEADER, separators=(",", ":")).encode() + b"\n", False), (b'{"context":"m"}\n', False)]
    for i in range(N):
        ev.append((b'{"observation":%d}\n' % i + _tensors(i) + b"\n", True))
    return ev


class FakeCompiler(threading.Thread):
    """Opens the FIFOs like clang, writes the events per ``plan`` and reads
    the advice after each observation.

    plan: "whole" (one write per record, like clang), "split" (event line and
    tensor bytes in two writes with a pause between), "glued" (header,
    context and first observation in one write; each later context glued to
    the observation after it), "spaced" (valid but not canonical event lines,
    ``{"observation": N}``: never the fast paths), "close_in" (closes its
    advice end before sending observation 3)."""

    def __init__(self, chan: Channel, plan: str):
        super().__init__(daemon=True)
        self.chan, self.plan = chan, plan
        self.advice: list[int] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # reported by the test
            self.error = e

    def _run(self) -> None:
        inp = open(self.chan.in_path, "rb", buffering=0)
        out = open(self.chan.out_path, "wb", buffering=0)
        ev = _events()
        if self.plan == "glued":
            (h, _), (c, _), (o, _) = ev[:3]
            ev = [(h + c + o, True)] + ev[3:]
        elif self.plan == "spaced":
            ev = [(b.replace(b'{"observation":', b'{"observation": ', 1), a) for b, a in ev]
        for k, (b, answer) in enumerate(ev):
            if self.plan == "close_in" and answer and len(self.advice) == 3:
                inp.close()  # before sending observation 3: the host's answer finds no reader
                out.write(b)
                time.sleep(0.5)
                break
            if self.plan == "split" and answer:
                nl = b.index(b"\n")
                out.write(b[: nl + 1])
                time.sleep(0.004)
                out.write(b[nl + 1:])
            else:
                out.write(b)
                if not answer:
                    time.sleep(0.01)  # read on its own, not glued to the next record by the reader
            if answer:
                a = inp.read(8)
                assert len(a) == 8, a
                self.advice.append(struct.unpack("<q", a)[0])
        out.close()
        if not inp.closed:
            inp.close()


def _serve(tmp_path, plan, policy, *, record=False, log=True):
    chan = Channel(parent=str(tmp_path))
    fake = FakeCompiler(chan, plan)
    fake.start()
    lw = TrainingLogWriter(str(tmp_path / f"{plan}.log")) if log else None
    try:
        assert chan.open(fake.is_alive, time.monotonic() + 10)
        st = serve_channel(chan, InlineAdvisor("callee_basic_block_count"), policy,
                           deadline=time.monotonic() + 20, alive=fake.is_alive, recorder=EpisodeRecorder() if record else None, log=lw)
        if lw is not None:
            lw.commit()
            lw = None
    finally:
        if lw is not None:
            lw.abort()
        chan.close_fds()
        fake.join(10)
        chan.close()
    assert fake.error is None, fake.error
    logbytes = (tmp_path / f"{plan}.log").read_bytes() if log else None
    return st, fake.advice, logbytes


@pytest.fixture
def calls(monkeypatch):
    """Counts the calls of InlineAdvisor.default_advice (the default-flag
    path answers without calling it)."""
    n = {"default_advice": 0}
    orig = InlineAdvisor.default_advice

    def counted(self, obs):
        n["default_advice"] += 1
        return orig(self, obs)

    monkeypatch.setattr(InlineAdvisor, "default_advice", counted)
    return n


def _expected_log() -> bytes:
    hdr = codec.Header.from_json(HEADER)
    out = codec.encode_header(hdr.as_training_log()) + codec.encode_context("m")
    for i in range(N):
        out += codec.encode_observation(i, _tensors(i) + struct.pack("<q", _default(i)))
    return out


@pytest.mark.parametrize("policy_name", [None, "default"])
def test_default_answers_same_on_every_chunking(tmp_path, calls, policy_name):
    want = [_default(i) for i in range(N)]
    expected_log = _expected_log()
    for plan, slow in (("whole", 0), ("split", N), ("glued", 1), ("spaced", N)):
        pol = None if policy_name is None else make_heuristic(policy_name)
        calls["default_advice"] = 0
        st, advice, logbytes = _serve(tmp_path, plan, pol)
        assert advice == want, plan
        assert st.observations == N and st.contexts == 1
        assert st.decisions == {"0": want.count(0), "1": want.count(1)}, plan
        assert logbytes == expected_log, plan
        # whole observations in one read take the flag path: no policy call
        assert calls["default_advice"] == slow, plan


class Never(Policy):
    name = "never-spy"

    def __init__(self):
        self.seen = []

    def act(self, obs):
        self.seen.append((obs.index, obs.context, obs.raw))
        return 0


def test_generic_policy_same_on_every_chunking(tmp_path):
    ref = None
    for plan in ("whole", "split", "glued", "spaced"):
        pol = Never()
        st, advice, logbytes = _serve(tmp_path, plan, pol)
        assert advice == [0] * N
        assert pol.seen == [(i, "m", _tensors(i)) for i in range(N)], plan
        assert st.decisions == {"0": N}
        got = (st.observations, st.contexts, logbytes)
        assert ref is None or got == ref, plan
        ref = got


def test_record_same_on_every_chunking(tmp_path):
    eps = []
    for plan in ("whole", "split", "glued"):
        st, advice, _ = _serve(tmp_path, plan, make_heuristic("default"), record=True, log=False)
        assert advice == [_default(i) for i in range(N)]
        eps.append(st.episode)
    for ep in eps:
        assert ep.n == N and ep.raw == b"".join(_tensors(i) for i in range(N))
        assert ep.actions.tolist() == [_default(i) for i in range(N)] and ep.contexts == ["m"] * N


class Illegal(Policy):
    def act(self, obs):
        return 2 if obs.index == 5 else 0


@pytest.mark.parametrize("plan", ["whole", "split"])
def test_illegal_advice_is_never_sent(tmp_path, plan):
    with pytest.raises(AdviceError, match=r"0 or 1, got 2 \(observation 5\)"):
        _serve(tmp_path, plan, Illegal(), log=False)


def test_compiler_closing_its_advice_end(tmp_path):
    with pytest.raises(CompilerError, match="before reading the advice of observation 3"):
        _serve(tmp_path, "close_in", None, log=False)


def test_flag_path_checks_both_answers_once(tmp_path, monkeypatch):
    """The two byte strings of the flag path go through the advisor's check
    when the header arrives."""
    seen = []
    orig = InlineAdvisor.validate

    def spy(self, obs, advice):
        seen.append(advice)
        return orig(self, obs, advice)

    monkeypatch.setattr(InlineAdvisor, "validate", spy)
    _serve(tmp_path, "whole", None, log=False)
    assert sorted(seen) == [0, 1]


def test_frame_one_consumes_only_whole_canonical_observations():
    hdr = codec.Header.from_json(HEADER)
    d = codec.Decoder()
    d.feed(codec.encode_header(hdr) + codec.encode_context("m"))
    ob = codec.encode_observation(12, _tensors(12))
    off = d.offset
    assert d.frame_one(ob) == ob.index(b"\n") and d.offset == off + len(ob) and d.observations == 1
    for bad in (ob[:-1], ob + ob, b'{"observation":012}\n' + _tensors(12) + b"\n", b'{"context":"x"}\n'):
        assert d.frame_one(bad) == -1 and d.offset == off + len(ob)
    # something buffered: the fast path declines until the decoder is idle again
    d.feed(ob[:5])
    assert d.frame_one(ob) == -1
    (o,) = d.feed(ob[5:])
    assert o.index == 12 and d.frame_one(ob) >= 0
