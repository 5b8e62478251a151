"""Which flips the batched search tries, and in what order
(mlgo_host.search.candidates), with the real clang-19."""

from __future__ import annotations

import dataclasses

import numpy as np

from _search_helpers import changes, search
from mlgo_host.policies import load_policy
from mlgo_host.search.driver import BatchedSearch, result_of
from mlgo_host.search.probe import probe_module
from mlgo_host.search.replay import ReplayEvaluator
from mlgo_host.search.sites import unique_decisions


def test_a_prior_leads_the_order_and_its_promise_counts_the_flips_left(batched_corpus):
    # a prior sure of one flip (P = 1) and of no other (P = 0): that flip
    # comes first whatever the patterns say, and the promise (the flips the
    # prior expects to pay, not measured yet) is 1 until it is measured
    m = batched_corpus["gen"]
    probe = probe_module(m, load_policy("default"))
    ds = list(unique_decisions(probe.decisions))
    target = [d for d in ds if not d.inlined][-1]
    p1 = np.array([1.0 if d.inlined or d is target else 0.0 for d in ds])

    def prior(feats):
        assert len(feats) == len(ds)
        return p1

    s = BatchedSearch(m, probe, ReplayEvaluator(m, {d.site.caller for d in probe.decisions}), budget=10,
                      prior=prior)
    s.begin()
    assert s.cands.promise() == 1.0
    first = s.cands.singles()[0]
    assert first.sites[0].key == target.site.key and first.inline
    s.state.tried.add(first.key)
    assert s.cands.promise() == 0.0
    assert BatchedSearch(m, probe, s.ev, budget=10).cands.promise() is None  # no prior, no promise


def test_an_outline_group_brings_its_callee_back_once_and_reads_from_its_footprint(batched_corpus):
    # a callee inlined at every call (gone from the object): all its calls left out together
    s = search(batched_corpus, budget=20)
    st = s.state
    final = st.final()
    groups = s.cands.outline_groups(set(st.inline), final)  # (as if every single flip had lost)
    assert groups, "the generated module has no callee inlined everywhere"
    g = max(groups, key=lambda c: len(c.sites))
    callee = g.sites[0].callee
    assert len(g.sites) >= 2 and {x.callee for x in g.sites} == {callee} and not g.inline
    assert callee not in st.base.sizes.functions and callee in g.footprint
    (o,) = s.measure([g])
    m = o.measured
    assert o.applied and not {x.key for x in g.sites} & m.inlined  # no call of it inlined
    assert callee in m.sizes.functions  # its body is back, once
    changed = set(changes(m.sizes, st.base.sizes))
    assert changed <= g.footprint and callee in changed  # its change lies in the functions it predicts


def test_a_losing_outline_group_is_trimmed_to_the_callers_it_made_smaller(batched_corpus):
    # every call of h inlined; all of them left out loses, and its one compile says which callers paid:
    # only their calls are left out next, and that pays as the group's reading predicts
    s = search(batched_corpus, "trim", budget=10, copies=True, policy="always")
    (g,) = s.cands.early_outlines()
    assert {x.caller for x in g.sites} == {"v1", "v2", "c1", "c2", "c3", "c4", "c5", "c6"}
    (o,) = s.measure([g])
    assert o.applied and o.delta >= 0  # the whole group loses
    change = changes(o.measured.sizes, s.state.base.sizes)
    t = s.cands.trimmed(o)
    assert t is not None and not t.inline and t.kind == "outline"
    assert {x.caller for x in t.sites} == {f for f in ("v1", "v2", "c1", "c2", "c3", "c4", "c5", "c6")
                                            if change.get(f, 0) < 0} == {"v1", "v2"}
    (ot,) = s.measure([t])
    assert ot.applied and ot.delta < 0
    assert ot.delta == o.delta - sum(d for f, d in change.items() if f.startswith("c"))  # as read off the group
    # a group that wins is not trimmed: it is applied, and its calls are flipped back one by one
    assert s.cands.trimmed(dataclasses.replace(o, delta=-1)) is None and s.cands.trimmed(ot) is None
    # the search finds it (no single call pays for the body, and the group loses)
    s = search(batched_corpus, "trim", budget=30, copies=True, policy="always", begin=False)
    s.run()
    st = s.state
    assert st.start_text - st.base.text >= -ot.delta
    assert {x.caller for x in st.sites.values() if x.key not in st.inline} >= {"v1", "v2"}


def test_a_callees_calls_in_one_function_that_pay_only_together_are_inlined_together(batched_corpus):
    s = search(batched_corpus, "accessor", budget=40, copies=True, begin=False)
    s.run()
    st = s.state
    singles = {o.candidate.key: o.delta for o in st.outcomes if o.candidate.kind == "single"}
    in_f = sorted(k for k, x in st.sites.items() if x.caller == "f")
    assert len(in_f) == 3 and all(singles[k] > 0 for k in in_f)  # -Oz leaves them out, and rightly one by one
    (whole,) = [o for o in st.outcomes if o.candidate.kind == "group" and len(o.candidate.sites) == 4]
    assert whole.delta > 0  # every call of the accessor: k's copy costs more than f's calls save
    (together,) = [o for o in st.outcomes if o.candidate.kind == "group"
                   and sorted(x.key for x in o.candidate.sites) == in_f]
    assert together.candidate.inline and together.applied and together.delta < 0
    assert st.start_text - st.base.text >= -together.delta
    assert s.cands.caller_groups(set(in_f), st.final()) == []  # (formed from calls the set leaves out only)


def test_every_callee_inlined_twice_or_more_is_left_out_whole_first(batched_corpus):
    # an outline group per callee inlined at two or more sites, whether its body is gone or
    # not and before any single flip lost, the most sites first
    s = search(batched_corpus, budget=40)
    early = s.cands.early_outlines()
    per_callee: dict[str, set[str]] = {}
    for x in s.state.inline.values():
        per_callee.setdefault(x.callee, set()).add(x.key)
    want = {c: ks for c, ks in per_callee.items() if len(ks) >= 2}
    assert want, "the generated module has no callee inlined twice"
    assert {g.sites[0].callee: {x.key for x in g.sites} for g in early} == want
    assert all(not g.inline and g.kind == "outline" for g in early)
    assert [len(g.sites) for g in early] == sorted((len(g.sites) for g in early), reverse=True)
    s.state.tried.add(early[0].key)
    assert early[0].key not in {g.key for g in s.cands.early_outlines()}  # (measured once)


def test_an_answered_flip_leaves_its_callers_to_the_compiler_and_its_answer_replays(batched_corpus):
    # a flip in a function other functions call, with those functions left to the compiler's
    # heuristic: the compiler's answer is read from its remarks, becomes the set, and compiling
    # that set gives the same object
    s = search(batched_corpus, budget=40)
    st = s.state
    s.reference.compile_start()
    final = st.final()
    answered = [a for a in (s.cands.answered(c) for c in s.cands.singles()) if a is not None]
    assert answered, "no flip of the generated module is written in a function others call"
    a = answered[0]
    (x,) = a.sites
    holders = {y.caller for y in st.sites.values() if y.callee == x.caller} - {x.caller}
    assert a.release == holders and a.kind == "answered" and a.key.endswith("(answered)")
    assert holders <= a.footprint and final.get(x.caller, frozenset({x.caller})) <= a.footprint
    (o,) = s.measure([a])
    assert o.applied and o.measured.text == st.base.text + o.delta
    s.reference.accept([o])
    want = o.measured.text
    s.reference.compile()
    assert st.base.text == want and st.base.inlined == o.measured.inlined  # the answer, replayed: the same object
    # a function the search changed is not left to the heuristic (it would undo the change)
    st.inline.pop(next(k for k, y in st.inline.items() if y.caller in holders), None)
    assert s.cands.answered(dataclasses.replace(a, release=frozenset(), kind="single")) is None


def test_an_answered_flip_left_pending_is_formed_again_or_dropped(batched_corpus):
    s = search(batched_corpus, budget=40)
    st = s.state
    a = next(a for a in (s.cands.answered(c) for c in s.cands.singles()) if a is not None)
    s.pending = [a]
    stored = result_of(s, st.base.text, 0.0)["pending"]
    assert stored[0]["release"] == sorted(a.release)
    (again,) = s.cands.stored(stored)  # (what a resumed search starts with)
    assert again.release == a.release and again.key == a.key and again.footprint == a.footprint
    # once the search changed one of its functions, the answer would undo that: it is dropped
    st.inline.pop(next(k for k, y in st.inline.items() if y.caller in a.release))
    assert s.cands.stored(stored) == []


def test_a_flip_queued_before_a_winner_is_read_from_where_its_code_lands_now(batched_corpus):
    # a call inside a helper the set inlines into a hub: its code lands in the hub; once a winner leaves the
    # helper out there, the same flip changes the helper's own body instead, and it is packed and read so
    s = search(batched_corpus, budget=60)
    st = s.state
    s.reference.compile()  # (a compiled reference, not the probe's plain compile)
    final = st.final()
    cands = {c.key: c for c in s.cands.singles()}
    pairs = [(out, c) for out in cands.values() if out.sites[0].key in st.inline
             for c in cands.values() if c.sites[0].caller == out.sites[0].callee
             and out.sites[0].caller in final[c.sites[0].caller]]
    assert pairs, "the generated module has no inlined helper with calls of its own"
    out, c = pairs[0]
    hub, helper = out.sites[0].caller, out.sites[0].callee
    assert hub in c.footprint  # formed against the set that inlines the helper into the hub
    (o,) = s.measure([out])
    assert o.applied
    s.reference.accept([o])
    batch, _ = s.scheduler.next_batch([c])
    (now,) = batch
    assert hub not in now.footprint and helper in now.footprint
    (m,) = s.measure(batch)
    assert st.splits == {}, st.splits  # read from the functions it changes now, with nothing left over
    assert set(changes(m.measured.sizes, st.base.sizes)) <= now.footprint


def test_the_prior_of_a_c_module_is_the_shipped_outline_rule_where_it_may_refuse(batched_corpus):
    # the shipped policy's C part is an outline rule: for a C module the
    # prior of an inlining it may refuse is its model's P(leaving the callee
    # out pays); everywhere else, and for a C++ module, the network's
    from mlgo_host.channel.default_slot import default_slot
    from mlgo_host.policies.outline import OutlinePolicy
    from mlgo_host.search.worker import _probs_of, _shipped_prior
    from mlgo_host.shipped import shipped_policy_dir

    m = batched_corpus["gen"]
    probe = probe_module(m, load_policy("default"))
    feats, slot = probe.episode.features(), default_slot("clang-19")
    shipped = load_policy(shipped_policy_dir("pretrained-oz"))
    rule = shipped.for_language("C")
    assert isinstance(rule, OutlinePolicy)
    net, c = _probs_of(shipped, slot)(feats), _probs_of(shipped, slot, "C")(feats)
    refusable = rule.model.refuses(feats, feats[slot])
    assert 0 < refusable.sum() < len(feats)
    np.testing.assert_array_equal(c[~refusable], net[~refusable])
    q = rule.model.probabilities(feats[refusable])
    np.testing.assert_allclose(1.0 - c[refusable], q)
    one = np.flatnonzero(refusable)[0]
    record = np.array([float(np.asarray(feats[f]).reshape(-1)[one]) for f in rule.model.features])
    assert abs(rule.model.probability(record) - q[0]) < 1e-12  # (one record as the policy reads it)
    np.testing.assert_array_equal(_probs_of(shipped, slot, "C++")(feats), net)
    # what a search worker asks for a module of each language
    np.testing.assert_array_equal(_shipped_prior("pretrained-oz", slot, "C")(feats), c)
    np.testing.assert_array_equal(_shipped_prior("pretrained-oz", slot, "C++")(feats), net)
