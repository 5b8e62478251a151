"""Flips measured in copies of their function (mlgo_host.search.copies), with the real clang-19."""

from __future__ import annotations

import dataclasses

from _search_helpers import Altered, search, sizes, with_copies_and_in_place, with_functions
from mlgo_host.search.copies import bodies_brought, pieces_of, split_copies
from mlgo_host.search.driver import result_of


def test_flips_of_one_function_measured_in_copies_give_each_its_single_change(batched_corpus):
    s = search(batched_corpus, budget=80, copies=True)
    st = s.state
    cands = s.candidates()
    rooted = [c for c in cands if s.copies.root(c) is not None]
    by_root = {}
    for c in rooted:
        by_root.setdefault(s.copies.root(c), []).append(c)
    root, flips = max(by_root.items(), key=lambda kv: len(kv[1]))
    assert len(flips) >= 3  # several flips share one function: without copies, one compile each
    batch = s.batches_of(flips)[0]
    assert len(batch) == len(flips) and all(c.in_copy == root for c in batch)
    before = st.ev.compiles
    measured = s.measure(batch)
    assert st.ev.compiles - before == 1 and len(measured) == len(batch), st.splits  # one compile, every copy read
    assert st.flips_in_copies == len(batch)
    backs = []
    for o in measured:
        alone = st.ev.measure(st.set_with([o.candidate]))
        back = s.copies.brought_back(o.candidate)
        backs += [back] if back else []
        # in place, the flip changes its function's own bytes by what its copy showed, and brings back the
        # callee it brings back there (a call left out of a callee inlined everywhere else): its bytes count
        assert (alone.sizes.unpadded(root) - st.base.sizes.unpadded(root)
                + (alone.sizes.unpadded(back) if back else 0)) == o.delta, o.candidate.key
        assert o.applied == all((x.key in alone.inlined) == o.candidate.inline for x in o.candidate.sites)
        assert set(alone.sizes.functions) == set(st.base.sizes.functions) | ({back} if back else set())
    # (this batch has all kinds: flips that bring back a callee of the copied tree (each copy its own) and
    # one callee from outside it twice (emitted once for both copies), and flips that bring back none)
    shared = [b for b in backs if b not in s.copies.tree(root)]
    assert len(shared) >= 2 and len(set(shared)) < len(shared) and len(backs) > len(shared)
    assert len(backs) < len(measured)


def test_a_body_brought_back_in_copies_costs_each_flip_what_it_costs_in_place_strings_and_all(batched_corpus):
    # every call of the inline check() and scale() is inlined and folds its message away: leaving one out
    # brings the body back, message and all; the copies of root() that leave one out each share the one body
    s = search(batched_corpus, "pieces", budget=20, copies=True)
    st = s.state
    s.reference.compile_start()  # (a reference read piece by piece)
    flips = s.candidates()
    assert len(flips) == 5 and len({s.copies.brought_back(c) for c in flips} - {None}) == 2
    batch = s.batches_of(flips)[0]
    assert len(batch) == 5 and len({c.in_copy for c in batch} - {None}) == 1
    before = st.ev.compiles
    got = s.measure(batch)
    assert st.ev.compiles - before == 1 and len(got) == 5 and st.flips_in_copies == 5, st.splits
    for o in got:
        assert sum(o.other.values()) > 40  # (its message: new bytes only the body refers to)
        alone = st.ev.measure(st.set_with([o.candidate]))
        assert abs(alone.text - st.base.text - o.delta) <= 4, o.candidate.key  # (.eh_frame's padding)


def test_a_copy_that_differs_from_its_function_is_caught(batched_corpus):
    s = search(batched_corpus, budget=80, copies=True)
    st = s.state
    flips = [c for c in s.candidates() if s.copies.root(c) is not None]
    batch = s.batches_of(flips)[0]
    copied = [c for c in batch if c.in_copy is not None]
    controls = tuple(f".mlgo{k}" for k in range(len({c.in_copy for c in copied})))  # (the plan's first copies)
    # each control copy compiles one byte off its function (as a copy compiled to other code would)
    st.ev = Altered(st.ev, lambda m: with_functions(m, lambda fs: {f: n + f.endswith(controls)
                                                                   for f, n in fs.items()}))
    got = s.measure(batch)
    # no function's copy is read; they get no copies again, and their flips go back to be measured in place
    assert not {id(o.candidate) for o in got} & {id(c) for c in copied}
    assert {c.in_copy for c in copied} <= s.copies.no_copies
    assert st.splits["copies: a control copy differs from its function"]
    back = s.scheduler.unmeasured(batch, got)
    assert back == copied and all(c.in_copy is None and s.copies.root(c) is None for c in back)


def test_flips_whose_code_lands_in_two_hubs_are_measured_in_copies_of_both(batched_corpus):
    s = search(batched_corpus, "multi", budget=20, copies=True)
    st = s.state
    s.reference.compile()
    flips = [c for c in s.candidates() if c.sites[0].caller == "helper"]
    assert len(flips) == 3 and all(c.footprint - {c.sites[0].callee} == {"hub1", "hub2"} for c in flips)
    # without a copy of both hubs, each would be a compile of its own (they share both)
    assert all(s.copies.root(c) == ("hub1", "hub2") for c in flips)
    (batch,) = s.batches_of(flips)
    before = st.ev.compiles
    measured = s.measure(batch)
    assert st.ev.compiles - before == 1 and len(measured) == 3 and st.flips_in_copies == 3, st.splits
    for o in measured:
        alone = st.ev.measure(st.set_with([o.candidate]))
        back = s.copies.brought_back(o.candidate)
        # in place it changes both hubs, and brings back its callee: what the two copies showed, and its body
        assert back is not None
        assert (sum(alone.sizes.unpadded(h) - st.base.sizes.unpadded(h) for h in ("hub1", "hub2"))
                + alone.sizes.unpadded(back)) == o.delta, o.candidate.key
        assert o.measured.sizes.functions["hub1"] - st.base.sizes.functions["hub1"] == (
            alone.sizes.unpadded("hub1") - st.base.sizes.unpadded("hub1"))


def test_in_place_flips_that_fail_beside_copies_leave_the_copies_their_function(batched_corpus, monkeypatch):
    s = search(batched_corpus, budget=80, copies=True)
    s.reference.compile_start()  # (a compiled reference: a failure is the batch's, not the start's)
    batch = with_copies_and_in_place(s)
    copied = [c for c in batch if c.in_copy is not None]
    real, failed = s.attribution.read, []

    def read(flips, m):
        if flips and not failed:  # the flips measured in place beside the copies fail, once
            failed.append(list(flips))
            return None, "a function outside every footprint changed"
        return real(flips, m)

    monkeypatch.setattr(s.attribution, "read", read)
    got = s.measure(batch)
    # their failure is not the copies': those are measured in copies again, the others in place
    assert failed and not s.copies.no_copies
    assert {id(o.candidate) for o in got} == {id(c) for c in batch} and s.state.flips_in_copies == len(copied)


def _originals_moved(s, monkeypatch):
    """The originals outside the copies read as changed (as more callers of a static callee change what it
    becomes)."""
    real = s.attribution.read
    monkeypatch.setattr(s.attribution, "read", lambda flips, m: (None, "a function outside every footprint "
                                                                      "changed") if not flips else real(flips, m))


def test_copies_alone_are_read_when_their_calls_changed_the_originals(batched_corpus, monkeypatch):
    s = search(batched_corpus, budget=80, copies=True)
    s.reference.compile_start()
    batch = [c for c in with_copies_and_in_place(s) if c.in_copy is not None]
    _originals_moved(s, monkeypatch)
    before = s.state.ev.compiles
    got = s.measure(batch)
    assert s.state.ev.compiles == before + 1 and len(got) == len(batch) and not s.copies.no_copies
    # against a reference not compiled (derived from winners) the same compile is not read: the reference is
    # compiled and the copies measured again, and the function keeps its copies
    s2 = search(batched_corpus, budget=80, copies=True)
    s2.reference.compile_start()
    batch2 = [c for c in with_copies_and_in_place(s2) if c.in_copy is not None]
    _originals_moved(s2, monkeypatch)
    s2.state.compiled = False
    before = s2.state.ev.compiles
    got2 = s2.measure(batch2)
    assert s2.state.ev.compiles == before + 3 and s2.state.compiled  # (the copies, the reference, the copies again)
    assert len(got2) == len(batch2) and not s2.copies.no_copies and s2.state.flips_in_copies == len(batch2)


def test_copies_that_changed_their_function_itself_are_read_against_their_control(batched_corpus):
    # the copies' calls changed the original function too, by as much as its copies (capstone's SystemZ printer:
    # 4 bytes): the control is the same code in the same compile, so each flip is read against it
    def batch_of(s):
        s.reference.compile_start()
        return [c for c in with_copies_and_in_place(s) if c.in_copy is not None]

    plain = search(batched_corpus, budget=80, copies=True)
    want = {o.candidate.key: o.delta for o in plain.measure(batch_of(plain))}
    s = search(batched_corpus, budget=80, copies=True)
    st = s.state
    batch = batch_of(s)
    roots = {c.in_copy for c in batch}
    # every compile from now on has each root, and each of its copies, 4 bytes larger (the reference keeps them)
    st.ev = Altered(st.ev, lambda m: with_functions(m, lambda fs: {f: n + 4 * (f.split(".mlgo")[0] in roots)
                                                                   for f, n in fs.items()}))
    got = s.measure(batch)
    assert {o.candidate.key: o.delta for o in got} == want and not s.copies.no_copies
    assert st.splits == {"copies: the function moved with its copies": len(roots)}  # (one per control)
    # a winner's function is the reference's plus its gain, not the moved function's
    o = got[0]
    assert o.measured.sizes.functions[o.candidate.in_copy] == st.base.sizes.functions[o.candidate.in_copy] + o.delta


def test_a_flip_whose_copy_changed_other_sites_is_measured_in_place_from_then_on(batched_corpus):
    s = search(batched_corpus, budget=80, copies=True)
    st = s.state
    s.reference.compile_start()
    batch = [c for c in with_copies_and_in_place(s) if c.in_copy is not None]

    def other_site(m):
        # the compiler reports a site nobody flipped inlined in the plan's last copy (the batch's last flip)
        last = max(split_copies(m.inlined)[1])
        return dataclasses.replace(m, inlined=m.inlined | {f"nobody at flipped.mlgo{last}:1:1"})

    st.ev = Altered(st.ev, other_site)
    got = s.measure(batch)
    victim = batch[-1]
    assert victim not in [o.candidate for o in got] and len(got) == len(batch) - 1
    assert s.copies.root(victim) is None and s.copies.root(batch[0]) is not None


def test_what_came_back_with_a_body_a_copy_brought_back_is_its_cost():
    base = sizes({"root": 90}, {".rodata.str1.1": 10}, {(".rodata.str1.1", b"old"): (10, frozenset({"root"}))}, {})
    # two copies brought back "x" (the module's one) and copy 1 its own "y.mlgo1"; "x" calls "leaf", which
    # was inlined only where "x" was, and both refer to a new message
    now = sizes({"root": 90, "root.mlgo0": 90, "root.mlgo1": 60, "root.mlgo2": 70, "x": 30, "y.mlgo1": 20,
                 "leaf": 8},
                {".rodata.str1.1": 10 + 24 + 5},
                {(".rodata.str1.1", b"old"): (10, frozenset({"root"})),
                 (".rodata.str1.1", b"msg"): (24, frozenset({"x", "leaf"})),
                 (".rodata.str1.1", b"mine"): (5, frozenset({"y.mlgo1"}))},
                {"x": frozenset({"root.mlgo1", "root.mlgo2"}), "leaf": frozenset({"x"})})
    copies = {"root.mlgo0", "root.mlgo1", "root.mlgo2"}
    owners = bodies_brought({"x", "y.mlgo1"}, copies, base, now)
    assert owners == {"x": {"x"}, "y.mlgo1": {"y.mlgo1"}, "leaf": {"x"}}
    pieces, came = pieces_of(owners, base, now)
    assert pieces == {"x": {".rodata.str1.1": 24}, "y.mlgo1": {".rodata.str1.1": 5}} and came == {".rodata.str1.1": 29}
    # a function nobody brought back appeared (or one whose callers are unknown: a static callee): not read
    odd = dataclasses.replace(now, functions={**now.functions, "odd": 4})
    assert bodies_brought({"x"}, copies, base, odd) is None
    # unless it appeared where a flip measured in place may change code (an answered flip's functions, left to
    # the heuristic, which kept a wrapper it had inlined: zstd_double_fast's extDict_4): that flip's reading
    assert bodies_brought({"x", "y.mlgo1"}, copies, base, odd, frozenset({"odd", "root"})) == owners
    # with nothing brought back, what appeared is the originals' reading's
    assert bodies_brought(set(), copies, base, odd) == {}


def test_a_resumed_search_keeps_what_copies_could_not_measure(batched_corpus):
    # (else each pass of tune under a deadline forms the same failing copies again as its first batch)
    s = search(batched_corpus, "copies", budget=10, copies=True)
    s.copies.no_copies = {"hub", ("hub", "other")}
    s.copies.not_in_copies = {"k at f:1:2"}
    t = search(batched_corpus, "copies", budget=20, copies=True)
    t.resume_from(result_of(s, s.state.base.text, 0.0))
    assert t.copies.no_copies == {"hub", ("hub", "other")} and t.copies.not_in_copies == {"k at f:1:2"}
