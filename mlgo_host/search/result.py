"""What ``tune`` stores of one module's batched search (:func:`result_of`), which a resumed search reads back."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from mlgo_host.search.driver import BatchedSearch
    from mlgo_host.search.probe import Probe
    from mlgo_host.search.replay import Measured


@dataclasses.dataclass
class SearchResult:
    """One module's batched search as stored (each field a key of :func:`result_of`'s dict)."""

    name: str
    module_key: str
    status: str  # "ok" (a failed or skipped probe is stored by search_module_batched, not as a SearchResult)
    reason: str
    search: str  # "batched"
    default_size: int  # -Oz's object
    policy_size: int  # the probe's object
    start_size: int  # the probe's object
    replay_start_size: int | None  # the start's decisions compiled by replay
    replay_matches: bool  # the replay of the start is the probe's object
    best_size: int  # the best set's size, or -Oz's when that is no smaller
    compiles: int  # in all, the probe's and the resumed searches' too
    batches: int
    splits: dict[str, int]  # why batches were split: reason -> count
    flips_measured: int
    flips_in_copies: int
    #: every flip measured, of the searches this one resumes too: key, index, raw (the probe decision's
    #: features), from (the action it flipped), delta, applied, kind, accepted (and still in the best set)
    flips: list[dict]
    #: the flips queued and not measured: keys, lines, inline, kind, index, release
    pending: list[dict]
    grouped: bool
    wins: int
    sweep_mark: int
    interacting: list[list]  # [key, inline] of the flips measured alone
    batch_cap: int | None  # flips per batch at most (SearchState.batch_cap)
    #: what copies could not measure, kept for a resumed search: the roots whose control failed (a function
    #: name, or the names of a copy of several), the flips measured in place from then on
    no_copies: list
    not_in_copies: list[str]
    broken_keys: int
    broken: list[str]  # keys the compiler did not match
    decisions: int
    wall_s: float
    tried: list[str]
    promise: float | None  # the prior's expected winners not measured yet (None: no prior)
    stopped: str  # exhausted, sweep, time or budget
    reference: Measured | None  # the best set's own compile, when the reference is one
    inline: list[str] | None  # the best set's replay lines, when it is smaller than -Oz
    scope: list[str] | None  # the functions the replay decides in, with ``inline``
    inline_all: dict[str, str]  # the best set: key -> replay line
    probe: Probe
    header: Any  # the probe's episode header (JSON)
    raw: bytes  # the probe's feature records
    probe_actions: Any  # the probe's actions
    actions: np.ndarray  # the imitation target: the best set's action at each probe decision
    default_slot: str | None


def search_result(s: BatchedSearch, default_size: int, wall_s: float) -> SearchResult:
    """A batched search as ``tune`` keeps it."""
    st = s.state
    ep = st.probe.episode
    nb = ep.header.observation_nbytes
    flips = list(st.earlier)
    for o in st.outcomes:
        c = o.candidate
        raw = ep.raw[c.index * nb:(c.index + 1) * nb] if c.index is not None else b""
        flips.append({"key": c.key, "index": c.index, "raw": raw, "from": 0 if c.inline else 1,
                      "delta": int(o.delta), "applied": o.applied, "kind": c.kind,
                      # (applied by the search and still in the best set: a flip undone later is not)
                      "accepted": o.accepted and st.in_set(c)})
    best = st.base.text if st.base is not None else None
    use_replay = best is not None and best < default_size
    return SearchResult(
        name=st.module.name, module_key=st.module.key, status="ok", reason="", search="batched",
        default_size=int(default_size), policy_size=int(st.probe.text), start_size=int(st.probe.text),
        replay_start_size=st.start_text, replay_matches=st.start_text == st.probe.text,
        best_size=int(best) if use_replay else int(default_size),
        compiles=st.ev.compiles, batches=st.batches, splits=dict(st.splits),
        flips_measured=st.flips_measured, flips_in_copies=st.flips_in_copies, flips=flips,
        pending=[{"keys": [x.key for x in c.sites], "lines": [x.replay_line() for x in c.sites],
                  "inline": c.inline, "kind": c.kind, "index": c.index, "release": sorted(c.release)}
                 for c in s.pending],
        grouped=st.grouped, wins=st.wins, sweep_mark=st.sweep_mark,
        interacting=sorted([k, inline] for k, inline in st.interacting), batch_cap=st.batch_cap,
        no_copies=sorted((r if isinstance(r, str) else list(r) for r in s.copies.no_copies), key=str),
        not_in_copies=sorted(s.copies.not_in_copies),
        broken_keys=len(st.broken), broken=sorted(st.broken), decisions=ep.n, wall_s=wall_s,
        tried=sorted(st.tried), promise=s.cands.promise(),
        stopped=s.stopped if st.base is not None else ("budget" if ep.n else "exhausted"),
        reference=st.base if st.base is not None and st.compiled and not st.provisional else None,
        inline=sorted(x.replay_line() for x in st.inline.values()) if use_replay else None,
        scope=sorted({d.site.caller for d in st.probe.decisions}) if use_replay else None,
        inline_all={k: x.replay_line() for k, x in st.inline.items()}, probe=st.probe,
        header=ep.header.to_json(), raw=ep.raw, probe_actions=ep.actions,
        actions=np.array([1 if d.site.key in st.inline else 0 for d in st.probe.decisions], dtype=np.int64),
        default_slot=st.default_slot,
    )


def result_of(s: BatchedSearch, default_size: int, wall_s: float) -> dict:
    """:func:`search_result` as ``tune`` stores it: the fields in order (values neither copied nor converted)."""
    r = search_result(s, default_size, wall_s)
    return {f.name: getattr(r, f.name) for f in dataclasses.fields(r)}
