"""What ``tune`` stores of one module's batched search (:func:`result_of`):
its sizes and compiles, every flip measured, the flips left pending, the
best decision set (replay lines and scope), the probe and the imitation
target (the best set's action at each of the probe's decisions).  A
resumed search reads it back (:meth:`.BatchedSearch.resume_from`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from mlgo_host.search.driver import BatchedSearch


def result_of(s: BatchedSearch, default_size: int, wall_s: float) -> dict:
    """A batched search as ``tune`` keeps it: sizes, compiles, every flip
    measured (key, the probe decision's features when it has one, the
    action it took, bytes), and the best decision set (replay lines and
    scope)."""
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
    replay_matches = st.start_text == st.probe.text
    use_replay = best is not None and best < default_size
    return {
        "name": st.module.name, "module_key": st.module.key, "status": "ok", "reason": "", "search": "batched",
        "default_size": int(default_size), "policy_size": int(st.probe.text), "start_size": int(st.probe.text),
        "replay_start_size": st.start_text, "replay_matches": replay_matches,
        "best_size": int(best) if use_replay else int(default_size),
        "compiles": st.ev.compiles, "batches": st.batches, "splits": dict(st.splits),
        "flips_measured": st.flips_measured, "flips_in_copies": st.flips_in_copies, "flips": flips,
        "pending": [{"keys": [x.key for x in c.sites], "lines": [x.replay_line() for x in c.sites],
                     "inline": c.inline, "kind": c.kind, "index": c.index, "release": sorted(c.release)}
                    for c in s.pending],
        "grouped": st.grouped, "wins": st.wins, "sweep_mark": st.sweep_mark,
        "interacting": sorted([k, inline] for k, inline in st.interacting),
        "broken_keys": len(st.broken), "broken": sorted(st.broken), "decisions": ep.n, "wall_s": wall_s,
        "tried": sorted(st.tried), "promise": s.promise(),
        "stopped": s.stopped if st.base is not None else ("budget" if ep.n else "exhausted"),
        "reference": st.base if st.base is not None and st.compiled and not st.provisional else None,
        "inline": sorted(x.replay_line() for x in st.inline.values()) if use_replay else None,
        "scope": sorted({d.site.caller for d in st.probe.decisions}) if use_replay else None,
        "inline_all": {k: x.replay_line() for k, x in st.inline.items()}, "probe": st.probe,
        # the imitation target: the best set's action at each decision of the probe's trajectory
        # (its features are the probe's: a decision's context changes little with flips elsewhere)
        "header": ep.header.to_json(), "raw": ep.raw, "probe_actions": ep.actions,
        "actions": np.array([1 if d.site.key in st.inline else 0 for d in st.probe.decisions], dtype=np.int64),
        "default_slot": st.default_slot,
    }
