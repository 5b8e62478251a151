"""The reference every flip is measured against: the current best set's
sizes and inlined keys (:attr:`SearchState.base`), and how it follows the
set.

The start is the probe's decisions compiled by replay, or, when the probe
took the compiler's own decisions (``tune``), the probe's plain compile
standing in for it until the first batch's attribution checks it (a failed
one compiles the replay and the batch is measured again): a compile saved
per module (:meth:`Reference.begin`, :meth:`Reference.check_start`).

Winners of a batch are applied together and the next reference is not
compiled but *derived*: the reference's functions with each winner's as the
compile that measured it gave them (:meth:`Reference.accept`); they stay
unverified until a later batch finds every function outside its own
footprints unchanged.  A compiled reference that comes out larger than the
derived one it replaces means the winners interact: undoing each is
measured first (:meth:`Reference.compile`).  The budget keeps one compile
for the best set's own (:meth:`Reference.finish`).
"""

from __future__ import annotations

from mlgo_host.measure.objsizes import ObjectSizes
from mlgo_host.search.attribution import EH_FRAME_PADDING, is_under_any, outermost
from mlgo_host.search.candidates import Candidates
from mlgo_host.search.copies import Copies
from mlgo_host.search.replay import Measured
from mlgo_host.search.sites import site_of_key
from mlgo_host.search.state import Candidate, Outcome, SearchState


class Reference:
    """The reference of one module's search (see the module docstring)."""

    def __init__(self, state: SearchState, candidates: Candidates, copies: Copies):
        self.state = state
        self.candidates = candidates
        self.copies = copies
        #: flips applied since the reference was last compiled (they derived it)
        self.derived_by: list[Candidate] = []
        #: bytes the compiled references came out larger than derived ones (winners that interact)
        self.drift = 0

    def begin(self) -> Measured:
        """The start and the reference: the probe's own decisions compiled by
        replay; keys the compiler did not apply are set aside.  When the
        probe's plain compile made exactly these decisions (tune's probe
        takes the compiler's own), its object stands in for that compile
        until the first batch checks it (:meth:`check_start`)."""
        st = self.state
        plain = st.probe.plain
        if plain is not None and plain.text == st.probe.text and all(
                (k in st.inline) == (k in plain.inlined) for k in st.sites):
            st.base = st.start = plain
            st.start_text = plain.text
            st.provisional = True
            return st.base
        return self.compile_start()

    def compile_start(self) -> Measured:
        """The start's decisions compiled by replay (keys the compiler did
        not apply set aside as broken)."""
        st = self.state
        st.base = st.start = st.ev.measure(st.inline.values())
        st.start_text = st.base.text
        st.provisional = False
        self.copies.forget()
        missing = set(st.inline) - st.base.inlined
        st.broken |= missing
        return st.base

    def check_start(self, read: bool, why: str) -> bool:
        """After a batch's attribution against a reference that is the plain
        compile's: one that held checked it (every function outside the
        flips' footprints, and every key nobody flipped, as the replay gives
        them); one that failed compiles the replay (True: measure again),
        since the failure may be the replay's, not a flip's (a key it does
        not match, seen in 5 of 126 modules)."""
        if not self.state.provisional or why == "footprints overlap":  # (no function was compared)
            return False
        if read:
            self.state.provisional = False
            return False
        self.compile_start()
        return True

    def accept(self, won: list[Outcome]) -> list[Candidate]:
        """Apply a batch's winners.  The next reference is not compiled: its
        functions are the reference's with each winner's functions as the
        compile that measured it gave them (footprints are disjoint), so
        they stay *unverified* until a later batch, which keeps clear of
        them, finds every function outside its own footprints unchanged; a
        batch that fails then first compiles the reference.  Returns the
        winners kept."""
        if not won:
            return []
        st = self.state
        st.wins += len(won)
        functions = dict(st.base.sizes.functions)
        other_sections = dict(st.base.sizes.other_sections)
        inlined = set(st.base.inlined)
        for o in won:
            o.accepted = True
            c = o.candidate
            for section, n in o.other.items():
                other_sections[section] = other_sections.get(section, 0) + n
            for f in c.footprint | o.extra:
                size = o.measured.sizes.functions.get(f)
                if size is None:
                    functions.pop(f, None)
                else:
                    functions[f] = size
            if c.release:  # the compiler's answer in the functions it was left: their sites now
                answer = {k for k in o.measured.inlined if outermost(k) in c.release}
                for k in [k for k, x in st.inline.items() if x.caller in c.release]:
                    del st.inline[k]
                for k in answer:
                    x = st.sites.setdefault(k, site_of_key(k))
                    st.inline[k] = x
                inlined = {k for k in inlined if outermost(k) not in c.release} | answer
            for s in c.sites:
                under = {k for k, x in st.inline.items() if x.is_under(s)} if not c.inline else set()
                if c.inline:
                    st.inline[s.key] = s
                    inlined.add(s.key)
                    inlined |= {k for k in o.measured.inlined if is_under_any(k, [s])}
                else:
                    st.inline.pop(s.key, None)
                    for k in under:
                        del st.inline[k]
                    inlined -= {s.key} | under | {k for k in inlined if is_under_any(k, [s])}
            st.unverified |= c.footprint | o.extra
        self.copies.forget()
        self.derived_by += [o.candidate for o in won]
        if len(won) == 1 and won[0].alone:
            # its compile is the new reference itself: exact, even where the flip's change spilled out of its
            # predicted footprint (then read from the object's total), which a derived reference would miss
            st.base = won[0].measured
            st.unverified.clear()
            st.compiled = True
            self.derived_by = []
            return [won[0].candidate]
        other = st.base.sizes.other + sum(n for o in won for n in o.other.values())
        sizes = ObjectSizes(sum(functions.values()) + other, functions, other, other_sections=other_sections)
        st.base = Measured(sizes, inlined, 0.0)
        st.compiled = False
        return [o.candidate for o in won]

    def compile(self) -> None:
        """Compile the current best (the reference a derived one stood for).
        When it comes out larger than derived, the flips that derived it
        interact (with each other, or with the flips they were measured
        beside): undoing each is measured first (:attr:`SearchState.suspects`)."""
        st = self.state
        derived = None if st.compiled else st.base.text
        st.base = st.ev.measure(st.inline.values())
        st.unverified.clear()
        st.compiled = True
        self.copies.forget()
        if derived is not None:
            self.drift += st.base.text - derived
        if derived is not None and st.base.text > derived + EH_FRAME_PADDING:
            st.suspects += self.candidates.undos(self.derived_by)
        self.derived_by = []

    def finish(self) -> None:
        """The best set compiled, so the reported size is the object's own
        (the budget keeps a compile for it)."""
        if not self.state.compiled:
            self.compile()
