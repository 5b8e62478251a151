"""Flips measured in copies of the function they change, many per compile: most flips land in a few hub functions,
which in-place batches hold one flip of (docs/search.md, "Copies of a function")."""

from __future__ import annotations

import functools
import logging
import re
from itertools import accumulate
from typing import Iterable, Sequence

from mlgo_host.errors import CompilerError, MlgoHostError
from mlgo_host.measure.objsizes import ObjectSizes
from mlgo_host.measure.sizes import llvm_tool
from mlgo_host.search.attribution import Attribution, applied, is_under_any, outermost
from mlgo_host.search.copytext import ModuleText, Roots, copy_name, roots_of
from mlgo_host.search.replay import Measured
from mlgo_host.search.sites import Site, disassembled
from mlgo_host.search.state import Candidate, Outcome, SearchState

log = logging.getLogger("mlgo_host.search")

#: flips measured in copies per compile at most (each copy adds its function's compile time)
MAX_COPIES = 24
#: the functions one copy may copy as its roots at most (a flip whose code lands in several functions)
MAX_ROOTS = 8

#: one entry of a compile's plan: (copy k, its roots, the flip measured in it; None for a control copy)
Plan = list[tuple[int, Roots, Candidate | None]]


class Copies:
    def __init__(self, state: SearchState, attribution: Attribution, enabled: bool = True):
        self.state = state
        self.attribution = attribution
        self.enabled = enabled
        self.no_copies: set[Roots] = set()  # (a root, or a copy's roots)
        #: flips whose copy came out with other sites changed too: measured in place from then on
        self.not_in_copies: set[str] = set()
        self._trees: dict[Roots, frozenset[str] | None] = {}

    def forget(self) -> None:
        """Drop the trees: the reference changed."""
        self._trees.clear()

    @functools.cached_property
    def text(self) -> ModuleText:
        ev = self.state.ev
        return ModuleText(disassembled(self.state.module.bc_path, llvm_tool(ev.clang, "llvm-dis"), ev.timeout))

    def _debug_names(self, tree: Iterable[str]) -> set[str]:
        return {self.text.debug_name(fn) for fn in tree}

    def tree(self, root: Roots) -> frozenset[str] | None:
        """What a copy of ``root`` copies: the roots and the functions whose code ends up in them only
        (None when the module's text cannot copy them)."""
        if root in self._trees:
            return self._trees[root]
        st = self.state
        defined = st.base.sizes.functions
        final = st.final()
        callers = {x.caller for x in st.sites.values()}
        roots = frozenset(roots_of(root))
        out = set(roots)
        grew = True
        while grew:
            grew = False
            names = self._debug_names(out)
            for x in st.inline.values():
                c = x.callee
                if (c not in out and x.caller in out and c in callers and c not in defined
                        and final.get(c) and final[c] <= roots and _copied_chain(x, names)[0]):
                    out.add(c)
                    grew = True
        self._trees[root] = frozenset(out) if self.text.can_copy(out) else None
        return self._trees[root]

    def brought_back(self, c: Candidate) -> str | None:
        """The callee an ``out`` flip brings back (its body is gone), else None."""
        callees = {s.callee for s in c.sites}
        if c.inline or c.release or len(callees) != 1:
            return None
        (x,) = callees
        return x if x not in self.state.base.sizes.functions else None  # (gone since the flip was formed, too)

    def root(self, c: Candidate) -> Roots | None:
        """The function(s) of ``c``'s footprint to measure it in a copy of, or None."""
        if not self.enabled or c.key in self.not_in_copies or c.release:
            return None
        # (an out flip's callee counts only while the flip would bring it back: it may have come back since)
        own = c.footprint - {x.callee for x in c.sites} if not c.inline else c.footprint
        if not 1 <= len(own) <= MAX_ROOTS:
            return None
        root: Roots = next(iter(own)) if len(own) == 1 else tuple(sorted(own))
        if root in self.no_copies or any(r in self.no_copies or r not in self.state.base.sizes.functions
                                         for r in roots_of(root)):
            return None
        try:
            t = self.tree(root)
        except MlgoHostError as e:  # no text to copy: measure in place
            log.info("%s: no copies (%s)", self.state.module.name, e)
            self.enabled = False
            return None
        if t is None or c.reads & t or any(s.caller not in t for s in c.sites):
            return None
        back = self.brought_back(c)
        if back in t and not self.text.is_local(back):
            return None  # (its copy would come back as a static function, which it is not in place)
        return root

    def _in_copy(self, s: Site, tree: frozenset[str], names: set[str], k: int) -> Site:
        """``s`` as copy ``k`` names it."""
        inner, renamed = _copied_chain(s, names)
        chain = tuple((copy_name(f, k) if r else f, line, col) for (f, line, col), r in zip(s.chain, renamed))
        callee = copy_name(s.callee, k) if inner and s.callee in tree else s.callee
        return Site(callee, copy_name(s.caller, k), chain)

    def plan(self, batch: Sequence[Candidate]) -> Plan:
        """A control copy (no flip) per roots, then a copy per flip."""
        roots = sorted({c.in_copy for c in batch if c.in_copy is not None}, key=roots_of)
        plan: Plan = [(k, r, None) for k, r in enumerate(roots)]
        plan += [(len(plan) + i, c.in_copy, c) for i, c in enumerate(c for c in batch if c.in_copy is not None)]
        return plan

    def measure(self, batch: list[Candidate]) -> tuple[list[Outcome] | None, str]:
        """One compile: the ordinary flips in place, each other in its own copy; outcomes or None, why."""
        st = self.state
        plan = self.plan(batch)
        normal = [c for c in batch if c.in_copy is None]
        sites = st.set_with(normal)
        scope: set[str] = set()
        for k, root, c in plan:
            t = self.tree(root)
            names = self._debug_names(t)
            members = st.set_with([c]) if c is not None else list(st.inline.values())
            sites += [self._in_copy(x, t, names, k) for x in members if x.caller in t]
            scope |= {copy_name(fn, k) for fn in t if fn in st.ev.scope}
        ir = self.text.with_copies({k: (root, self.tree(root)) for k, root, _ in plan})
        try:
            m = st.ev.measure(sites, ir=ir, scope=scope)
        except CompilerError as e:  # the copies' text did not compile: the flips go without copies
            log.warning("%s: a compile with copies failed (%s); measuring %s without copies",
                        st.module.name, str(e).splitlines()[0],
                        ", ".join(sorted({r for _, w, _ in plan for r in roots_of(w)})))
            return None, "the compile failed"
        st.batches += 1
        return self.read(normal, plan, m)

    def _brought_back_in(self, plan: Plan) -> dict[int, tuple[str, str]]:
        """copy -> (the body its flip brings back as this compile names it, the callee)."""
        backs = {k: (root, self.brought_back(c)) for k, root, c in plan if c is not None}
        return {k: (copy_name(x, k) if x in self.tree(root) else x, x) for k, (root, x) in backs.items() if x}

    def read(self, normal: list[Candidate], plan: Plan, m: Measured) -> tuple[list[Outcome] | None, str]:
        """The ordinary flips read without the copies, each other against its control; flips whose
        control or copy cannot be read are left out (measured again in place)."""
        st = self.state
        back = self._brought_back_in(plan)
        apart = self._originals(normal, plan, back, m.sizes)
        if apart is None:
            return None, "copies: a body came back that no copy brought"
        originals, owners, pieces = apart
        plain, by_copy = split_copies(m.inlined)
        out, why = self.attribution.read(normal, Measured(originals, plain, m.wall_s))
        originals_moved = out is None
        if originals_moved and (normal or not st.compiled or st.provisional):
            return None, why
        # (else copies alone, whose calls changed a compiled reference's originals: each read by its control)
        out = out or []
        control: dict[Roots, dict[str, int]] = {}
        for k, root, c in plan:
            if any(copy_name(r, k) not in m.sizes.functions for r in roots_of(root)):
                return None, "copies: a copy is missing from the object"
            if root in self.no_copies:  # its control failed: its flips go back, measured in place later
                continue
            got, ref_keys, own = self._compiled_copy(k, root, by_copy, m.sizes)
            if c is None:
                self._check_control(root, own, got, ref_keys, originals, originals_moved)
                control[root] = own
                continue
            o = self._flip_outcome(c, k, own, control[root], got, ref_keys, back, owners, pieces, m)
            if o is not None:
                out.append(o)
        return out, ""

    def _originals(self, normal: list[Candidate], plan: Plan, back: dict[int, tuple[str, str]], sizes: ObjectSizes
                   ) -> tuple[ObjectSizes, dict[str, frozenset[str]], dict[str, dict[str, int]]] | None:
        """The object as an in-place compile would measure it, the bodies brought back and their pieces."""
        st = self.state
        copies = {copy_name(r, k) for k, root, _ in plan for r in roots_of(root)}
        # (what appeared where an in-place flip may change code is that flip's: an answered flip's heuristic)
        theirs = frozenset().union(*(c.footprint for c in normal))
        owners = bodies_brought({name for name, _ in back.values()}, copies, st.base.sizes, sizes, theirs)
        if owners is None:
            return None
        functions = {f: n for f, n in sizes.functions.items() if f not in copies and f not in owners}
        pieces, came = pieces_of(owners, st.base.sizes, sizes)
        other_sections = {k: n - came.get(k, 0) for k, n in sizes.other_sections.items()}
        other = sizes.other - sum(came.values())
        originals = ObjectSizes(sum(functions.values()) + other, functions, other,
                                other_sections=other_sections, padding=sizes.padding, pools=sizes.pools)
        return originals, owners, pieces

    def _compiled_copy(self, k: int, root: Roots, by_copy: dict[int, set[str]], sizes: ObjectSizes
                       ) -> tuple[set[str], set[str], dict[str, int]]:
        """Copy ``k``'s inlined keys, the reference's keys in its tree, and each root's copy's size."""
        st = self.state
        t = self.tree(root)
        names = self._debug_names(t)
        # (by debug name, which two functions may share: a key known to be another function's is not)
        ref_keys = {key for key in st.base.inlined if outermost(key) in names
                    and (key not in st.sites or st.sites[key].caller in t)}
        return by_copy.get(k, set()), ref_keys, {r: sizes.unpadded(copy_name(r, k)) for r in roots_of(root)}

    def _check_control(self, root: Roots, own: dict[str, int], got: set[str], ref_keys: set[str],
                       originals: ObjectSizes, originals_moved: bool) -> None:
        """A control copy must be its function: same size, same sites inlined."""
        st = self.state
        if any(n != originals.unpadded(r) for r, n in own.items()) or got != ref_keys:
            # compiled apart it is other code (a short jump to a neighbour, a pass that saw its callers)
            st.splits["copies: a control copy differs from its function"] += 1
            self.no_copies.add(root)
        elif originals_moved and any(n != st.base.sizes.unpadded(r) for r, n in own.items()):
            # the copies' calls changed the function itself: its flips are read against the control
            st.splits["copies: the function moved with its copies"] += 1

    def _flip_outcome(self, c: Candidate, k: int, own: dict[str, int], control: dict[str, int], got: set[str],
                      ref_keys: set[str], back: dict[int, tuple[str, str]], owners: dict[str, frozenset[str]],
                      pieces: dict[str, dict[str, int]], m: Measured) -> Outcome | None:
        """Flip ``c``'s outcome from copy ``k``, or None (then measured in place from then on)."""
        st = self.state
        flipped = list(c.sites)
        moved = (got ^ ref_keys) - {s.key for s in flipped}
        if any(not is_under_any(key, flipped) for key in moved):
            st.splits["copies: the compiler changed sites nobody flipped"] += 1
            self.not_in_copies.add(c.key)
            return None
        # (each root's copy against its control; the originals' sizes, unless they moved)
        gains = {r: n - control[r] for r, n in own.items()}
        changed = {r: st.base.sizes.functions[r] + d for r, d in gains.items()}
        delta = sum(gains.values())
        extra: frozenset[str] = frozenset()
        other: dict[str, int] = {}
        if k in back:
            # the bodies it brought back are its cost, as in place: the same code wherever they are called from
            name, callee = back[k]
            for f in (f for f, who in owners.items() if name in who):
                cost = m.sizes.unpadded(f)
                delta += cost
                changed[callee if f == name else f] = cost
            other = pieces.get(name, {})
            delta += sum(other.values())
            extra = frozenset(changed) - c.footprint  # (what came back, and the callee when gone only since)
        view = Measured(ObjectSizes(0, changed, 0), got, m.wall_s)
        return Outcome(c, delta, applied(c, view), view, extra=extra, other=dict(other))


def bodies_brought(brought: set[str], copies: set[str], base: ObjectSizes, now: ObjectSizes,
                   theirs: frozenset[str] = frozenset()) -> dict[str, frozenset[str]] | None:
    """Each function that came back with the bodies ``brought`` back (each body, and new functions
    only such functions refer to) -> its bodies; None when another function appeared outside the
    copies and ``theirs`` (the in-place flips' footprints)."""
    owners = {f: frozenset({f}) for f in brought if f in now.functions}
    if not brought:
        return owners
    appeared = {f for f in now.functions
                if f not in base.functions and f not in copies and f not in brought and f not in theirs}
    if appeared and now.referrers is None:
        return None
    grew = True
    while grew:
        grew = False
        for f in appeared - owners.keys():
            refs = now.referrers.get(f) or ()
            if refs and all(g in owners for g in refs):
                owners[f] = frozenset().union(*(owners[g] for g in refs))
                grew = True
    return owners if appeared <= owners.keys() else None


def pieces_of(owners: dict[str, frozenset[str]], base: ObjectSizes, now: ObjectSizes
              ) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """The new pieces of ``other`` only bodies brought back refer to: per body, and in all."""
    out: dict[str, dict[str, int]] = {}
    came: dict[str, int] = {}
    if not owners or base.shared is None or now.shared is None:
        return out, came
    for key, (n, refs) in now.shared.items():
        grew = n - base.shared.get(key, (0, frozenset()))[0]
        if grew > 0 and refs and all(g in owners for g in refs):
            came[key[0]] = came.get(key[0], 0) + grew
            for body in frozenset().union(*(owners[g] for g in refs)):
                mine = out.setdefault(body, {})
                mine[key[0]] = mine.get(key[0], 0) + grew
    return out, came


def _copied_chain(s: Site, names: set[str]) -> tuple[bool, list[bool]]:
    """Whether the call itself, and each entry of ``s``'s chain, lies in a copied body."""
    # (an entry is inside while it and every entry outer to it are copied bodies)
    renamed = list(accumulate((fn in names for fn, _, _ in reversed(s.chain)), lambda a, b: a and b))[::-1]
    return bool(renamed) and renamed[0], renamed


_COPY = re.compile(r"\.mlgo(\d+)(?=[:\s;]|$)")


def split_copies(keys: Iterable[str]) -> tuple[set[str], dict[int, set[str]]]:
    """The originals' inlined keys, and per copy its keys named as the originals."""
    plain: set[str] = set()
    by_copy: dict[int, set[str]] = {}
    for key in keys:
        m = _COPY.search(key)
        if m is None:
            plain.add(key)
        else:
            by_copy.setdefault(int(m.group(1)), set()).add(_COPY.sub("", key))
    return plain, by_copy
