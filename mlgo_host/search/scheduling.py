"""Which flips share a compile (:class:`Batch`), which batch goes next (the most expected winners), and what the
module's compiles afford."""

from __future__ import annotations

from collections import Counter

from mlgo_host.search.candidates import Candidates
from mlgo_host.search.copies import MAX_COPIES, Copies
from mlgo_host.search.copytext import Roots, roots_of
from mlgo_host.search.reference import Reference
from mlgo_host.search.state import Candidate, Outcome, SearchState

#: flips per compile at most: more risks more failed attributions (each a split)
MAX_BATCH = 48
#: the share of a search's compiles early outline groups may take (:meth:`~.candidates.Candidates.early_outlines`)
EARLY_OUTLINE_SHARE = 0.5
#: a flip's chance to pay when the prior says nothing of it (the share of paying flips measured)
UNKNOWN_P = 0.08


class Batch:
    """Flips packed into one compile.  Flips in copies may share a function, but no ordinary flip
    may change what they copy, nor delete or bring back a callee (the copies keep their calls)."""

    def __init__(self):
        self.flips: list[Candidate] = []
        self.writes: set[str] = set()
        self.reads: set[str] = set()
        self.inlining: Counter[str] = Counter()  # callee -> calls the batch inlines
        self.roots: set[str] = set()  # the functions flips are measured in copies of
        self.back: set[str] = set()  # the callees flips measured in copies bring back
        self.copies = 0
        self.closed = False  # holds a flip measured alone (:attr:`SearchState.interacting`)

    def admits(self, c: Candidate, state: SearchState, root: Roots | None = None, back: str | None = None
               ) -> bool:
        """``root``: what ``c`` would be measured in a copy of; ``back``: the callee it brings back."""
        if root is not None:
            # (an unverified root is fine: its copies are read against a control in the same compile)
            return (not set(roots_of(root)) & self.writes and not c.reads & self.writes
                    and back not in self.writes | self.reads and self.copies + len(roots_of(root)) <= MAX_COPIES
                    and all(plain(x) for x in self.flips if x.in_copy is None))
        if (c.footprint & (self.writes | self.reads | state.unverified | self.roots | self.back)
                or c.reads & self.writes):
            return False
        if self.roots and not plain(c):
            return False
        if not self.flips:  # alone, a flip's change is the object's
            return True
        for s in (c.sites if c.inline else ()):
            if s.callee not in c.footprint and self.inlining.get(s.callee, 0) + 1 >= state.left_out(s.callee):
                return False
        return True

    def add(self, c: Candidate, root: Roots | None = None, back: str | None = None) -> None:
        self.flips.append(c)
        self.reads |= c.reads
        if root is not None:
            c.in_copy = root
            self.roots |= set(roots_of(root))
            if back is not None:
                self.back.add(back)
            self.copies += len(roots_of(root))  # (a copy per root)
            return
        self.writes |= c.footprint
        if c.inline:
            self.inlining.update(s.callee for s in c.sites)


def plain(c: Candidate) -> bool:
    """The flip deletes or brings back no callee."""
    return not any(s.callee in c.footprint for s in c.sites)


class Scheduler:
    def __init__(self, state: SearchState, candidates: Candidates, copies: Copies, reference: Reference):
        self.state = state
        self.candidates = candidates
        self.copies = copies
        self.reference = reference
        #: outline groups measured before the single flips (see :meth:`.Candidates.early_outlines`)
        self.early: list[Candidate] = []

    def batches_of(self, cands: list[Candidate]) -> list[list[Candidate]]:
        """Greedy packing: disjoint footprints, and the flips inlining calls of one callee leave one
        out (else together they may delete it, which none predicts)."""
        out: list[Batch] = []
        most = min(MAX_BATCH, self.state.batch_cap or MAX_BATCH)
        roots = {id(c): self.copies.root(c) for c in cands if (c.key, c.inline) not in self.state.interacting}
        many = Counter(roots.values())
        for c in cands:
            c.in_copy = None
            alone = id(c) not in roots  # (its change is then the object's: exact)
            # (a root's one flip goes in place: that costs nothing more)
            root = roots[id(c)] if not alone and many[roots[id(c)]] >= 2 else None
            back = self.copies.brought_back(c) if root is not None else None
            for b in ([] if alone else out):
                if not b.closed and len(b.flips) < most and b.admits(c, self.state, root, back):
                    b.add(c, root, back)
                    break
            else:
                b = Batch()
                if b.admits(c, self.state, root, back):  # (a flip on functions whose reference is not verified waits)
                    b.add(c, root, back)
                    b.closed = alone
                    out.append(b)
        if not out and cands:  # every flip waits for the reference: compile it
            self.reference.compile()
            return self.batches_of(cands)
        return [b.flips for b in out]

    def expected_winners(self, batch: list[Candidate]) -> float:
        """How many of ``batch``'s flips the prior expects to pay (:data:`UNKNOWN_P` where it has none)."""
        return sum(self.candidates.flip_p.get(c.key, UNKNOWN_P) for c in batch)

    def early_left(self) -> bool:
        """Outline groups to measure first, within their share of the compiles."""
        return bool(self.early) and self.state.ev.compiles < self.state.budget * EARLY_OUTLINE_SHARE

    def next_batch(self, queue: list[Candidate]) -> tuple[list[Candidate], list[Candidate]]:
        """The packed batch with the most expected winners (marked tried), and the candidates left."""
        queue = [self.candidates.fresh(c) for c in queue]
        if self.early_left():
            lead = self.candidates.fresh(self.early.pop(0))
            batch = self.batches_of([lead] + queue)[0]
            if lead not in batch:  # (it waits for the reference: measured alone once that is compiled)
                batch = [lead]
        else:
            self.early = []
            batch = max(self.batches_of(queue), key=self.expected_winners)  # (the first of equals)
        chosen = {id(c) for c in batch}
        self.state.tried.update(c.key for c in batch)
        return batch, [c for c in queue if id(c) not in chosen]

    def unmeasured(self, batch: list[Candidate], outs: list[Outcome]) -> list[Candidate]:
        """The flips of ``batch`` left unmeasured, untried again (else never measured)."""
        done = {id(o.candidate) for o in outs}
        back = [c for c in batch if id(c) not in done]
        for c in back:
            c.in_copy = None
            self.state.tried.discard(c.key)
        return back

    def resweep(self) -> list[Candidate]:
        """A sweep, when winners were applied since the last one: a flip that lost beside the old set
        may pay beside the new one.  Not with a deadline (time for modules not searched yet)."""
        st = self.state
        if not st.grouped or st.wins <= st.sweep_mark or st.deadline is not None:
            return []
        st.sweep_mark = st.wins
        return self.candidates.again()

    def affords(self, sweep: list[Candidate]) -> bool:
        """Are the compiles left enough for ``sweep`` at the flips per compile so far?"""
        st = self.state
        per_compile = st.flips_measured / max(1, st.ev.compiles)
        return st.budget - 1 - st.ev.compiles >= len(sweep) / max(per_compile, 1.0)
