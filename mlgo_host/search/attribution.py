"""Reading a batch's compile into each flip's gain, checked, never assumed (docs/search.md, "Attribution")."""

from __future__ import annotations

from typing import Sequence

from mlgo_host.measure.objsizes import ObjectSizes
from mlgo_host.search.replay import Measured
from mlgo_host.search.sites import Site, site_of_key
from mlgo_host.search.state import Candidate, Outcome, SearchState, released

#: The assembler pads .eh_frame's last FDE to a multiple of 8 bytes: these 4 bytes follow
#: the batch's total, not any one flip (objsizes counts them in ``other``).
EH_FRAME_PADDING = 4

#: failures a compiled reference may read (:func:`made_or_dropped`, :func:`pieces_moved`), a derived one not
TRACED = ("bytes no function owns moved", "a function outside every footprint changed")


class Attribution:
    """Reads a batch's compile against the state's reference."""

    def __init__(self, state: SearchState):
        self.state = state

    def read(self, batch: Sequence[Candidate], m: Measured) -> tuple[list[Outcome] | None, str]:
        """Each flip's change from its own functions, or None and why (the checks: docs/search.md, "Attribution")."""
        base = self.state.base.sizes
        traced = base.shared is not None and m.sizes.shared is not None  # (both compiled: pieces and referrers)
        if not traced and not only_padding_moved(base, m.sizes):
            return None, "bytes no function owns moved"
        owner = {f: c for c in batch for f in c.footprint}
        if len(owner) < sum(len(c.footprint) for c in batch):
            return None, "footprints overlap"
        delta = {c: 0 for c in batch}
        outside: dict[str, int] = {}
        for f in set(base.functions) | set(m.sizes.functions):
            d = m.sizes.functions.get(f, 0) - base.functions.get(f, 0)
            if d and f in owner:
                delta[owner[f]] += d
            elif d and not only_padding_changed(f, base, m.sizes):
                outside[f] = d
        extra: dict[Candidate, set[str]] = {c: set() for c in batch}
        if outside:
            made = made_or_dropped(outside, base, m.sizes, owner) if traced else None
            if made is None:
                return None, "a function outside every footprint changed"
            for f, c in made.items():
                delta[c] += outside[f]
                extra[c].add(f)
        other: dict[Candidate, dict[str, int]] = {c: {} for c in batch}
        if not only_padding_moved(base, m.sizes):
            pieces = pieces_moved(base, m.sizes, owner)
            if pieces is None:
                return None, "bytes no function owns moved"
            for (section, n), c in pieces:
                delta[c] += n
                other[c][section] = other[c].get(section, 0) + n
        flipped = [s for c in batch for s in c.sites]
        out = released(batch)  # (there the compiler's heuristic decides: its answer is the flip's)
        moved = (m.inlined ^ self.state.base.inlined) - {s.key for s in flipped}
        if any(not is_under_any(k, flipped) and outermost(k) not in out for k in moved):
            return None, "the compiler changed sites nobody flipped"
        return [Outcome(c, delta[c], applied(c, m), m, extra=frozenset(extra[c]), other=other[c]) for c in batch], ""


def only_padding_moved(base, now, explained: dict[str, int] | None = None) -> bool:
    """Unowned bytes unchanged but for .eh_frame's padding and ``explained`` (section -> bytes)."""
    explained = explained or {}
    if not explained and now.other == base.other:
        return True
    keys = set(base.other_sections) | set(now.other_sections)
    moved = {k: d for k in keys
             if (d := now.other_sections.get(k, 0) - base.other_sections.get(k, 0) - explained.get(k, 0))}
    if not moved:
        return bool(explained)
    return set(moved) == {".eh_frame"} and abs(moved[".eh_frame"]) <= EH_FRAME_PADDING


def only_padding_changed(f: str, base: ObjectSizes, now: ObjectSizes) -> bool:
    """``f``'s code is the same and only the padding after it moved: it follows where ``f`` now ends (a C++
    method after it is 2-byte aligned), which every earlier function's size moves, so it is nobody's flip."""
    return f in base.functions and f in now.functions and base.unpadded(f) == now.unpadded(f)


def made_or_dropped(outside: dict[str, int], base: ObjectSizes, now: ObjectSizes,
                    owner: dict[str, Candidate]) -> dict[str, Candidate] | None:
    """The flip that made or dropped each function changed outside every footprint: the one whose
    footprint (or made functions) holds all its referrers; None when one cannot be told."""
    if any(f in base.functions and f in now.functions for f in outside):
        return None  # (a function that changed size: the compiler's interprocedural work, nobody's)
    made: dict[str, Candidate] = {}
    grew = True
    while grew and len(made) < len(outside):
        grew = False
        for f in outside:
            if f in made:
                continue
            refs = (now.referrers if f in now.functions else base.referrers).get(f)
            who = {owner.get(g) or made.get(g) for g in refs or ()}
            if len(who) == 1 and None not in who:
                made[f] = who.pop()
                grew = True
    return made if len(made) == len(outside) else None


def pieces_moved(base: ObjectSizes, now: ObjectSizes, owner: dict[str, Candidate]
                 ) -> list[tuple[tuple[str, int], Candidate]] | None:
    """Each piece of ``other`` that appeared or went, with the flip whose functions alone refer to it."""
    out = []
    explained: dict[str, int] = {}
    for key in set(base.shared) | set(now.shared):
        n0, refs0 = base.shared.get(key, (0, frozenset()))
        n1, refs1 = now.shared.get(key, (0, frozenset()))
        if n0 == n1:
            continue
        who = {owner.get(g) for g in refs0 | refs1}
        if len(who) != 1 or None in who:
            return None
        out.append(((key[0], n1 - n0), who.pop()))
        explained[key[0]] = explained.get(key[0], 0) + n1 - n0
    return out if only_padding_moved(base, now, explained) else None


def adds_or_removes(c: Candidate, base: ObjectSizes, now: ObjectSizes) -> bool:
    return any((f in base.functions) != (f in now.functions) for f in c.footprint)


def clones_moved(c: Candidate, moved: set[str]) -> bool:
    """Did a copy of one of ``c``'s calls, inlined elsewhere along another function's body, change (a key
    ``moved`` of its callee, written at its place, that ``c`` does not name)?  The compiler decides such
    clones after the flip changed the body they were copied from."""
    written = {(s.callee, s.chain[0]) for s in c.sites}
    own = {s.key for s in c.sites}
    return any(k not in own and (x := site_of_key(k)).chain and (x.callee, x.chain[0]) in written for k in moved)


def applied(c: Candidate, m: Measured) -> bool:
    return all((s.key in m.inlined) == c.inline for s in c.sites)


def is_under_any(key: str, sites: Sequence[Site]) -> bool:
    return any(key.endswith(" @ " + s.callsite) for s in sites)


def outermost(key: str) -> str:
    """The function whose body holds a key's call now (its chain's last entry)."""
    return site_of_key(key).caller
