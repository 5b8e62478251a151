"""Combine corpora into one by linking their project folders, as mlgo-utils' ``combine_training_corpus``
does (docs/corpora.md): module names and the split by project stay those of the corpora."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

from mlgo_host.corpus.corpus import DESCRIPTION, project_of, read_json, write_description
from mlgo_host.errors import CorpusError

#: which corpora the links point into
SOURCES = "combined_from.json"


def _description(corpus: Path) -> dict:
    path = corpus / DESCRIPTION
    desc = read_json(path, f"no corpus description (is {corpus} a corpus directory?)")
    if not isinstance(desc, dict) or not isinstance(desc.get("modules"), list) or not desc["modules"]:
        raise CorpusError(f"{path}: expected an object with a non-empty 'modules' list")
    if desc.get("has_thinlto", False):
        raise CorpusError(f"{path}: ThinLTO corpora (has_thinlto: true) are not supported")
    if "global_command_override" in desc:
        raise CorpusError(f"{path}: a corpus with a global_command_override cannot be combined "
                          "(its modules have no commands of their own)")
    return desc


def _entries(corpus: Path, names: Sequence[str]) -> set[str]:
    """The top-level entries holding ``names``' files: project folders, or a top-level module's files."""
    out: set[str] = set()
    for n in names:
        if "/" in n:
            out.add(project_of(n))
        else:
            out.update(f for f in (f"{n}.bc", f"{n}.cmd") if (corpus / f).exists())
    return out


def combine_corpora(corpora: Sequence[str | os.PathLike], output: str | os.PathLike) -> list[str]:
    """Link ``corpora`` into ``output`` (new, empty, or combined before) and describe it; the module names."""
    if not corpora:
        raise CorpusError("name at least one corpus to combine")
    out = Path(output)
    owner: dict[str, Path] = {}
    names: list[str] = []
    for c in corpora:
        corpus = Path(c).resolve()
        if corpus == out.resolve():
            raise CorpusError(f"{c}: the output cannot be one of the corpora it combines")
        desc = _description(corpus)
        for entry in sorted(_entries(corpus, desc["modules"])):
            if entry in owner:
                raise CorpusError(f"{entry!r} is in both {owner[entry]} and {corpus}: a project must come "
                                  "from one corpus (leave it out of one)")
            owner[entry] = corpus
        names.extend(desc["modules"])
    _prepare(out)
    for entry, corpus in sorted(owner.items()):
        os.symlink(corpus / entry, out / entry)
    (out / SOURCES).write_text(json.dumps({"corpora": sorted({str(p) for p in owner.values()})}, indent=2) + "\n")
    write_description(out, names)
    return sorted(names)


def _prepare(out: Path) -> None:
    """An empty ``out``, or one a combine made before with its links removed."""
    if out.exists() and not out.is_dir():
        raise CorpusError(f"{out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    children = list(out.iterdir())
    if children and not (out / SOURCES).is_file():
        raise CorpusError(f"{out}: not empty and not a combined corpus; choose a new directory")
    for child in children:
        if child.is_symlink() or child.name in (SOURCES, DESCRIPTION):
            child.unlink()
        else:
            raise CorpusError(f"{out}: {child.name} is not one of the links a combine made; remove it first")
