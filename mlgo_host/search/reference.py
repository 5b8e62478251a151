"""The reference every flip is measured against (:attr:`SearchState.base`), compiled or *derived* from the winners'
compiles (docs/search.md, "The reference")."""

from __future__ import annotations

from mlgo_host.measure.objsizes import ObjectSizes
from mlgo_host.search.attribution import EH_FRAME_PADDING, is_under_any, outermost
from mlgo_host.search.candidates import Candidates
from mlgo_host.search.copies import Copies
from mlgo_host.search.replay import Measured
from mlgo_host.search.sites import site_of_key
from mlgo_host.search.state import Candidate, Outcome, SearchState


class Reference:
    def __init__(self, state: SearchState, candidates: Candidates, copies: Copies):
        self.state = state
        self.candidates = candidates
        self.copies = copies
        #: flips applied since the reference was last compiled (they derived it)
        self.derived_by: list[Candidate] = []
        #: bytes the compiled references came out larger than derived ones (winners that interact)
        self.drift = 0

    def begin(self) -> Measured:
        """The start: its replay, or the probe's plain compile when it made exactly these decisions."""
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
        """The start's decisions compiled by replay (keys not applied set aside as broken)."""
        st = self.state
        st.base = st.start = st.ev.measure(st.inline.values())
        st.start_text = st.base.text
        st.provisional = False
        self.copies.forget()
        st.broken |= set(st.inline) - st.base.inlined
        return st.base

    def check_start(self, read: bool, why: str) -> bool:
        """After a batch read against the plain compile: a reading that held checks it; a failed one
        may be the replay's, not a flip's, so compile that (True: measure again)."""
        if not self.state.provisional or why == "footprints overlap":  # (no function was compared)
            return False
        if not read:
            self.compile_start()
        self.state.provisional = False
        return not read

    def accept(self, won: list[Outcome]) -> list[Candidate]:
        """Apply a batch's winners and derive the next reference; returns the winners kept."""
        if not won:
            return []
        st = self.state
        st.wins += len(won)
        functions = dict(st.base.sizes.functions)
        padding = dict(st.base.sizes.padding)
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
                padding.pop(f, None)
                if o.measured.sizes.padding.get(f):
                    padding[f] = o.measured.sizes.padding[f]
            if c.release:  # the compiler's answer in the functions it was left: their sites now
                answer = {k for k in o.measured.inlined if outermost(k) in c.release}
                for k in [k for k, x in st.inline.items() if x.caller in c.release]:
                    del st.inline[k]
                for k in answer:
                    st.inline[k] = st.sites.setdefault(k, site_of_key(k))
                inlined = {k for k in inlined if outermost(k) not in c.release} | answer
            for s in c.sites:
                if c.inline:
                    st.inline[s.key] = s
                    inlined |= {s.key} | {k for k in o.measured.inlined if is_under_any(k, [s])}
                else:
                    gone = {s.key} | {k for k, x in st.inline.items() if x.is_under(s)}
                    for k in gone:
                        st.inline.pop(k, None)
                    inlined -= gone | {k for k in inlined if is_under_any(k, [s])}
            st.unverified |= c.footprint | o.extra
        self.copies.forget()
        self.derived_by += [o.candidate for o in won]
        if len(won) == 1 and won[0].alone:
            # its compile is the new reference itself: exact, even where the change spilled out of its footprint
            st.base = won[0].measured
            st.unverified.clear()
            st.compiled = True
            self.derived_by = []
            return [won[0].candidate]
        other = st.base.sizes.other + sum(n for o in won for n in o.other.values())
        sizes = ObjectSizes(sum(functions.values()) + other, functions, other, other_sections=other_sections,
                            padding=padding)
        st.base = Measured(sizes, inlined, 0.0)
        st.compiled = False
        return [o.candidate for o in won]

    def compile(self) -> None:
        """Compile the current best; when larger than derived, its winners interact: undo each first."""
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
        """Compile the best set, so the reported size is the object's own."""
        if not self.state.compiled:
            self.compile()
