"""Functions the object and the replay name otherwise than the IR does: a C++ constructor whose
object symbol is an alias of its IR function, and methods of one debug name whose call sites share a
replay key (mlgo_host.search.replay.Measured.keyed_by, mlgo_host.search.probe.namesakes_of), with the real
clang-19."""

from __future__ import annotations

import dataclasses

from _search_helpers import changes, search
from mlgo_host.search.driver import result_of

CTOR, CTOR_ALIAS = "_ZN4NodeC2EPii", "_ZN4NodeC1EPii"
GET, GET_CONST = "_ZN4Node3getEi", "_ZNK4Node3getEi"


def test_a_constructor_is_keyed_by_its_ir_function_not_the_alias_that_sorts_first(batched_corpus):
    st = search(batched_corpus, "namesakes").state
    assert CTOR in {d.site.caller for d in st.probe.decisions}
    for m in (st.base, st.probe.plain):
        assert CTOR in m.sizes.functions and CTOR_ALIAS not in m.sizes.functions
        assert m.sizes.aliases[CTOR_ALIAS] == CTOR


def test_a_key_shared_by_two_methods_of_one_name_has_both_in_its_footprint(batched_corpus):
    s = search(batched_corpus, "namesakes")
    st = s.state
    assert st.probe.namesakes[GET] == st.probe.namesakes[GET_CONST] == {GET, GET_CONST}
    by_caller = {c.sites[0].caller: c for c in s.candidates()}
    assert by_caller[CTOR].footprint == {CTOR}
    shared = by_caller.get(GET) or by_caller[GET_CONST]  # (one site per key: the first decision's)
    assert shared.footprint == {GET, GET_CONST}
    alone = st.ev.measure(st.set_with([shared]))
    assert changes(alone.sizes, st.base.sizes).keys() >= {GET, GET_CONST}  # the one key flipped both

    got = s.measure([by_caller[CTOR], shared])  # (last's call left out: norm stays)
    assert st.batches == 1 and not st.splits, st.splits  # read in one compile: every change in a footprint
    for o in got:
        single = st.ev.measure(st.set_with([o.candidate]))
        assert sum(changes(single.sizes, st.base.sizes).values()) == o.delta


def test_a_resumed_search_keys_a_stored_reference_as_its_compiles(batched_corpus):
    s = search(batched_corpus, "namesakes")
    s.reference.compile_start()  # (a compiled reference is stored)
    res = result_of(s, s.state.base.text, 0.0)
    ref = res["reference"]
    old = {CTOR_ALIAS if f == CTOR else f: n for f, n in ref.sizes.functions.items()}  # keyed by the alias
    res["reference"] = dataclasses.replace(ref, sizes=dataclasses.replace(ref.sizes, functions=old,
                                                                           aliases={CTOR: CTOR_ALIAS}))
    t = search(batched_corpus, "namesakes", begin=False)
    t.resume_from(res)
    assert CTOR in t.state.base.sizes.functions and CTOR_ALIAS not in t.state.base.sizes.functions
