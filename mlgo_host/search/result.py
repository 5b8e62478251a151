"""What ``tune`` stores of one module's batched search (:func:`~.driver.result_of`), which a resumed search reads
back."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from mlgo_host.search.probe import Probe
    from mlgo_host.search.replay import Measured


@dataclasses.dataclass
class SearchResult:
    """One module's batched search as stored (each field a key of :func:`~.driver.result_of`'s dict)."""

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
