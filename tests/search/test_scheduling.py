"""Batches, the next batch and what a module's compiles afford
(mlgo_host.search.scheduling), with the real clang-19."""

from __future__ import annotations

import time

import numpy as np

from _search_helpers import search
from mlgo_host.search.driver import result_of
from mlgo_host.search.scheduling import EARLY_OUTLINE_SHARE
from mlgo_host.search.state import Outcome


def test_a_flip_whose_undo_paid_is_measured_alone_from_then_on(batched_corpus, monkeypatch):
    # a flip that won beside others but cost more applied (its undo paid) wins again in the next
    # sweep's batches, read the same wrong way, and is undone again, sweep after sweep (validation's
    # utf8_string: 700 compiles on one flip); alone, its change is the object's
    s = search(batched_corpus, budget=30)
    st = s.state
    a = s.batches_of(s.candidates())[0][0]
    undo = s.cands.candidate(a.sites, not a.inline, st.final(), kind="undo")
    st.suspects = [undo]
    monkeypatch.setattr(s.measurer, "measure", lambda batch: [Outcome(c, -1, True, st.base) for c in batch])
    s.one_pass([])  # the undo is measured and pays
    assert st.interacting == {(a.key, a.inline)}
    monkeypatch.undo()
    s.reference.compile()
    batches = s.batches_of(s.candidates())
    (alone,) = [b for b in batches if any(c.key == a.key for c in b)]
    assert len(alone) == 1 and max(map(len, batches)) > 1  # the others still share compiles
    # a resumed search keeps it
    t = search(batched_corpus, budget=30)
    t.resume_from(result_of(s, st.base.text, 0.0))
    assert t.state.interacting == {(a.key, a.inline)}


def test_the_search_measures_the_outline_groups_first_within_their_share(batched_corpus):
    budget = 16
    s = search(batched_corpus, budget=budget)
    st = s.state
    n = len(s.cands.early_outlines())
    s.run()
    kinds = [o.candidate.kind for o in st.outcomes]
    leading = [i for i, o in enumerate(st.outcomes) if o.candidate.kind == "outline"]
    assert leading and leading[0] == 0  # the first compile measured a group
    # (at most the share's compiles went to groups: each leads one batch)
    assert len(leading) <= min(n, int(budget * EARLY_OUTLINE_SHARE) + 1)
    assert "single" in kinds  # and the single flips filled the batches and the rest of the budget
    assert st.ev.compiles <= budget and st.base.text <= st.start_text


def test_a_search_that_won_measures_every_site_again_from_its_best_until_a_sweep_wins_nothing(batched_corpus):
    s = search(batched_corpus, budget=400, copies=True)
    st = s.state
    s.run()
    assert st.wins >= 1 and s.exhausted and st.ev.compiles < 400
    again = [o.candidate for o in st.outcomes if o.candidate.kind == "again"]
    # every probe decision's site once more, each flipped from the best set (winners' sites undone)
    assert {c.key for c in again} == {c.key for c in s.candidates()}
    applied = {c.key: c.inline for c in (o.candidate for o in st.outcomes if o.accepted) if len(c.sites) == 1}
    assert any(c.inline != applied[c.key] for c in again if c.key in applied) or not applied
    assert st.sweep_mark == st.wins  # (the last sweep won nothing: none more)
    r = result_of(s, st.probe.text, 0.0)
    assert (r["wins"], r["sweep_mark"]) == (st.wins, st.sweep_mark)  # (a resumed search knows)
    # a sweep is afforded when the compiles left cover it at the flips per compile measured so far
    per = st.flips_measured / st.ev.compiles
    st.budget = st.ev.compiles + 1 + int(np.ceil(len(again) / max(per, 1.0)))
    assert s.scheduler.affords(again) and not s.scheduler.affords(again + again)
    # with a deadline (modules search in turn until it) no sweep takes the time of the modules after it
    st.wins += 1
    assert s.scheduler.resweep()
    st.wins += 1
    st.deadline = time.time() + 600
    assert s.scheduler.resweep() == []
