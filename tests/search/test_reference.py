"""The reference the batched search measures flips against
(mlgo_host.search.reference), with the real clang-19."""

from __future__ import annotations

import dataclasses

from _search_helpers import search


def test_the_plain_compile_stands_in_for_the_start_until_a_batch_checks_it(batched_corpus, monkeypatch):
    s = search(batched_corpus)
    st = s.state
    # the probe took the compiler's own decisions: its plain compile is the start, no compile spent
    assert st.provisional and st.ev.compiles == 0 and st.base is st.probe.plain
    replay = st.ev.measure(st.inline.values())
    assert replay.sizes.functions == st.base.sizes.functions and replay.inlined == st.base.inlined
    assert replay.text == st.base.text
    # a batch whose attribution holds checks it: every function and key outside the flips as the replay's
    batch = s.batches_of(s.candidates())[0]
    s.measure(batch)
    assert not st.provisional and st.base is st.probe.plain
    # one that fails may be the replay's fault: the start is compiled by replay, the batch measured again
    s2 = search(batched_corpus)
    st2 = s2.state
    real = s2.attribution.read
    calls = []
    monkeypatch.setattr(s2.attribution, "read", lambda b, m: (calls.append(1), (None, "bytes no function owns moved")
                                                             if len(calls) == 1 else real(b, m))[1])
    got = s2.measure(batch)
    assert not st2.provisional and st2.base is not st2.probe.plain and st2.ev.compiles == 3  # batch, start, batch
    assert len(got) == len(batch)


def test_flips_that_came_out_larger_together_are_undone_first(batched_corpus):
    # winners of one batch applied together can cost more than each measured
    # beside the others (seen on libsass's utf8_string: -29 B apart, +50 B
    # with its batch's other winners): the compiled reference then exceeds
    # the derived one, and undoing each winner is measured before anything else
    s = search(batched_corpus, budget=30)
    st = s.state
    won = [o for o in s.measure(s.batches_of(s.candidates())[0]) if o.applied][:2]
    assert len(won) == 2
    for o in won:  # as if both paid: the reference derived from their measured functions
        o.delta = -1
    s.reference.accept(won)
    assert not st.compiled and st.suspects == []
    # derived 100 B below what compiles
    st.base = dataclasses.replace(st.base, sizes=dataclasses.replace(st.base.sizes, text=st.base.text - 100))
    s.reference.compile()
    assert [c.kind for c in st.suspects] == ["undo", "undo"]
    assert [(c.key, c.inline) for c in st.suspects] == [(o.candidate.key, not o.candidate.inline) for o in won]
    before = len(st.outcomes)
    s.one_pass([])  # nothing queued: the undos alone are measured
    assert {o.candidate.kind for o in st.outcomes[before:]} == {"undo"} and st.suspects == []
    # a derived reference the compile confirms leaves nothing to undo
    st.compiled, s.reference.derived_by = False, [won[0].candidate]
    s.reference.compile()
    assert st.suspects == []
