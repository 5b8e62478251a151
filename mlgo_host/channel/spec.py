"""Tensor specs (``{"name", "port", "type", "shape"}``, ``type`` a C scalar name) as clang's
channel and training logs describe them: the only source of byte counts in the host.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import struct
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from mlgo_host.errors import ProtocolError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

# numpy is imported on first use only: the default inliner session never needs it.

#: C scalar name -> (little-endian ``struct`` format, little-endian numpy dtype string)
FORMATS: Mapping[str, tuple[str, str]] = {
    "float": ("<f", "<f4"), "double": ("<d", "<f8"),
    "int8_t": ("<b", "i1"), "uint8_t": ("<B", "u1"), "int16_t": ("<h", "<i2"), "uint16_t": ("<H", "<u2"),
    "int32_t": ("<i", "<i4"), "uint32_t": ("<I", "<u4"), "int64_t": ("<q", "<i8"), "uint64_t": ("<Q", "<u8"),
}


@functools.cache
def c_types() -> "Mapping[str, np.dtype]":
    """C scalar name -> little-endian numpy dtype."""
    import numpy as np

    return {k: np.dtype(v) for k, (_, v) in FORMATS.items()}


#: limits that keep a garbage header from allocating absurd buffers
MAX_TENSOR_BYTES = 1 << 28
MAX_DIMS = 32


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One tensor of the channel: its name, port, scalar type and shape."""

    name: str
    ctype: str
    shape: tuple[int, ...]
    port: int = 0

    def __post_init__(self) -> None:
        if self.ctype not in FORMATS:
            raise ProtocolError(f"tensor {self.name!r}: unknown type {self.ctype!r}")
        if not isinstance(self.name, str) or not self.name:
            raise ProtocolError(f"tensor name must be a non-empty string, got {self.name!r}")
        if len(self.shape) > MAX_DIMS or any((not isinstance(d, int)) or d < 0 for d in self.shape):
            raise ProtocolError(f"tensor {self.name!r}: bad shape {list(self.shape)!r}")
        if self.nbytes > MAX_TENSOR_BYTES:
            raise ProtocolError(f"tensor {self.name!r}: shape {list(self.shape)!r} is larger than {MAX_TENSOR_BYTES} bytes")

    @property
    def dtype(self) -> "np.dtype":
        return c_types()[self.ctype]

    @property
    def itemsize(self) -> int:
        return struct.calcsize(FORMATS[self.ctype][0])

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @classmethod
    def from_json(cls, obj: Any, where: str = "spec") -> "TensorSpec":
        if not isinstance(obj, dict):
            raise ProtocolError(f"{where}: expected an object, got {type(obj).__name__}")
        try:
            name, ctype, shape = obj["name"], obj["type"], obj["shape"]
        except KeyError as e:
            raise ProtocolError(f"{where}: missing key {e.args[0]!r}") from None
        port = obj.get("port", 0)
        if not isinstance(name, str) or not name:
            raise ProtocolError(f"{where}: name must be a non-empty string")
        if not isinstance(ctype, str):
            raise ProtocolError(f"{where} {name!r}: type must be a string")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            raise ProtocolError(f"{where} {name!r}: shape must be a list of integers")
        if not isinstance(port, int) or isinstance(port, bool):
            raise ProtocolError(f"{where} {name!r}: port must be an integer")
        if ctype not in FORMATS:
            raise ProtocolError(f"{where} {name!r}: unknown type {ctype!r}")
        return cls(name=name, ctype=ctype, shape=tuple(shape), port=port)

    def to_json(self) -> dict:
        return {"name": self.name, "port": self.port, "type": self.ctype, "shape": list(self.shape)}


def record_dtype(specs: Iterable[TensorSpec]) -> "np.dtype":
    """A packed structured dtype of the specs back to back: one ``np.frombuffer`` decodes an observation."""
    import numpy as np

    fields = [(s.name, s.dtype, s.shape) if s.shape else (s.name, s.dtype) for s in specs]
    return np.dtype(fields, align=False)
