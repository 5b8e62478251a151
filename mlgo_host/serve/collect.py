"""Online collection: ``mlgo-host serve --collect DIR`` keeps every compile's
episode so a trainer can learn from a real build, without a corpus.

Format (one compile = one file, written atomically)::

    DIR/ep-<server id>-<slot>-<n>.npz
        raw       uint8[N * record_bytes]  every observation's feature bytes, in order
        actions   advice dtype [N]         the advice sent (sampled by the policy)
        logps     float32 [N]              log-probability of that advice under the policy
        header    str                      the channel header JSON (feature specs, advice spec)
        contexts  str                      JSON list: the context of each decision
        meta      str                      JSON: the stats record (output, source, cwd, build,
                                           policy, text_size of the object, observations, ...)
    DIR/episodes.jsonl                     one line per episode file (the same meta + "file")

The reward is not known when the object is written: it needs the size the
default heuristic gives the same module.  :func:`load_collected` pairs each
episode with a baseline size taken from a stats file of a ``--policy
default`` build of the same tree (matched by output path, else by output
path relative to each build's root), and computes the ml-compiler-opt reward
``1 - (size + 0.01) / (baseline + 0.01)`` (:mod:`mlgo_host.trainers.reward`).
The result is ``(episodes, rewards, metas)``, as the PPO learner's
``train()`` takes them.

``mlgo-host train --collected DIR --baseline_stats FILE`` (see
:mod:`mlgo_host.trainers.online`) makes one PPO update from the episodes
collected since its last run; serving its new ``saved_policy`` with
``--collect`` again closes the loop.
"""

from __future__ import annotations

import json
import os

import numpy as np

from mlgo_host.errors import CorpusError
from mlgo_host.fsutil import atomic_path

MANIFEST = "episodes.jsonl"


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
    line = (json.dumps(dict(meta, file=name), sort_keys=True) + "\n").encode()
    fd = os.open(os.path.join(directory, MANIFEST), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return name


def load_episode(path: str):
    """(Episode, meta) of one ``.npz`` file written by :func:`save_episode`."""
    from mlgo_host.channel.codec import Header
    from mlgo_host.episode import Episode

    try:
        with np.load(path, allow_pickle=False) as z:
            header = Header.from_json(json.loads(str(z["header"])))
            ep = Episode(header, z["raw"].tobytes(), z["actions"], z["logps"], json.loads(str(z["contexts"])))
            meta = json.loads(str(z["meta"]))
    except (OSError, KeyError, ValueError) as e:
        raise CorpusError(f"{path}: not a collected episode ({e})") from None
    if len(ep.raw) != ep.n * header.observation_nbytes:
        raise CorpusError(f"{path}: {len(ep.raw)} feature bytes for {ep.n} decisions "
                          f"of {header.observation_nbytes} bytes each")
    return ep, meta


def _rel_outputs(records: list[dict]) -> dict[str, dict]:
    """Records keyed by output path relative to their build's common root."""
    outs = [r["output"] for r in records if r.get("output")]
    if not outs:
        return {}
    root = os.path.commonpath([os.path.dirname(o) for o in outs])
    return {os.path.relpath(r["output"], root): r for r in records if r.get("output")}


def read_meta(path: str) -> dict:
    """The stats record of one episode file (reads that member only)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return json.loads(str(z["meta"]))
    except (OSError, KeyError, ValueError) as e:
        raise CorpusError(f"{path}: not a collected episode ({e})") from None


def load_collected(directory: str, baseline_stats: str, delta: float = 0.01, *, exclude=(), strict: bool = False):
    """Episodes of ``directory`` with their module rewards against the
    ``text_size`` of the same modules in ``baseline_stats`` (a stats file of
    a ``--policy default`` build). Returns (episodes, rewards, metas), in
    file name order; each meta carries its episode's ``file`` name and the
    ``baseline_text_size`` its reward is against.

    A module is matched by its output path, else by the output path
    relative to each build's root (the common directory of all its outputs,
    episodes in ``exclude`` included, so a key does not depend on which
    files are left out).  Episode files named in ``exclude`` are not loaded.
    Episodes without a size of their own are skipped; without a baseline
    size they are skipped too, or with ``strict`` a :class:`CorpusError`
    names them."""
    from mlgo_host.serve.stats import read_records
    from mlgo_host.trainers.reward import reward

    base_recs = [r for r in read_records(baseline_stats) if r.get("status") == "ok" and r.get("output")]
    base_abs = {r["output"]: r for r in base_recs}
    base_rel = _rel_outputs(base_recs)
    try:
        names = os.listdir(directory)
    except OSError as e:
        raise CorpusError(f"cannot read the collection directory {directory}: {e.strerror}") from None
    files = sorted(f for f in names if f.endswith(".npz"))
    exclude = set(exclude)
    metas_all = {f: (read_meta(os.path.join(directory, f)) if f in exclude else None) for f in files}
    loaded = {f: load_episode(os.path.join(directory, f)) for f in files if f not in exclude}
    for f, (_, meta) in loaded.items():
        metas_all[f] = meta
    rel_of = {m["output"]: key for key, m in _rel_outputs(list(metas_all.values())).items()}
    episodes, rewards, metas, missing = [], [], [], []
    for f, (ep, meta) in loaded.items():
        if meta.get("text_size") is None:
            continue
        b = base_abs.get(meta.get("output")) or base_rel.get(rel_of.get(meta.get("output"), ""))
        if b is None or b.get("text_size") is None:
            missing.append(meta.get("output") or f)
            continue
        episodes.append(ep)
        rewards.append(reward(float(meta["text_size"]), float(b["text_size"]), delta))
        metas.append(dict(meta, file=f, baseline_text_size=b["text_size"]))
    if strict and missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise CorpusError(f"{len(missing)} collected episode(s) have no default-policy size in {baseline_stats}: "
                          f"{shown} (build the same tree with --policy default --stats {baseline_stats})")
    return episodes, rewards, metas
