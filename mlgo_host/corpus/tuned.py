"""A tune directory (``mlgo-host tune --output T``), as builds read it.

Layout (written by :mod:`mlgo_host.search.tune`)::

    T/tune.json                 the manifest (format mlgo_host.tune/1): the corpus,
                                the base policy, per module its compiler replay
                                file and base flags (an inline threshold), its
                                identity (mlgo_host.corpus.identity, relative to
                                the project root) and source sha256, default /
                                policy / best .text sizes, compiles spent,
                                decisions tried
    T/replays/<module>.inline.txt   the compiler's replay file of the module's best
                                set (-cgscc-inline-replay; none when the best is
                                -Oz's object or a threshold's alone)
    T/replays/<module>.json     a fingerprinted JSON replay (mlgo_host.replay/1),
                                which builds serve when the manifest names one
    T/data/<module>.pkl         every flip tried and the best trajectory
                                (training data for search.gin: search_data='T')
    T/policy/                   a copy of the base policy when it is a saved one
    T/baselines/                -Oz sizes of the modules (cache)
    T/report.csv, report.png, summary.json

:class:`TunedDir` finds the module of a compile (by its identity, or by
module name for a corpus) and :class:`TunedPolicies` gives the policy that
compiles it: the module's replay over its base policy, or the fallback
policy for a compile that is no tuned module.  :func:`outcome` then says
what happened: ``tuned`` (every forced decision applied on the recorded
stream), ``stale`` (the module changed since tuning: the replay stopped
forcing at the first difference and the base answered the rest) or
``default`` (not a tuned module).
"""

from __future__ import annotations

import hashlib
import os
import urllib.parse
from typing import Any

from mlgo_host.corpus.build import LOCATION_TRACKING
from mlgo_host.corpus.identity import IdentityIndex, command_identity
from mlgo_host.errors import ConfigError
from mlgo_host.formats import read_format_json
from mlgo_host.policies import load_policy
from mlgo_host.policies.base import Policy
from mlgo_host.policies.replay import Replay, ReplayPolicy, read_replay

MANIFEST = "tune.json"
FORMAT = "mlgo_host.tune/1"
REPLAYS = "replays"
#: a module's replay file for the compiler (``-cgscc-inline-replay``), beside its JSON replay
INLINE_REPLAY_EXT = ".inline.txt"
DATA = "data"
POLICY = "policy"


def module_file(name: str, ext: str) -> str:
    """A module's file name in a flat directory (its name quoted)."""
    return urllib.parse.quote(name, safe="") + ext


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def replay_flags(path: str, fallback: str = "NeverInline") -> list[str]:
    """The flags that make clang apply replay file ``path``: in every
    function the file names, the listed sites are inlined and the others get
    ``fallback``; every other function gets the compiler's own decisions."""
    return ["-mllvm", f"-cgscc-inline-replay={path}", "-mllvm", "-cgscc-inline-replay-scope=Function",
            "-mllvm", f"-cgscc-inline-replay-fallback={fallback}"]


def inline_replay_flags(path: str, changed: bool = False) -> list[str]:
    """Driver flags applying compiler replay file ``path``.  A tuned
    function inlines exactly its listed sites (fallback ``NeverInline``):
    the tuned object, byte for byte.  For a source edited since tuning
    (``changed``) the fallback is ``Original``: sites whose key still
    matches are inlined, the compiler decides the others, so a function
    whose calls moved gets -Oz's decisions instead of none (``NeverInline``
    would leave its moved calls out, which can make the object much bigger
    than -Oz's); only the tuned "do not inline" decisions are lost."""
    # a source compile needs location tracking on (the corpus bitcode has it built in)
    return [*LOCATION_TRACKING, *replay_flags(path, "Original" if changed else "NeverInline")]


def shell_flags(flags: list[str]) -> str:
    import shlex

    return " ".join(shlex.quote(f) for f in flags)


def read_manifest(path: str) -> dict:
    """The manifest of tune directory ``path``; ConfigError naming it."""
    mf = os.path.join(path, MANIFEST)
    doc = read_format_json(mf, FORMAT, "tune directory", hint="make one with mlgo-host tune")
    if not isinstance(doc.get("modules"), dict):
        raise ConfigError(f"{mf}: a tune directory's manifest without its 'modules' object")
    return doc


class TunedDir:
    """The tuned modules of ``path``: their replays, found by module name or
    by the identity of a compile."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self.manifest = read_manifest(self.path)
        self.modules: dict[str, dict] = self.manifest["modules"]
        self.index = IdentityIndex({n: m["identity"] for n, m in self.modules.items() if m.get("identity")})
        self._replays: dict[str, Replay] = {}

    def __len__(self) -> int:
        return len(self.modules)

    def identified(self) -> int:
        """Modules a build can be matched to (their identity is known)."""
        return sum(1 for m in self.modules.values() if m.get("identity"))

    def match(self, argv, cwd: str, source: str, output: str) -> str | None:
        """The tuned module a compile is (``argv`` compiler first), or None."""
        try:
            ident = command_identity(list(argv), cwd, source, output)
        except (ValueError, TypeError):
            return None
        return self.index.match(ident)

    def inline_replay(self, name: str) -> str | None:
        """Module ``name``'s compiler replay file (absolute), or None."""
        rel = self.modules.get(name, {}).get("inline_replay")
        return os.path.join(self.path, rel) if rel else None

    def flags_for(self, name: str | None, changed: bool = False) -> list[str]:
        """The compiler flags applying module ``name``'s tuned decisions: the
        inline threshold its search started from, if any, and its compiler
        replay file, if any ([] for a module tune left at -Oz); ``changed``: the
        source was edited since tuning (see :func:`inline_replay_flags`)."""
        if not name or name not in self.modules:
            return []
        # the module's search was compiled with these (an inline threshold it started from): the replay's
        # sizes are theirs, and a function the replay does not name gets the heuristic at that threshold;
        # alone (no replay file), they compile the threshold's own object, the module's best
        base = [str(f) for f in self.modules[name].get("base_flags") or ()]
        path = self.inline_replay(name)
        return [*base, *inline_replay_flags(path, changed)] if path else base

    def module_of_source(self, source: str) -> str | None:
        """The tuned module compiled from ``source`` (a path, absolute or
        relative to the current directory, or relative to the project root
        the tune recorded); None for a file the tune never saw."""
        want = os.path.realpath(source)
        root = self.manifest.get("root") or ""
        for name, m in self.modules.items():
            ident = m.get("identity")
            if ident and (os.path.realpath(os.path.join(root, ident["source"])) == want
                          or ident["source"] == os.path.normpath(source)):
                return name
        return None

    def changed(self, name: str, source: str) -> bool:
        """True when ``source`` is no longer the file module ``name`` was tuned on."""
        want = self.modules.get(name, {}).get("source_sha256")
        if not want:
            return False
        try:
            return file_sha256(source) != want
        except OSError:
            return True

    def replay(self, name: str) -> Replay:
        """Module ``name``'s replay (read once)."""
        r = self._replays.get(name)
        if r is None:
            r = self._replays[name] = read_replay(os.path.join(self.path, self.modules[name]["replay"]))
        return r


class TunedPolicies:
    """Policies for compiles with a tune directory: one instance per thread
    (policies keep per-session state).  ``fallback`` answers compiles that
    are no tuned module; the replays' base policies are loaded once."""

    def __init__(self, tuned: TunedDir, fallback: Policy | None, seed: int = 0, greedy: bool = True):
        self.tuned = tuned
        self.fallback = fallback
        self.seed = seed
        self.greedy = greedy
        self._bases: dict[str, Policy] = {}

    def _base(self, replay: Replay) -> Policy:
        key = replay.base_path()
        b = self._bases.get(key)
        if b is None:
            try:
                b = self._bases[key] = load_policy(key, seed=self.seed, greedy=self.greedy)
            except ConfigError as e:
                raise ConfigError(f"{replay.path}: base policy: {e}") from None
        return b

    def for_module(self, name: str | None) -> tuple[Policy | None, str | None]:
        """(policy, tuned module name or None) for module ``name``."""
        if name is None or not self.tuned.modules.get(name, {}).get("replay"):
            return self.fallback, None  # not tuned, or tuned into a compiler replay (flags_for)
        replay = self.tuned.replay(name)
        return ReplayPolicy(replay, self._base(replay), name=f"tuned:{name}"), name

    def for_compile(self, argv, cwd: str, source: str, output: str) -> tuple[Policy | None, str | None]:
        return self.for_module(self.tuned.match(argv, cwd, source, output))

    def outcome(self, policy: Any, name: str | None) -> dict:
        """The stats fields of a finished compile made with ``for_*``'s answer."""
        if name is None or not isinstance(policy, ReplayPolicy):
            return {"tuned": "default"}
        m = self.tuned.modules[name]
        return {"tuned": "stale" if policy.stale else "tuned", "tuned_module": name,
                "tuned_applied": policy.applied, "tuned_default_text": m.get("default_size"),
                "tuned_best_text": m.get("best_size")}
