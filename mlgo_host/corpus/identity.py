"""Which compile of a build is which corpus module: both reduce to one *identity* (absolute source and
object paths, and :func:`~mlgo_host.corpus.build.compile_flags`).  To match a build that lives elsewhere
(another checkout, a CI workspace), identities are kept relative to the project root (the common
directory of all sources and objects), the root written ``${ROOT}`` in the flags.  A match only says
which module a compile should be; whether it is still the one tuned is the replay fingerprint's job.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from mlgo_host.corpus.build import (SOURCES, CompileEntry, entry_identity, load_compile_commands, module_names,
                                    read_sources_file)

ROOT = "${ROOT}"


def command_identity(argv: Sequence[str], cwd: str, source: str, output: str) -> dict:
    """The identity of a compile as the wrapper sees it (``argv``: compiler first)."""
    return entry_identity(CompileEntry(Path(cwd), Path(os.path.normpath(os.path.join(cwd, source))), tuple(argv),
                                       Path(os.path.normpath(os.path.join(cwd, output)))))


def read_sources(corpus_dir: str | os.PathLike) -> dict[str, dict]:
    """Module name -> identity of a corpus: its ``module_sources.json``, else from the
    ``compile_commands.json`` it keeps (older corpora), else {}."""
    d = Path(corpus_dir)
    if (d / SOURCES).exists():
        return read_sources_file(d / SOURCES)
    db = d / "compile_commands.json"
    if db.exists():
        entries = load_compile_commands(db)
        return {n: entry_identity(e) for n, e in zip(module_names(entries), entries)}
    return {}


def common_dir(paths: Iterable[str]) -> str:
    """The common directory of files ``paths``, or "" (none, or absolute and relative mixed)."""
    try:
        return os.path.commonpath([os.path.dirname(p) for p in paths if p])
    except ValueError:
        return ""


def project_root(identities: Iterable[dict]) -> str:
    return common_dir(p for i in identities for p in (i["source"], i["output"]))


def relative_identity(identity: dict, root: str) -> dict:
    """``identity`` below ``root``: relative paths, ``${ROOT}`` in the flags."""
    return {"source": os.path.relpath(identity["source"], root), "output": os.path.relpath(identity["output"], root),
            "flags": [f.replace(root, ROOT) if root else f for f in identity["flags"]]}


class IdentityIndex:
    """Relative identities (name -> {source, output, flags}) looked up by a compile's absolute one."""

    def __init__(self, relative: Mapping[str, dict]):
        self.by_object: dict[str, list[tuple[str, dict]]] = {}
        for name, rel in relative.items():
            self.by_object.setdefault(os.path.basename(rel["output"]), []).append((name, rel))

    def match(self, identity: dict) -> str | None:
        """The module name ``identity`` is, or None."""
        return next((name for name, rel, flags in self._same_files(identity) if flags == rel["flags"]), None)

    def other_flags(self, identity: dict) -> tuple[str, list[str], list[str]] | None:
        """For a compile of a module's source into its object with other flags: (that module, the flags
        only the compile has, the flags only the module has); None when no module has those files."""
        for name, rel, flags in self._same_files(identity):
            if flags != rel["flags"]:
                return name, [f for f in flags if f not in rel["flags"]], [f for f in rel["flags"] if f not in flags]
        return None

    def _same_files(self, identity: dict):
        """(name, relative identity, the compile's flags relative to the module's root) of each module
        whose source and object ``identity`` compiles."""
        out = identity["output"]
        for name, rel in self.by_object.get(os.path.basename(out), ()):
            tail = os.sep + rel["output"]
            if not out.endswith(tail):
                continue
            root = out[: -len(tail)] or os.sep
            if os.path.normpath(os.path.join(root, rel["source"])) != identity["source"]:
                continue
            yield name, rel, [f.replace(root, ROOT) for f in identity["flags"]]
