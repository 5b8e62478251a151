"""Pure codec (no I/O) of the interactive channel and of clang's training logs::

    <header JSON>\\n
    {"context":"name"}\\n
    {"observation":n}\\n<feature bytes, header order>\\n
    {"outcome":n}\\n<score bytes>\\n          (training logs only)

Tensor bytes may contain ``\\n``: they are consumed by byte count, never by line.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import struct
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, Union

from mlgo_host.channel.spec import FORMATS, TensorSpec, record_dtype
from mlgo_host.errors import ProtocolError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

# numpy is imported where a tensor becomes an array: the default inliner session never needs it.

#: a header line longer than this is garbage (protects memory)
MAX_LINE = 1 << 20


@dataclasses.dataclass(frozen=True)
class Header:
    """The first line of a stream: feature specs, advice spec, optional score."""

    features: tuple[TensorSpec, ...]
    advice: TensorSpec | None = None
    score: TensorSpec | None = None

    def __post_init__(self) -> None:
        names = [f.name for f in self.features]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ProtocolError(f"header: duplicate feature names {sorted(dup)}")
        starts = list(itertools.accumulate((f.nbytes for f in self.features), initial=0))
        object.__setattr__(self, "_offsets", dict(zip(names, starts)))
        object.__setattr__(self, "_nbytes", starts[-1])

    @functools.cached_property
    def record_dtype(self) -> "np.dtype":  # built on first use (imports numpy)
        return record_dtype(self.features)

    @property
    def observation_nbytes(self) -> int:
        return self._nbytes  # type: ignore[attr-defined]

    def offset(self, name: str) -> int:
        return self._offsets[name]  # type: ignore[attr-defined]

    def feature(self, name: str) -> TensorSpec | None:
        return next((f for f in self.features if f.name == name), None)

    def first_values(self, names: Sequence[str]) -> Callable[[bytes], tuple]:
        """A reader of the first element of each of ``names`` from an observation's raw bytes
        (one ``struct`` call, no numpy); KeyError for a name the header lacks."""
        fields = sorted({(self.offset(n), n) for n in names})
        fmt, pos = "<", 0
        for off, n in fields:
            fmt += "x" * (off - pos) + FORMATS[self.feature(n).ctype][0][1:]  # type: ignore[union-attr]
            pos = off + self.feature(n).itemsize  # type: ignore[union-attr]
        unpack = struct.Struct(fmt).unpack_from
        at = {n: i for i, (_, n) in enumerate(fields)}
        order = [at[n] for n in names]
        return lambda raw: tuple(v[i] for v in (unpack(raw),) for i in order)

    @classmethod
    def from_json(cls, obj: Any) -> "Header":
        if not isinstance(obj, dict):
            raise ProtocolError("header: expected a JSON object", offset=0)
        feats = obj.get("features")
        if not isinstance(feats, list):
            raise ProtocolError("header: 'features' must be a list", offset=0)
        features = tuple(TensorSpec.from_json(f, f"header feature #{i}") for i, f in enumerate(feats))
        advice, score = obj.get("advice"), obj.get("score")
        return cls(features, None if advice is None else TensorSpec.from_json(advice, "header advice"),
                   None if score is None else TensorSpec.from_json(score, "header score"))

    def to_json(self) -> dict:
        d: dict[str, Any] = {"features": [f.to_json() for f in self.features]}
        if self.score is not None:
            d["score"] = self.score.to_json()
        if self.advice is not None:
            d["advice"] = self.advice.to_json()
        return d

    def as_training_log(self) -> "Header":
        """The header of this session's training log: the advice becomes the last feature (as LLVM logs it)."""
        if self.advice is None:
            raise ProtocolError("header has no advice spec to log")
        return Header(features=self.features + (self.advice,))


class Observation:
    """One observation; features are decoded lazily (``obs["name"]``, ``obs.record``) from ``raw``."""

    __slots__ = ("index", "context", "raw", "header", "_rec")

    def __init__(self, index: int, context: str, raw: bytes, header: Header):
        self.index = index
        self.context = context
        self.raw = raw
        self.header = header
        self._rec = None

    @property
    def record(self) -> "np.ndarray":
        if self._rec is None:
            import numpy as np

            self._rec = np.frombuffer(self.raw, dtype=self.header.record_dtype, count=1)
        return self._rec

    def __getitem__(self, name: str) -> "np.ndarray":
        return self.record[name][0]

    def __contains__(self, name: str) -> bool:
        return name in self.header.record_dtype.names

    def __repr__(self) -> str:
        return f"Observation(index={self.index}, context={self.context!r}, nbytes={len(self.raw)})"


@dataclasses.dataclass(frozen=True)
class Context:
    name: str


@dataclasses.dataclass(frozen=True)
class Outcome:
    index: int
    context: str
    value: "np.ndarray"


Record = Union[Header, Context, Observation, Outcome]

_OBS_PREFIX = b'{"observation":'
_NO_FAST = -(1 << 40)


class Decoder:
    """Incremental: ``feed(bytes)`` returns the records completed so far (the :class:`Header`
    first), whatever the chunking; :meth:`close` detects a truncated tail."""

    def __init__(self) -> None:
        self.header: Header | None = None
        self.context: str | None = None
        self._buf = b""
        self.offset = 0  # stream offset of self._buf[0]: the next byte not decoded
        self._pending: tuple[str, int, int] | None = None
        self.observations = 0
        self._ctx = ""  # self.context or ""
        self._obs_total = -1  # observation_nbytes + 2 once the header is known
        self._fast = _NO_FAST  # _obs_total when nothing is buffered (see frame_one)

    def frame_one(self, data: bytes) -> int:
        """When nothing is buffered and ``data`` is exactly one canonical observation (how the
        compiler writes it), consume it and return the position ``nl`` of its event line's ``\\n``
        (tensor bytes ``data[nl + 1 : -1]``, index ``data[15 : nl - 1]``); else -1, consuming nothing."""
        nl = data.find(10)
        # _fast == observation_nbytes + 2 when nothing is buffered, else -1 << 40
        if len(data) == self._fast + nl and 16 < nl < 34 and data[-1] == 10 and data[nl - 1] == 125 \
                and data.startswith(_OBS_PREFIX):
            num = data[15 : nl - 1]
            if num.isdigit() and (num[0] != 48 or nl == 17):
                self.offset += len(data)
                self.observations += 1
                return nl
        return -1

    @property
    def frame_base(self) -> int:
        """While idle, a chunk with its first ``\\n`` at ``nl`` can only be one whole observation
        if ``len(chunk) == frame_base + nl`` (for callers that inline :meth:`frame_one`)."""
        return self._fast

    def skip(self, nbytes: int, observations: int) -> None:
        """Account for whole observations the caller framed itself with :meth:`frame_one`'s test."""
        self.offset += nbytes
        self.observations += observations

    def _err(self, msg: str, at: int) -> ProtocolError:
        return ProtocolError(f"{msg} [after {self.observations} observations]", offset=self.offset + at,
                             context=self.context)

    def feed(self, data: bytes) -> list[Record]:
        buf = self._buf + data if self._buf else bytes(data)
        out: list[Record] = []
        p = 0
        n = len(buf)
        try:
            while p < n:
                pend = self._pending
                if pend is not None:
                    kind, idx, nb = pend
                    if n - p < nb + 1:
                        break
                    if buf[p + nb] != 10:
                        raise self._err(f"{kind} {idx}: expected '\\n' after {nb} tensor bytes, "
                                        f"got byte 0x{buf[p + nb]:02x}", p + nb)
                    payload = buf[p : p + nb]
                    if kind == "observation":
                        out.append(Observation(idx, self._ctx, payload, self.header))  # type: ignore[arg-type]
                        self.observations += 1
                    else:
                        import numpy as np

                        sc = self.header.score  # type: ignore[union-attr]
                        val = np.frombuffer(payload, dtype=sc.dtype).reshape(sc.shape)  # type: ignore[union-attr]
                        out.append(Outcome(idx, self.context or "", val))
                    p += nb + 1
                    self._pending = None
                    continue
                nl = buf.find(b"\n", p)
                if nl < 0:
                    if n - p > MAX_LINE:
                        raise self._err(f"no newline in the first {MAX_LINE} bytes of an event line", p)
                    break
                line = buf[p:nl]
                start = p
                p = nl + 1
                if self.header is None:
                    out.append(self._parse_header(line, start))
                    continue
                # the observation line without json parsing; anything odd goes through json
                if line.startswith(_OBS_PREFIX) and line.endswith(b"}"):
                    num = line[15:-1]
                    if num.isdigit() and (num[0] != 48 or len(num) == 1) and len(num) < 19:
                        self._pending = ("observation", int(num), self.header.observation_nbytes)
                        continue
                rec = self._parse_event(line, start)
                if rec is not None:
                    out.append(rec)
        except ProtocolError:
            self._buf = b""
            self._fast = _NO_FAST
            raise
        self._buf = buf[p:]
        self.offset += p
        self._fast = self._obs_total if (not self._buf and self._pending is None) else _NO_FAST
        return out

    def _parse_event(self, line: bytes, start: int) -> Record | None:
        """A Context, or None after setting up the pending tensor of an outcome (or odd observation)."""
        try:
            ev = json.loads(line)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise self._err(f"event is not JSON: {line[:80]!r}", start) from None
        if not isinstance(ev, dict) or len(ev) != 1:
            raise self._err(f"unexpected event {line[:80]!r}", start)
        ((key, val),) = ev.items()
        if key == "context":
            if not isinstance(val, str):
                raise self._err(f"context name must be a string: {line[:80]!r}", start)
            self.context = self._ctx = val
            return Context(val)
        if key not in ("observation", "outcome"):
            raise self._err(f"unknown event {key!r}", start)
        if not isinstance(val, int) or isinstance(val, bool) or not 0 <= val < 1 << 63:
            raise self._err(f"bad {key} index in {line[:80]!r}", start)
        assert self.header is not None
        if key == "outcome":
            if self.header.score is None:
                raise self._err("outcome record but the header has no score spec", start)
            nb = self.header.score.nbytes
        else:
            nb = self.header.observation_nbytes
        self._pending = (key, val, nb)
        return None

    def _parse_header(self, line: bytes, start: int) -> Header:
        try:
            obj = json.loads(line)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise ProtocolError(f"header is not JSON: {line[:80]!r}", offset=self.offset + start) from None
        try:
            hdr = Header.from_json(obj)
        except ProtocolError as e:
            if e.offset is not None:
                raise
            raise ProtocolError(f"header line: {e.message}", offset=self.offset + start) from None
        self.header = hdr
        self._obs_total = hdr.observation_nbytes + 2
        return hdr

    @property
    def waiting_for(self) -> str:
        """What the decoder expects next (for errors)."""
        if self.header is None:
            return "the header line"
        if self._pending is not None:
            kind, idx, nb = self._pending
            return f"the {nb} tensor bytes and '\\n' of {kind} {idx} ({len(self._buf)} of {nb + 1} received)"
        if self._buf:
            return f"the end of an event line ({len(self._buf)} bytes received: {self._buf[:40]!r})"
        return "an event line"

    @property
    def where(self) -> str:
        ctx = "" if self.context is None else f", context {self.context!r}"
        return f"stream byte {self.offset + len(self._buf)}{ctx}, {self.observations} observations decoded"

    def close(self) -> None:
        """Raise if the stream ended in the middle of a record."""
        if self._pending is not None or self._buf:
            raise self._err(f"stream ended while waiting for {self.waiting_for}", len(self._buf))


def decode(data: bytes) -> list[Record]:
    """Decode a whole stream (e.g. a training log)."""
    d = Decoder()
    out = d.feed(data)
    d.close()
    return out


def iter_log(path: str, chunk: int = 1 << 20) -> Iterator[Record]:
    """Stream the records of a training-log file."""
    d = Decoder()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(chunk), b""):
            yield from d.feed(b)
    d.close()


def encode_header(header: Header) -> bytes:
    return json.dumps(header.to_json(), separators=(",", ":")).encode() + b"\n"


def encode_context(name: str) -> bytes:
    return json.dumps({"context": name}, separators=(",", ":")).encode() + b"\n"


def encode_observation(index: int, payload: bytes) -> bytes:
    return b'{"observation":%d}\n' % index + payload + b"\n"


class AdviceEncoder:
    """Turns an advice value into exactly the advice tensor's bytes."""

    def __init__(self, spec: TensorSpec):
        self.spec = spec
        self._scalar = struct.Struct(FORMATS[spec.ctype][0]) if spec.size == 1 else None

    def encode(self, value: Any) -> bytes:
        if self._scalar is not None:
            np = sys.modules.get("numpy")  # an ndarray means numpy is loaded
            if np is None or not isinstance(value, np.ndarray):
                try:
                    return self._scalar.pack(value)
                except struct.error:
                    pass
        import numpy as np

        arr = np.asarray(value, dtype=self.spec.dtype)
        if arr.size != self.spec.size:
            raise ProtocolError(f"advice {self.spec.name!r}: {arr.size} values for shape {list(self.spec.shape)}")
        return arr.tobytes()
