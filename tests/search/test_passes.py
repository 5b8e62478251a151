"""The pass scheduler's shares (:func:`mlgo_host.search.passes.shares`):
where a search's compiles, or its time under a deadline, go among the
modules.  The scheduler's runs with the real compiler are ``tune``'s tests
(tests/search/test_tune*.py) and search-then-imitate's
(tests/training/test_search_loop.py)."""

from __future__ import annotations

from mlgo_host.search.passes import (SPREAD, batch_compiles, evenly, first_batches_then_shares, seconds_per_compile,
                                     shares)


def _row(name, promise, gain=0, compiles=2, decisions=40, tried=0, reference=None, pending=0):
    return {"name": name, "promise": promise, "default_size": 1000, "best_size": 1000 - gain, "compiles": compiles,
            "decisions": decisions, "tried": [str(i) for i in range(tried)], "reference": reference,
            "pending": [{"keys": [str(i)]} for i in range(pending)]}


def test_the_compiles_go_where_the_prior_and_the_paid_bytes_point():
    rows = [_row("a", 4.0), _row("b", 1.0), _row("c", 0.0)]
    got = shares(rows, 50, paid=False)
    assert got[0] == 39 and got[1] == 11 and got[2] == 0 and sum(got) == 50  # by promise
    # when no flip left is promising, the compiles still go where flips are left, by their number
    assert shares([_row("c", 0.0, decisions=40), _row("d", 0.0, decisions=10)], 50, paid=False) == [40, 10]
    # a small budget is not spread thin: the most promising module gets one
    # batch's worth (its reference, a batch, the final compile) before any other
    assert shares(rows, 4, paid=False) == [4, 0, 0]
    # after a pass, the bytes paid per compile weigh in: b found bytes, a none
    rows = [_row("a", 4.0, gain=0, compiles=20, reference=object()),
            _row("b", 1.0, gain=300, compiles=10, reference=object())]
    a, b = shares(rows, 60, paid=True)
    assert b > a > 0 and a + b <= 60
    # never more than two compiles per flip left (plus a batch's need)
    assert shares([_row("d", 5.0, decisions=10, tried=8)], 100, paid=False) == [2 * 2 + 3]
    # flips queued and not measured (retries, exposed sites) are flips left too, though every decision was tried
    assert shares([_row("d", 5.0, decisions=10, tried=12, pending=20)], 100, paid=False) == [2 * 20 + 3]
    # without a prior: the flips left
    assert shares([_row("e", None, decisions=30), _row("f", None, decisions=10)], 40, paid=False) == [30, 10]


def test_a_deadline_shares_the_time_not_the_compiles():
    """Under a deadline a module gets a share of the workers' seconds: one
    whose compile takes ten times longer gets a tenth of the compiles for
    the same promise; and bytes paid weigh per second, not per compile."""
    slow, fast = dict(_row("slow", 4.0), seconds=20.0), dict(_row("fast", 4.0), seconds=2.0)
    assert seconds_per_compile(slow) == 10.0 and seconds_per_compile(fast) == 1.0
    assert shares([slow, fast], 110.0, paid=False, timed=True) == [5, 60]  # (what 5 leave goes to the other)
    assert shares([slow, fast], 110, paid=False) == [55, 55]  # (counted in compiles: an even split)
    # the same bytes per compile are ten times fewer per second in the slow module
    slow, fast = (dict(_row(n, 4.0, gain=100, compiles=10, decisions=400, reference=object()), seconds=s)
                  for n, s in (("slow", 100.0), ("fast", 10.0)))
    a, b = shares([slow, fast], 400.0, paid=True, timed=True)
    assert 0 < a * 10.0 < b * 1.0 and a * 10.0 + b <= 400
    # a module not searched yet gets its batch before a searched one gets more, whatever its promise
    done = dict(_row("done", 50.0, gain=100, compiles=20, decisions=400, reference=object(), tried=30), seconds=20.0)
    new = dict(_row("new", 0.01, decisions=3), seconds=2.0)
    got = shares([done, new], 40.0, paid=True, timed=True)
    assert got[1] >= 3 and got[0] > 0
    assert shares([done, new], 40, paid=True)[1] == 0  # (counted in compiles: by weight alone)


def test_a_deadline_gives_every_module_its_first_batch_before_more():
    """Under a deadline a module not searched yet gets one batch and no
    more, however promising: its probe's seconds per compile say little of
    what its search compiles (copies of its functions) cost, and a big share
    planned on them would eat the time of the modules queued behind it.
    The searched ones share what the first batches leave."""
    big = dict(_row("big", 40.0, decisions=300, reference=object()), seconds=1.0)
    small = dict(_row("small", 0.5, decisions=4), seconds=1.0)
    assert shares([big, small], 100.0, paid=False, timed=True)[0] > 40  # (by promise: nearly all of it)
    assert first_batches_then_shares([big, small], 100.0, paid=False) == [2, 3]
    done = dict(_row("done", 5.0, gain=100, compiles=20, decisions=400, reference=object(), tried=30), seconds=20.0)
    got = first_batches_then_shares([done, big, small], 100.0, paid=True)
    assert got[1:] == [2, 3] and got[0] == shares([done], 100.0 - 2 * 0.5 - 3 * 0.5, paid=True, timed=True)[0] > 0
    # a pass shorter than the first batches still gives each its batch (the deadline cuts what does not fit)
    assert first_batches_then_shares([done, big, small], 1.0, paid=True) == [0, 2, 3]


def test_what_a_start_gained_is_no_flips_pay():
    """A module whose start (the shipped policy's decisions, a threshold)
    is far below -Oz but whose flips found nothing weighs as one that found
    nothing: the start says nothing of what the next compiles find; the
    compiles of the probe and the starts are not the flips'."""
    started = dict(_row("started", 4.0, gain=500, compiles=10, reference=object()), start_size=500,
                   start_compiles=8)
    searched = dict(_row("searched", 4.0, gain=40, compiles=10, reference=object()), start_compiles=2)
    a, b = shares([started, searched], 60, paid=True)
    assert a < b
    flips = dict(started, best_size=460)  # its flips found 40 bytes in its 2 compiles past the start
    a, b = shares([flips, searched], 60, paid=True)
    assert a > b


def test_a_deadline_spreads_part_of_each_pass_evenly():
    """A module whose flips found nothing yet (C, whose flips pay fewer bytes a
    second) still gets its even share of the pass, beside one whose flips paid
    much: without it, it would get its batch and no more."""
    paying = dict(_row("paying", 4.0, gain=400, compiles=10, decisions=400, reference=object(), tried=30), seconds=10.0)
    still = dict(_row("still", 4.0, gain=0, compiles=10, decisions=400, reference=object(), tried=30), seconds=10.0)
    alone = shares([paying, still], 200.0, paid=True, timed=True)
    got = first_batches_then_shares([paying, still], 200.0, paid=True)
    assert alone[1] < 0.2 * sum(alone) and got[1] >= int(SPREAD * 200.0 / 2 / 1.0) > alone[1]
    assert got[0] > got[1] and sum(got) <= 200  # (the rest still goes where the bytes were found)
    # a module whose even share is less than a batch gets none of it (its seconds stay in the rest)
    slow = dict(still, name="slow", seconds=100.0)
    assert evenly([paying, slow], 10.0) == [5, 0]


def test_a_module_whose_last_batch_could_not_be_read_gets_room_for_the_halves():
    """Its batch at the cap and the two halves when that fails too: with a
    batch's compiles alone a pass would end at the failed batch again."""
    r = _row("r", 1.0, reference=object(), tried=3)
    assert batch_compiles(r) == 2 and batch_compiles(dict(r, reference=None)) == 3
    assert batch_compiles(dict(r, batch_cap=12)) == 4
    assert first_batches_then_shares([dict(r, tried=[], batch_cap=12)], 1.0, paid=True) == [4]
