"""One compile of a batch read into each flip's gain (mlgo_host.search.attribution),
and the checks that split a batch, with the real clang-19."""

from __future__ import annotations

import dataclasses

from _search_helpers import changes, search, sizes
import types

from mlgo_host.measure.objsizes import ObjectSizes
from mlgo_host.search.attribution import Attribution, clones_moved, made_or_dropped, pieces_moved
from mlgo_host.search.replay import Measured
from mlgo_host.search.sites import Site
from mlgo_host.search.state import Candidate


def test_a_batch_of_disjoint_flips_gives_each_flip_its_single_change(batched_corpus):
    s = search(batched_corpus)
    st = s.state
    batch = s.batches_of(s.candidates())[0][:8]
    assert len(batch) >= 4
    measured = s.measure(batch)
    assert st.batches == 1 and len(measured) == len(batch), st.splits  # one compile, attribution held
    together = changes(st.ev.measure(st.set_with(batch)).sizes, st.base.sizes)
    singles = {}
    for o in measured:
        alone = st.ev.measure(st.set_with([o.candidate]))
        mine = changes(alone.sizes, st.base.sizes)
        # alone, the flip changes exactly the functions of its footprint that it changed in the batch, by as much
        assert mine == {f: d for f, d in together.items() if f in o.candidate.footprint}, o.candidate.key
        assert sum(mine.values()) == o.delta
        # and its total differs from that by .eh_frame's last-FDE padding at most
        assert abs(alone.text - st.base.text - o.delta) <= 4
        singles.update(mine)
    assert singles == together  # the batch's function total is the sum of the singles'


def test_an_overlapping_batch_is_detected_and_split(batched_corpus):
    s = search(batched_corpus)
    st = s.state
    cands = s.candidates()
    a = cands[0]
    final = st.final()
    # a second flip claiming the first one's functions: the attribution cannot tell them apart
    b = next(c for c in cands[1:] if c.key != a.key)
    b = Candidate(b.sites, b.inline, b.footprint | a.footprint, index=b.index)
    m = st.ev.measure(st.set_with([a, b]))
    out, why = s.attribution.read([a, b], m)
    assert out is None and why == "footprints overlap"
    before = st.batches
    got = s.measure([a, b])
    assert [o.candidate for o in got] == [a, b]
    assert st.batches - before == 3 and st.splits["footprints overlap"] == 1  # the pair, then each alone
    assert final  # the inline tree named where every caller's code ends up


def test_a_string_that_appears_or_goes_is_the_flip_whose_functions_alone_refer_to_it():
    a = Candidate((), True, frozenset({"f", "g"}))
    b = Candidate((), True, frozenset({"h"}))
    owner = {"f": a, "g": a, "h": b}
    s = ".rodata.str1.1"
    base = sizes({"f": 10, "h": 10}, {s: 9, ".eh_frame": 4},
                 {(s, b"gone\0"): (5, frozenset({"f", "g"})), (s, b"kept\0"): (4, frozenset({"f", "h"}))})
    now = sizes({"f": 10, "h": 10}, {s: 11, ".eh_frame": 8},
                {(s, b"kept\0"): (4, frozenset({"h"})), (s, b"brand new\0"): (7, frozenset({"h"}))})
    assert sorted(pieces_moved(base, now, owner), key=lambda x: x[0][1]) == [((s, -5), a), ((s, 7), b)]
    # a piece two flips' functions refer to is nobody's alone
    shared = dict(now.shared)
    shared[(s, b"brand new\0")] = (7, frozenset({"h", "f"}))
    assert pieces_moved(base, dataclasses.replace(now, shared=shared), owner) is None
    # bytes that moved beyond the pieces (and .eh_frame's padding) are nobody's
    assert pieces_moved(base, dataclasses.replace(now, other_sections={s: 12, ".eh_frame": 8}), owner) is None


def test_a_function_that_appears_or_goes_is_the_flip_whose_functions_alone_refer_to_it():
    a = Candidate((), True, frozenset({"f"}))
    b = Candidate((), True, frozenset({"h"}))
    owner = {"f": a, "h": b}
    base = sizes({"f": 10, "h": 10, "gone": 8}, {}, {}, {"gone": frozenset({"h"})})
    now = sizes({"f": 20, "h": 2, "tmpl": 30, "guard": 6}, {}, {},
                {"tmpl": frozenset({"f"}), "guard": frozenset({"tmpl"})})
    outside = {"gone": -8, "tmpl": 30, "guard": 6}
    # (a template instance a new call brought, and what that instance calls)
    assert made_or_dropped(outside, base, now, owner) == {"gone": b, "tmpl": a, "guard": a}
    # no referrer known (a static function: its calls have no relocation), or a function that only changed size
    assert made_or_dropped({"static": 5}, base, dataclasses.replace(now, functions={**now.functions, "static": 5}),
                           owner) is None
    assert made_or_dropped({"f": 3}, base, now, owner) is None


def test_padding_that_follows_the_layout_is_nobodys_and_does_not_fail_the_batch():
    # f's code is 9 bytes in both; the byte after it pads the 2-byte aligned method that follows, and goes
    # when g (earlier in the section) grows by an odd number of bytes
    base = ObjectSizes(40, {"f": 10, "g": 20, "h": 10}, 0, padding={"f": 1})
    now = ObjectSizes(44, {"f": 9, "g": 25, "h": 10}, 0)
    a = Candidate((), True, frozenset({"g"}))
    read = Attribution(types.SimpleNamespace(base=Measured(base, set(), 0.0)))
    out, why = read.read([a], Measured(now, set(), 0.0))
    assert why == "" and out[0].delta == 5
    # f's own code changed: a flip outside the batch did it, or the compiler's interprocedural work
    out, why = read.read([a], Measured(ObjectSizes(46, {"f": 11, "g": 25, "h": 10}, 0), set(), 0.0))
    assert out is None and why == "a function outside every footprint changed"


def test_a_clone_of_a_flipped_call_inlined_elsewhere_is_the_flips():
    flip = Candidate((Site("x", "_ZN4NodeC2Ev", (("Node", 2, 18),)),), False, frozenset({"_ZN4NodeC2Ev"}))
    assert clones_moved(flip, {"x at Node:2:18 @ emplace:3:13"})  # the same written call, cloned into emplace
    assert not clones_moved(flip, {"y at Node:2:18 @ emplace:3:13"})  # another callee
    assert not clones_moved(flip, {"x at Node:4:18 @ emplace:3:13"})  # another call
    assert not clones_moved(flip, {"x at Node:2:18"})  # its own key
