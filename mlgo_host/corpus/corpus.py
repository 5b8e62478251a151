"""Read corpora in the format of LLVM's mlgo-utils (docs/corpora.md), sample and split them.  A broken
module is kept in :attr:`Corpus.broken` with its reason, so the rest stays usable."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from mlgo_host.corpus.driver_flags import strip_driver_flags
from mlgo_host.errors import CorpusError
from mlgo_host.fsutil import atomic_write_bytes
from mlgo_host.languages import command_language

DESCRIPTION = "corpus_description.json"

#: cc1 flags removed with their value (ml-compiler-opt's ``delete_flags`` plus what only suits the
#: source); driver-form commands: :mod:`mlgo_host.corpus.driver_flags`
DELETE_WITH_VALUE = ("-o", "-split-dwarf-file", "-split-dwarf-output", "-fthinlto-index", "-fprofile-sample-use",
                     "-fprofile-remapping-file", "-dependency-file", "-MT", "-MQ", "-x")
#: cc1 flags removed alone (they change what is emitted, or skip the optimizer)
DELETE_ALONE = ("-emit-llvm", "-emit-llvm-bc", "-emit-llvm-uselists", "-emit-obj", "-emit-codegen-only",
                "-disable-llvm-passes", "-disable-llvm-optzns", "-sys-header-deps", "-fembed-bitcode")


def read_json(path: Path, missing: str) -> Any:
    """The JSON document in ``path``; CorpusError naming the file (``missing``: why when there is none)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CorpusError(f"{path}: {missing}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CorpusError(f"{path}: cannot read: {e}") from None
    except json.JSONDecodeError as e:
        raise CorpusError(f"{path}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None


def clean_cc1(args: Sequence[str]) -> list[str]:
    """A cc1 command without input, output and what must not survive recompiling its bitcode;
    it starts with ``-cc1 -emit-obj``."""
    args = [a for a in args if a != ""]
    if not args or args[0] != "-cc1":
        raise CorpusError("command is not in cc1 form (it must start with -cc1)")
    out: list[str] = []
    i = 1
    while i < len(args):
        a = args[i]
        i += 1
        if a in DELETE_WITH_VALUE:
            i += 1  # the value
            if a == "-x" and i < len(args) and not args[i].startswith("-"):
                i += 1  # -x <lang> <input>: the input follows the language
        elif not (a.split("=", 1)[0] in DELETE_WITH_VALUE  # -fthinlto-index=..., -split-dwarf-file=...
                  or a in DELETE_ALONE or a.startswith("-fembed-bitcode")):
            out.append(a)
    return ["-cc1", "-emit-obj", *out]


@dataclasses.dataclass(frozen=True)
class Module:
    """One module of a corpus; ``error`` is set for a broken one (then ``cmd`` may be empty)."""

    name: str
    bc_path: Path
    cmd: tuple[str, ...]  #: the cleaned cc1 command, without input and output
    size: int  #: of the ``.bc`` in bytes: the sampler's stratification key
    error: str | None = None

    def to_task(self, ship_bitcode: bool = False) -> dict:
        """A picklable dict for worker processes; ``ship_bitcode``: with the bitcode (``bc_bytes``), for
        workers without a shared filesystem."""
        task = {"name": self.name, "bc_path": str(self.bc_path), "cmd": list(self.cmd), "size": self.size,
                "error": self.error}
        if ship_bitcode and self.error is None:
            task["bc_bytes"] = Path(self.bc_path).read_bytes()
        return task

    @classmethod
    def from_task(cls, task: dict) -> "Module":
        return cls(name=task["name"], bc_path=Path(task["bc_path"]), cmd=tuple(task["cmd"]),
                   size=int(task.get("size", 0)), error=task.get("error"))

    def compile_command(self, clang: str, output: str | os.PathLike) -> list[str]:
        if self.error is not None:
            raise CorpusError(f"module {self.name!r}: {self.error}")
        return [clang, *self.cmd, "-x", "ir", str(self.bc_path), "-o", str(output)]

    @property
    def language(self) -> str:
        """"C++" or "C", by the source's suffix in ``-main-file-name``."""
        return "C++" if command_language(self.cmd) == "C++" else "C"

    @property
    def key(self) -> str:
        """A stable identity for caches: name, command and bitcode digest."""
        h = hashlib.sha256(self.name.encode())
        h.update(b"\0".join(a.encode() for a in self.cmd))
        try:
            st = os.stat(self.bc_path)
            h.update(_file_digest(str(self.bc_path), st.st_size, st.st_mtime_ns).encode())
        except OSError:
            h.update(b"<missing>")
        return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    """The file's sha256, computed again only when its size or time changed."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class Corpus:
    """The modules of one corpus directory: usable ones in description order, and broken ones."""

    def __init__(self, root: Path, modules: list[Module], broken: list[Module]):
        self.root = root
        self.modules = modules
        self.broken = broken

    @classmethod
    def load(cls, path: str | os.PathLike, strict: bool = False) -> "Corpus":
        """Read a corpus; CorpusError for a bad description, or with ``strict`` for a broken module."""
        root = Path(path)
        desc_path = root / DESCRIPTION
        desc = read_json(desc_path, f"no corpus description (is {root} a corpus directory?)")
        if not isinstance(desc, dict) or not isinstance(desc.get("modules"), list):
            raise CorpusError(f"{desc_path}: expected an object with a 'modules' list")
        names = desc["modules"]
        if not names:
            raise CorpusError(f"{desc_path}: the corpus has no modules")
        if not all(isinstance(n, str) and n for n in names):
            raise CorpusError(f"{desc_path}: every entry of 'modules' must be a non-empty string")
        if desc.get("has_thinlto", False):
            raise CorpusError(f"{desc_path}: ThinLTO corpora (has_thinlto: true) are not supported; "
                              "build a corpus of non-LTO modules (mlgo-host corpus build)")
        override: tuple[str, ...] | None = None
        if "global_command_override" in desc:
            ov = desc["global_command_override"]
            if not isinstance(ov, list) or not all(isinstance(a, str) for a in ov):
                raise CorpusError(f"{desc_path}: global_command_override must be a list of strings")
            if ov == ["<UNSPECIFIED>"]:
                raise CorpusError(f"{desc_path}: global_command_override is not filled in (<UNSPECIFIED>)")
            try:
                override = tuple(clean_cc1(ov)) if ov[:1] == ["-cc1"] else (
                    *strip_driver_flags(ov, bitcode_input=True), "-c")
            except CorpusError as e:
                raise CorpusError(f"{desc_path}: global_command_override: {e}") from None
        modules: list[Module] = []
        broken: list[Module] = []
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise CorpusError(f"{desc_path}: module {name!r} is listed twice")
            seen.add(name)
            m = _load_module(root, name, override)
            if m.error is not None and strict:
                raise CorpusError(f"{root}: module {name!r}: {m.error}")
            (modules if m.error is None else broken).append(m)
        return cls(root, modules, broken)

    def __len__(self) -> int:
        return len(self.modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self.modules)

    def __getitem__(self, name: str) -> Module:
        for m in self.modules:
            if m.name == name:
                return m
        raise KeyError(name)

    def split(self, heldout_fraction: float = 0.1, seed: int = 0,
              by: str = "project") -> tuple[list[Module], list[Module]]:
        """Deterministic train / held-out split, as :func:`split_three` without validation."""
        train, _, held = split_three(self.modules, heldout_fraction, 0.0, seed, by)
        return train, held

    def sampler(self, modules: Sequence[Module], seed: int = 0, strategy: str = "round_robin") -> "Sampler":
        """A :class:`Sampler` over ``modules``."""
        return Sampler(modules, strategy=strategy, seed=seed)


def load_corpus(path: str | os.PathLike, strict: bool = False) -> Corpus:
    return Corpus.load(path, strict=strict)


SPLIT_UNITS = ("project", "module")
#: fewer projects cannot give training, validation and held-out their own: split by module
MIN_PROJECTS = 3


def project_of(name: str) -> str:
    """The first path component (``bash/alias``: ``bash``); a name without a folder is its own project."""
    return name.split("/", 1)[0]


def split_three(modules: Sequence[Module], heldout_fraction: float, validation_fraction: float,
                seed: int = 0, by: str = "project") -> tuple[list[Module], list[Module], list[Module]]:
    """Deterministic train / validation / held-out split (see :func:`split_names`)."""
    part = split_names([m.name for m in modules], heldout_fraction, validation_fraction, seed, by)
    return tuple([m for m in modules if part[m.name] == p] for p in ("train", "validation", "heldout"))


def split_names(names: Iterable[str], heldout_fraction: float, validation_fraction: float, seed: int = 0,
                by: str = "project") -> dict[str, str]:
    """Each name's part: ``train``, ``validation`` or ``heldout``.

    ``by="project"`` keeps each project on one side, so that validation and held-out measure code the
    training never saw (a file shares headers and idioms with its project).  A unit's part is a hash of
    its name, so it stays on its side whatever else the corpus contains.  By project, a non-zero fraction
    holds at least one project and training keeps at least one."""
    if heldout_fraction < 0 or validation_fraction < 0 or heldout_fraction + validation_fraction >= 1:
        raise CorpusError(f"held-out ({heldout_fraction}) and validation ({validation_fraction}) fractions "
                          "must be >= 0 and leave modules to train on")
    if by not in SPLIT_UNITS:
        raise CorpusError(f"unknown split unit {by!r}; choose from {', '.join(SPLIT_UNITS)}")
    names = list(names)
    if by == "project" and len({project_of(n) for n in names}) < MIN_PROJECTS:
        by = "module"
    unit = project_of if by == "project" else (lambda n: n)
    units = sorted({unit(n) for n in names})
    rest_fraction = validation_fraction / (1.0 - heldout_fraction) if heldout_fraction < 1 else 0.0
    held = _hashed_part(units, heldout_fraction, seed, at_least_one=by == "project")
    rest = [u for u in units if u not in held]
    val = _hashed_part(rest, rest_fraction, seed + 7919, at_least_one=by == "project")
    return {n: "heldout" if unit(n) in held else "validation" if unit(n) in val else "train" for n in names}


def _hashed_part(units: Sequence[str], fraction: float, seed: int, at_least_one: bool) -> set[str]:
    part = {u for u in units if _hash01(u, seed) < fraction}
    if at_least_one and not part and fraction > 0 and len(units) > 1:
        part = {min(units, key=lambda u: _hash01(u, seed))}
    if at_least_one and len(part) == len(units) > 1:
        part.discard(max(units, key=lambda u: _hash01(u, seed)))
    return part


def _hash01(name: str, seed: int) -> float:
    salt = f"{seed}:" if seed else ""
    return int.from_bytes(hashlib.sha256((salt + name).encode()).digest()[:8], "big") / 2**64


def _load_module(root: Path, name: str, override: tuple[str, ...] | None) -> Module:
    base = root / name
    bc = Path(str(base) + ".bc")
    try:
        size = bc.stat().st_size
    except FileNotFoundError:
        return Module(name, bc, (), 0, error=f"missing bitcode {bc.name}")
    if size == 0:
        return Module(name, bc, (), 0, error=f"empty bitcode {bc.name}")
    if override is not None:
        return Module(name, bc, override, size)
    cmd_path = Path(str(base) + ".cmd")
    try:
        return Module(name, bc, tuple(clean_cc1(cmd_path.read_bytes().decode("utf-8").split("\0"))), size)
    except FileNotFoundError:
        error = f"missing command file {cmd_path.name}"
    except OSError as e:
        error = f"cannot read {cmd_path.name}: {e}"
    except UnicodeDecodeError:
        error = f"{cmd_path.name} is not UTF-8 text"
    except CorpusError as e:
        error = f"{cmd_path.name}: {e}"
    return Module(name, bc, (), size, error=error)


def write_description(root: str | os.PathLike, names: Iterable[str]) -> Path:
    path = Path(root) / DESCRIPTION
    desc = {"modules": sorted(names), "has_thinlto": False}
    atomic_write_bytes(str(path), (json.dumps(desc, indent=2) + "\n").encode())
    return path


class Sampler:
    """Seeded module sampling.  ``round_robin`` (ml-compiler-opt's): the i-th module of a sample comes
    from size bucket ``i mod buckets``, so every sample mixes small and large modules.
    ``without_replacement``: each module once per epoch, in a seeded order."""

    STRATEGIES = ("round_robin", "without_replacement")

    def __init__(self, modules: Sequence[Module], strategy: str = "round_robin", seed: int = 0, buckets: int = 20):
        if not modules:
            raise CorpusError("cannot sample from an empty list of modules")
        if strategy not in self.STRATEGIES:
            raise CorpusError(f"unknown sampling strategy {strategy!r}; choose from {', '.join(self.STRATEGIES)}")
        if buckets < 1:
            raise CorpusError(f"buckets must be >= 1, got {buckets}")
        self.strategy = strategy
        self.rng = random.Random(seed)
        self._by_size = sorted(modules, key=lambda m: (m.size, m.name))
        self.buckets = min(buckets, len(self._by_size))
        self._perm: list[Module] = []
        self._pos = 0

    def take(self, k: int) -> list[Module]:
        """``k`` modules (more than the corpus has with round_robin)."""
        if k < 0:
            raise CorpusError(f"sample size must be >= 0, got {k}")
        out: list[Module] = []
        n = len(self._by_size)
        if self.strategy == "round_robin":
            for _ in range(k):
                b = self._pos % self.buckets
                self._pos += 1
                out.append(self._by_size[self.rng.randrange(b * n // self.buckets, (b + 1) * n // self.buckets)])
            return out
        while len(out) < k:
            if not self._perm:
                self._perm = list(self._by_size)
                self.rng.shuffle(self._perm)
            out.append(self._perm.pop())
        return out

    def skip(self, n: int) -> None:
        """Advance as if ``n`` modules had been drawn, so that a resumed run samples as an uninterrupted one."""
        self.take(n)
