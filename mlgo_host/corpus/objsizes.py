"""Per-function sizes of an object (interim: llvm-nm symbol sizes; the
attribution of FDEs and padding comes with the helper's version)."""

from __future__ import annotations

import dataclasses
import subprocess

from mlgo_host.corpus.sizes import text_size


@dataclasses.dataclass(frozen=True)
class ObjectSizes:
    text: int
    functions: dict[str, int]
    other: int


def object_sizes(path) -> ObjectSizes:
    text = text_size(path)
    r = subprocess.run(["llvm-nm-19", "-S", "--defined-only", str(path)], capture_output=True, text=True)
    fns: dict[str, int] = {}
    for ln in r.stdout.splitlines():
        p = ln.split()
        if len(p) == 4 and p[2] in "tTwW":
            fns[p[3]] = fns.get(p[3], 0) + int(p[1], 16)
    return ObjectSizes(text, fns, text - sum(fns.values()))
