"""Measuring one batch: its compile, read by :mod:`.attribution` (flips in place) and :mod:`.copies` (in copies)."""

from __future__ import annotations

from mlgo_host.search.attribution import TRACED, Attribution, adds_or_removes, applied, clones_moved
from mlgo_host.search.copies import Copies
from mlgo_host.search.reference import Reference
from mlgo_host.search.state import Candidate, Outcome, SearchState, released


class Measurer:
    def __init__(self, state: SearchState, attribution: Attribution, copies: Copies, reference: Reference):
        self.state = state
        self.attribution = attribution
        self.copies = copies
        self.reference = reference

    def measure(self, batch: list[Candidate]) -> list[Outcome]:
        """Each flip's change from the reference, the batch split while it cannot be read (the
        flips that added or removed a function, the usual owners of a moved constant, apart)."""
        st = self.state
        if not batch or not st.left():
            return []
        if any(c.in_copy is not None for c in batch):
            return self._in_copies(batch)
        m = st.ev.measure(st.set_with(batch), release=released(batch))
        st.batches += 1
        out, why = self.attribution.read(batch, m)
        if self.reference.check_start(out is not None, why):
            return self.measure(batch)
        if out is None and why != "footprints overlap" and (st.unverified or (not st.compiled and why in TRACED)):
            # (perhaps the derived reference; or one with no pieces to trace what moved by: compile it, then again)
            self.reference.compile()
            return self.measure(batch)
        if out is None and len(batch) == 1:
            c = batch[0]
            out = [Outcome(c, m.text - st.base.text, applied(c, m), m)]
            st.interacting.add((c.key, c.inline))  # (beside others it reads wrong again: alone from now on)
        elif out is None:
            st.splits[why] += 1
            suspects = []
            if why == "the compiler changed sites nobody flipped":
                suspects = [c for c in batch if clones_moved(c, m.inlined ^ st.base.inlined)]
            elif why == "bytes no function owns moved":
                suspects = [c for c in batch if adds_or_removes(c, st.base.sizes, m.sizes)]
            if 0 < len(suspects) < len(batch):
                parts = [[c for c in batch if c not in suspects], suspects]
            else:
                parts = [batch[:len(batch) // 2], batch[len(batch) // 2:]]
            out = self.measure(parts[0]) + self.measure(parts[1])
            if len(out) < len(batch) and not st.left():
                # (else the next pass would pack this batch again, fail again and never measure a flip)
                st.batch_cap = min(st.batch_cap or len(batch), max(1, len(batch) // 2))
            return out
        st.unverified.clear()  # every function outside the batch's footprints matched the reference
        if st.batch_cap is not None and len(batch) >= st.batch_cap:  # (read at the cap: twice as many next)
            st.batch_cap *= 2
        st.flips_measured += len(out)
        if len(batch) == 1:
            out[0].alone = True
        return out

    def _in_copies(self, batch: list[Candidate]) -> list[Outcome]:
        """:meth:`measure` with copies; flips whose copies cannot be read are left unmeasured."""
        st = self.state
        normal = [c for c in batch if c.in_copy is None]
        backs = [c for c in batch if c.in_copy is not None and self.copies.brought_back(c)]
        out, why = self.copies.measure(batch)
        failed = why == "the compile failed"
        if not failed:
            if self.reference.check_start(out is not None, why):
                return self._in_copies(batch)
            # (a derived reference has no pieces or referrers to read what moved by; measure() compiles it too)
            untraced = why in TRACED and (not st.compiled or (backs and st.base.sizes.shared is None))
            if out is None and (st.unverified or untraced):
                # perhaps the derived reference's failure: compile it, then again (else the function loses its copies)
                self.reference.compile()
                return self._in_copies(batch)
        if out is None and normal and not failed and not why.startswith("copies"):
            # the flips measured in place failed, not the copies: those go on in copies, without them
            st.splits[why] += 1
            return self._in_copies([c for c in batch if c.in_copy is not None]) + self.measure(normal)
        if out is None:
            st.splits[why if why.startswith("copies") else "copies: " + why] += 1
            if backs and not failed:
                # (a body they brought back may have moved what the originals are read by: they go in place)
                self.copies.not_in_copies |= {c.key for c in backs}
                return self.measure([c for c in batch if c not in backs])
            self.copies.no_copies |= {c.in_copy for c in batch if c.in_copy is not None}
            for c in batch:
                c.in_copy = None
            return self.measure(normal)
        st.unverified.clear()
        st.flips_measured += len(out)
        st.flips_in_copies += len(out) - len(normal)
        return out
