"""The batched search of one module: :func:`search_module_batched` probes it, picks its start (:mod:`.starts`) and
runs or resumes a :class:`BatchedSearch`, whose parts share one :class:`~.state.SearchState` (docs/search.md)."""

from __future__ import annotations

import dataclasses
import logging
import time

import numpy as np

from mlgo_host.corpus.corpus import Module
from mlgo_host.errors import MlgoHostError
from mlgo_host.search.attribution import Attribution
from mlgo_host.search.candidates import Candidates
from mlgo_host.search.copies import Copies
from mlgo_host.search.flips import FlipGainModel
from mlgo_host.search.batches import Measurer
from mlgo_host.search.probe import Probe, probe_module
from mlgo_host.search.reference import Reference
from mlgo_host.search.replay import ReplayEvaluator
from mlgo_host.search.result import SearchResult
from mlgo_host.search.scheduling import Scheduler
from mlgo_host.search.sites import site_of_line
from mlgo_host.search.starts import (best_start, measure_thresholds, starts_cost, starts_pending,
                                     threshold_flags, with_flags, within_deadline)
from mlgo_host.search.state import Candidate, Outcome, SearchState

log = logging.getLogger("mlgo_host.search")


def _of_state(name: str, doc: str) -> property:
    return property(lambda self: getattr(self.state, name), lambda self, v: setattr(self.state, name, v), doc=doc)


def _of_part(part: str, method: str, doc: str) -> property:
    """A method of one of the search's parts, as the search's own."""
    return property(lambda self: getattr(getattr(self, part), method), doc=doc)


class BatchedSearch:
    """The search of one module.  ``copies``: measure the flips of one function in copies of it (:mod:`.copies`)."""

    def __init__(self, module: Module, probe: Probe, evaluator: ReplayEvaluator, *, budget: int,
                 model: FlipGainModel | None = None, deadline: float | None = None, prior=None, copies: bool = True):
        self.state = SearchState(module, probe, evaluator, budget=budget, deadline=deadline)
        self.cands = Candidates(self.state, model=model, prior=prior)
        self.attribution = Attribution(self.state)
        self.copies = Copies(self.state, self.attribution, enabled=copies)
        self.reference = Reference(self.state, self.cands, self.copies)
        self.scheduler = Scheduler(self.state, self.cands, self.copies, self.reference)
        self.measurer = Measurer(self.state, self.attribution, self.copies, self.reference)
        #: flips queued but not measured when the budget or the time ran out (kept for a resumed search)
        self.pending: list[Candidate] = []
        self.exhausted = False
        #: the search ended with a sweep to measure (left pending for a resumed search)
        self.sweep_left = False

    # -- what callers outside the engine read (bench/research/effects.py, bench/research/ceiling.py, bench/tune.py) --
    module = _of_state("module", "The module searched.")
    probe = _of_state("probe", "The probe the search started from.")
    ev = _of_state("ev", "The replay evaluator (its compiles count the search's).")
    inline = _of_state("inline", "The current best set: site key -> site.")
    sites = _of_state("sites", "Every site known: site key -> site.")
    broken = _of_state("broken", "Keys the compiler did not match.")
    outcomes = _of_state("outcomes", "Every flip measured, in order.")
    splits = _of_state("splits", "Why batches were split: reason -> count.")
    batches = _of_state("batches", "Compiles that measured flips.")
    provisional = _of_state("provisional", "The reference is the probe's plain compile, not yet checked.")
    base = _of_state("base", "The reference: the current best set's sizes and inlined keys.")
    candidates = _of_part("cands", "singles", "Every single flip, best prior first.")
    batches_of = _of_part("scheduler", "batches_of", "Flips packed into batches.")
    measure = _of_part("measurer", "measure", "Each flip of a batch measured.")
    begin = _of_part("reference", "begin", "The start and the reference.")

    def resume_from(self, res: dict) -> None:
        """Go on from an earlier result: its best set, its compile of it (or one compile) and the flips it tried."""
        st = self.state
        st.inline = {k: st.sites.get(k) or site_of_line(ln) for k, ln in res["inline_all"].items()}
        st.tried = set(res["tried"])
        st.broken = set(res.get("broken", ()))
        st.start_text = res.get("replay_start_size")
        st.earlier = list(res["flips"])
        for name, default in (("flips_measured", 0), ("flips_in_copies", 0), ("batches", 0),
                              ("grouped", False), ("wins", 0), ("sweep_mark", 0), ("batch_cap", None)):
            setattr(st, name, res.get(name, default))
        st.interacting = {(k, bool(inline)) for k, inline in res.get("interacting", ())}
        self.copies.no_copies = {r if isinstance(r, str) else tuple(r) for r in res.get("no_copies", ())}
        self.copies.not_in_copies = set(res.get("not_in_copies", ()))
        # (stored objects keyed as this search keys its compiles: see Measured.keyed_by)
        ref = res["reference"].keyed_by(st.ev.scope) if res.get("reference") is not None else None
        if st.probe.plain is not None:
            st.probe.plain = st.probe.plain.keyed_by(st.ev.scope)
        if ref is None and not res["tried"]:  # a probe only: its decisions' compile is the start
            self.begin()
        else:
            st.base = st.start = ref if ref is not None else st.ev.measure(st.inline.values())
        self.pending = self.cands.stored(res.get("pending", ()))

    def run(self) -> None:
        """Passes until the budget or the flips run out, starting with what an earlier search left :attr:`pending`."""
        st = self.state
        if st.base is None:
            self.begin()
        keys = {c.key for c in self.pending}
        self.scheduler.early = [c for c in self.cands.early_outlines() if c.key not in keys]
        self._passes(self.pending + [c for c in self.cands.singles() if c.key not in st.tried and c.key not in keys])
        self.reference.finish()

    @property
    def stopped(self) -> str:
        """Why the search ended: exhausted, sweep (:meth:`.Scheduler.resweep`), time or budget."""
        if self.exhausted:
            return "exhausted"
        if self.sweep_left:
            return "sweep"
        deadline = self.state.deadline
        return "time" if deadline is not None and time.time() >= deadline else "budget"

    def _passes(self, queue: list[Candidate]) -> None:
        """Passes over ``queue``; what the budget or the time left unmeasured stays :attr:`pending`."""
        st, sched = self.state, self.scheduler
        queue = queue or sched.resweep()
        self.exhausted = not queue
        while queue and st.left():
            touched, lost, rest = self.one_pass(queue)
            # (an answered flip is not retried: its functions left to the heuristic may hold winners now)
            queue = rest + [dataclasses.replace(o.candidate, kind="retry") for o in lost
                            if o.applied and o.candidate.footprint & touched and not st.in_set(o.candidate)
                            and not o.candidate.release]
            if not rest:  # every flip of the pass measured: the groups (again, from the new best), the answered flips
                keys = {c.key for c in queue}
                queue += [c for c in self.cands.groups() if c.key not in st.tried and c.key not in keys]
                if not st.grouped:
                    queue += self.cands.answered_flips()
                    st.grouped = True
            if not queue:
                queue = sched.resweep()
                if queue and not sched.affords(queue):  # (it waits for tune's next pass: see resweep)
                    self.sweep_left = True
                    break
            self.exhausted = not queue and st.left()
        self.pending = queue

    def sweep(self, queue: list[Candidate]) -> list[Outcome]:
        """Every flip of ``queue`` measured against the reference as it is, winners never applied (bench/research)."""
        st = self.state
        outs: list[Outcome] = []
        queue = list(queue)
        while queue and st.left():
            batch, queue = self.scheduler.next_batch(queue)
            got = self.measurer.measure(batch)
            st.outcomes.extend(got)  # per batch: a compile that fails later keeps these
            outs += got
            queue += self.scheduler.unmeasured(batch, got)
        return outs

    def one_pass(self, queue: list[Candidate]) -> tuple[set[str], list[Outcome], list[Candidate]]:
        """Measure ``queue`` (and the sites winners expose) by batches, applying each batch's winners; returns the
        functions they changed, the flips that did not pay and the flips left unmeasured."""
        st, sched = self.state, self.scheduler
        touched: set[str] = set()
        lost: list[Outcome] = []
        queue = list(queue)
        while (queue or st.suspects) and st.left():
            if st.suspects:  # (their footprints were disjoint when they won together)
                batch, st.suspects = st.suspects, []
            else:
                batch, queue = sched.next_batch(queue)
            outs = self.measurer.measure(batch)
            st.outcomes.extend(outs)
            queue += sched.unmeasured(batch, outs)
            won, later = _disjoint_best([o for o in outs if o.applied and o.delta < 0])
            queue += [dataclasses.replace(o.candidate, kind="retry", in_copy=None) for o in later]
            losers = [o for o in outs if not (o.applied and o.delta < 0)]
            lost += losers
            queue += [t for t in map(self.cands.trimmed, losers) if t is not None]
            for c in self.reference.accept(won):
                if c.kind == "undo":
                    st.interacting.add((c.key, not c.inline))
                touched |= c.footprint
                queue += [x for x in self.cands.exposed(c) if x.key not in st.tried]
                queue += self.cands.reinlined(c)
        return touched, lost, queue


def _disjoint_best(won: list[Outcome]) -> tuple[list[Outcome], list[Outcome]]:
    """Winners to apply together (best first, footprints disjoint) and the rest, measured again from the new one."""
    keep: list[Outcome] = []
    later: list[Outcome] = []
    taken: set[str] = set()
    for o in sorted(won, key=lambda o: o.delta):
        if o.candidate.footprint & taken:
            later.append(o)
        else:
            keep.append(o)
            taken |= o.candidate.footprint
    return keep, later


def search_module_batched(module: Module, policy, cfg: dict, *, budget: int, default_size: int | None,
                          model: FlipGainModel | None = None, deadline: float | None = None,
                          resume: dict | None = None, prior=None) -> dict:
    """Probe ``module`` with ``policy`` (tune: the compiler's default), then search by batches until ``budget`` compiles
    in all, the probe's counted; or go on from ``resume``, an earlier result.  ``prior``: a P(inline) over feature
    records that orders the flips.  A probe the ``deadline`` cuts gives status ``skipped``. ``default_size``: -Oz's
    object, None to read it from the probe.  Returns the result ``tune`` stores (:func:`result_of`)."""
    t0 = time.monotonic()
    old = resume or {}
    starts_only = cfg.get("starts_only")
    original = module
    flags = list(old.get("base_flags") or ())
    thresholds = old.get("thresholds")
    policy_start = old.get("policy_start")
    start_kind = old.get("start") or "base"
    module = with_flags(module, flags)
    if resume is not None:
        probe = resume["probe"]
    else:
        # (one the user's deadline cut is no failure: the module waits for a later run)
        try:
            probe = _probe_within(module, policy, cfg, deadline)
        except MlgoHostError as e:
            if deadline is not None and time.time() >= deadline:
                return {"name": module.name, "status": "skipped", "compiles": 0}
            return {"name": module.name, "module_key": module.key, "status": "failed", "reason": str(e),
                    "default_size": default_size, "compiles": 2, "search": "batched"}
    if default_size is None:  # -Oz's object: the probe's plain compile, or (no decisions) its channel compile
        default_size = int(probe.plain.text) if probe.plain is not None else int(probe.text)
    spent = old.get("compiles")
    # (starts_only on a module never probed: its starts right after its probe, in the same task)
    probed = resume if resume is not None else {"probe": probe, "compiles": probe.compiles, "tried": [],
                                                 "decisions": probe.episode.n} if starts_only else None
    due = _starts_due(probed, cfg, budget, deadline)
    if starts_only and not due and resume is not None:  # (nothing to measure: it stays as it was)
        return resume
    if due:
        thresholds, policy_start, start, cost = _best_start(original, policy, probed, default_size, cfg, deadline)
        spent = probed["compiles"] + cost
        if start is not None:  # the search starts over from that start's decisions
            module, flags, probe, start_kind = start
            resume = None
    if starts_only:  # (tune's starts stage: the result is a probe's, the next search goes on from it)
        resume, budget = None, spent if spent is not None else probe.compiles
    s = search_of(module, probe, cfg, budget=budget, spent=spent,
                  model=model, deadline=deadline, prior=prior, copies=cfg.get("copies", True))
    s.state.default_slot = cfg.get("default_slot")
    if resume is not None:
        s.resume_from(resume)
    elif starts_only and start_kind == "policy":
        _compile_policy_start(s, deadline)
    if probe.episode.n and (resume is not None or budget > s.ev.compiles):  # else: a probe only
        _run(s)
    res = result_of(s, default_size, time.monotonic() - t0)
    # (the flags are part of how the module is compiled, not of which module it is: a T keeps the corpus's key)
    res.update(module_key=original.key, base_flags=flags, thresholds=thresholds, policy_start=policy_start,
               start=start_kind, seconds=round(float(old.get("seconds") or 0.0) + time.monotonic() - t0, 3))
    # (the compiles before the first flip, the probe's and the starts': tune's shares don't count them)
    start_compiles = old.get("start_compiles")
    res["start_compiles"] = res["compiles"] if not res.get("tried") else \
        start_compiles if start_compiles is not None else spent if spent is not None else probe.compiles
    if flags and (s.base is None or s.provisional) and probe.plain is not None and probe.plain.text < default_size:
        # the best is the threshold's own object: a build gets the threshold alone (no replay file)
        res.update(best_size=int(probe.plain.text), inline=None, scope=None)
    return res


def _run(s: BatchedSearch) -> None:
    """The search's passes; a compiler failure ends it with what it measured (the best set
    compiled, else the last size known for sure)."""
    try:
        s.run()
    except MlgoHostError as e:
        log.warning("%s: batched search stopped: %s", s.module.name, e)
        try:
            s.reference.finish()
        except MlgoHostError:
            s.base = s.state.start


def _compile_policy_start(s: BatchedSearch, deadline: float | None) -> None:
    """Compile the start policy's decisions by replay, in the task that chose them: a build
    applies replay lines, so only that compile makes the start a result."""
    if deadline is not None and time.time() >= deadline:
        return
    try:
        s.begin()
    except MlgoHostError as e:
        log.warning("%s: the replay of the start policy's decisions failed: %s", s.module.name, e)


def _starts_due(resume: dict | None, cfg: dict, budget: int, deadline: float | None) -> bool:
    """Measure the starts (:mod:`.starts`) now?  Once per module, after its probe and before
    any flip (:func:`starts_pending`), when its compiles cover them (:func:`starts_cost`)."""
    cost = starts_cost(cfg.get("thresholds") or (), cfg.get("start_policy") is not None)
    return bool(cost) and resume is not None and starts_pending(resume) and budget - resume["compiles"] >= cost \
        and (deadline is None or time.time() < deadline)


def _best_start(module: Module, policy, resume: dict, default_size: int, cfg: dict, deadline: float | None
                ) -> tuple[dict[int, int | None], int | None, tuple[Module, list[str], Probe, str] | None, int]:
    """Measure the module's other starts (``cfg["thresholds"]``, ``cfg["start_policy"]``) and pick the smallest.
    Returns the threshold sizes, the start policy's size (None: none, or its probe failed), the start to search from
    if one beats -Oz (module with its flags, flags, probe, name: "policy" or "threshold T") and the compiles spent."""
    plains: dict = {}
    sizes = measure_thresholds(module, cfg["thresholds"], clang=cfg["clang"], timeout=cfg.get("module_timeout", 300.0),
                               deadline=deadline, plains=plains) if cfg.get("thresholds") else {}
    cost = len(sizes)
    oz = min(default_size, int(resume["probe"].text))
    by_policy = None
    if cfg.get("start_policy") is not None:
        try:
            by_policy = _probe_within(module, cfg["start_policy"], cfg, deadline, like=resume["probe"])
            cost += by_policy.compiles
        except MlgoHostError as e:
            log.warning("%s: the probe with the start policy failed (%s): it is not a start", module.name, e)
            cost += 1
    t = best_start(sizes, oz)
    if by_policy is not None and by_policy.episode.n and by_policy.text < min([oz] + ([sizes[t]] if t else [])):
        return sizes, int(by_policy.text), (module, [], by_policy, "policy"), cost
    policy_size = int(by_policy.text) if by_policy is not None else None
    if t is None:
        return sizes, policy_size, None, cost
    flags = threshold_flags(t)
    flagged = with_flags(module, flags)
    try:
        # (its plain compile is the threshold's, made above: the probe costs its channel compile only)
        probe = _probe_within(flagged, policy, cfg, deadline, plain=plains.get(t))
    except MlgoHostError as e:
        log.warning("%s: the probe at inline threshold %d failed (%s): the search starts from -Oz", module.name, t, e)
        return sizes, policy_size, None, cost
    return sizes, policy_size, (flagged, flags, probe, f"threshold {t}"), cost + probe.compiles


def _probe_within(module: Module, policy, cfg: dict, deadline: float | None, plain=None, like=None) -> Probe:
    """:func:`probe_module` with the timeout cut at the user's ``deadline`` (an error once it passed)."""
    timeout = within_deadline(cfg.get("module_timeout", 300.0), deadline)
    if timeout <= 0:
        raise MlgoHostError("the deadline passed before the probe")
    return probe_module(module, policy, clang=cfg["clang"], llvm_size=cfg.get("llvm_size"), timeout=timeout,
                        plain=plain, like=like)


def search_of(module: Module, probe: Probe, cfg: dict, *, budget: int, spent: int | None = None,
              **kw) -> BatchedSearch:
    """A search of ``module`` from ``probe``, the compiles already ``spent`` counted (default: the probe's own)."""
    ev = ReplayEvaluator(module, {d.site.caller for d in probe.decisions}, clang=cfg["clang"],
                         timeout=cfg.get("module_timeout", 300.0))
    ev.compiles = probe.compiles if spent is None else spent
    return BatchedSearch(module, probe, ev, budget=budget, **kw)


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
