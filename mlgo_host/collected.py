"""The files a served build leaves for training: its stats records (``serve --stats``) and, with
``serve --collect DIR``, one episode per compile: ``DIR/ep-<server id>-<slot>-<n>.npz`` (written
atomically; its meta is the stats record), listed in ``DIR/episodes.jsonl``. The reward needs the
default heuristic's size of the same module, so the trainer pairs them
(:func:`mlgo_host.training.online.load_collected`)."""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np

from mlgo_host.channel.codec import Header
from mlgo_host.episode import Episode
from mlgo_host.errors import CorpusError
from mlgo_host.fsutil import atomic_path

MANIFEST = "episodes.jsonl"
STATUSES = ("ok", "compile_error", "no_channel", "client_died", "aborted")


class StatsError(CorpusError):
    """A stats file is missing or has a malformed line."""


#: the record fields the summaries compute with, and the types they must have when present (not null)
NUMBERS = ("duration_s",)
COUNTS = ("text_size", "observations")
TEXTS = ("status", "output", "build")


def read_records(path: str) -> list[dict]:
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise StatsError(f"cannot read stats file {path}: {e.strerror}") from None
    with f:
        try:
            return [_record(line, f"{path}:{i}") for i, line in enumerate(f, 1) if line.strip()]
        except UnicodeDecodeError:
            raise StatsError(f"{path}: not a stats file (not UTF-8 text)") from None


def _record(line: str, where: str) -> dict:
    """One stats line, its fields of the types :mod:`mlgo_host.serve.stats` computes with."""
    try:
        rec = json.loads(line)
    except ValueError as e:
        raise StatsError(f"{where}: not a JSON line ({e.msg}; column {e.colno})") from None
    if not isinstance(rec, dict) or "status" not in rec:
        raise StatsError(f"{where}: not a compile record (no 'status')")
    kinds = [(COUNTS, int, "an integer"), (NUMBERS, (int, float), "a number"), (TEXTS, str, "a string")]
    for names, kind, says in kinds:
        for k in names:
            v = rec.get(k)
            if v is not None and (not isinstance(v, kind) or isinstance(v, bool) or v != v):
                raise StatsError(f"{where}: '{k}' must be {says}, not {v!r}")
    d = rec.get("decisions")
    if d is not None and not (isinstance(d, dict) and all(isinstance(n, int) and not isinstance(n, bool)
                                                          for n in d.values())):
        raise StatsError(f"{where}: 'decisions' must map each advice to a count, not {d!r}")
    return rec


def save_episode(directory: str, rec: dict, episode) -> str:
    """Write one episode (``rec`` = its stats record); returns the file name."""
    name = "ep-" + str(rec["gen"]).replace(":", "-") + ".npz"
    meta = {k: v for k, v in rec.items() if k not in ("decisions",)}
    with atomic_path(os.path.join(directory, name)) as tmp, open(tmp, "wb") as f:
        np.savez(
            f, raw=np.frombuffer(episode.raw, dtype=np.uint8), actions=episode.actions, logps=episode.logps,
            header=np.array(json.dumps(episode.header.to_json())), contexts=np.array(json.dumps(episode.contexts)),
            meta=np.array(json.dumps(meta, sort_keys=True)),
        )
    # unbuffered: one write(2) to the O_APPEND file, so concurrent writers' lines never interleave
    with open(os.path.join(directory, MANIFEST), "ab", buffering=0,
              opener=lambda p, flags: os.open(p, flags, 0o644)) as f:
        f.write((json.dumps(dict(meta, file=name), sort_keys=True) + "\n").encode())
    return name


#: what np.load raises on a file that is no episode: garbage, an empty file (EOFError), a cut zip
_NOT_AN_EPISODE = (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile)


def load_episode(path: str):
    """(Episode, meta) of one ``.npz`` file written by :func:`save_episode`."""
    try:
        with np.load(path, allow_pickle=False) as z:
            header = Header.from_json(json.loads(str(z["header"])))
            ep = Episode(header, z["raw"].tobytes(), z["actions"], z["logps"], json.loads(str(z["contexts"])))
            meta = json.loads(str(z["meta"]))
    except _NOT_AN_EPISODE as e:
        raise CorpusError(f"{path}: not a collected episode ({e})") from None
    if len(ep.raw) != ep.n * header.observation_nbytes:
        raise CorpusError(f"{path}: {len(ep.raw)} feature bytes for {ep.n} decisions "
                          f"of {header.observation_nbytes} bytes each")
    return ep, meta


def read_meta(path: str) -> dict:
    """The stats record of one episode file (reads that member only)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return json.loads(str(z["meta"]))
    except _NOT_AN_EPISODE as e:
        raise CorpusError(f"{path}: not a collected episode ({e})") from None
