"""A tune directory (``mlgo-host tune --output T``, layout in docs/search.md): written by :class:`TuneStore`;
:class:`TunedDir` finds the module of a compile and :class:`TunedPolicies` gives the policy that compiles it."""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import pickle
import shlex
import shutil
import urllib.parse
from typing import Any, Sequence

import numpy as np

from mlgo_host.corpus.benchmark import sha256_of
from mlgo_host.corpus.build import LOCATION_TRACKING
from mlgo_host.corpus.corpus import Module
from mlgo_host.corpus.identity import IdentityIndex, command_identity, project_root, read_sources, relative_identity
from mlgo_host.errors import ConfigError
from mlgo_host.formats import read_format_json
from mlgo_host.fsutil import atomic_path, atomic_write_bytes, atomic_write_json
from mlgo_host.policies import HEURISTICS, load_policy
from mlgo_host.policies.base import Policy
from mlgo_host.policies.replay import Replay, ReplayPolicy, read_replay
from mlgo_host.policies.saved import copy_without_saved_model
from mlgo_host.search.replay import replay_flags, replay_text
from mlgo_host.search.sites import site_of_line
from mlgo_host.workers.worker import policy_blob_from_dir

log = logging.getLogger("mlgo_host.tune")

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


def inline_replay_flags(path: str, changed: bool = False) -> list[str]:
    """Driver flags applying compiler replay file ``path``.  For a source edited since tuning
    the fallback is ``Original``, not ``NeverInline``: calls whose key moved get -Oz's decisions
    rather than none (which can make the object much bigger)."""
    # a source compile needs location tracking on (the corpus bitcode has it built in)
    return [*LOCATION_TRACKING, *replay_flags(path, "Original" if changed else "NeverInline")]


class UnusableReplay(ConfigError):
    """A tuned module's compiler replay file cannot be applied: missing, unreadable or not replay lines
    (clang would fail the compile on it)."""


def check_inline_replay(path: str, name: str, tdir: str) -> None:
    """UnusableReplay unless ``path`` is a replay file clang can apply (what its parser takes: every
    line names a call site), for module ``name`` of tune directory ``tdir``."""
    what = f"tuned module {name}: its replay file {path}"
    again = f"(mlgo-host tune --output {tdir} writes it again)"
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except FileNotFoundError:
        raise UnusableReplay(f"{what} is missing {again}") from None
    except UnicodeDecodeError:
        raise UnusableReplay(f"{what} is not UTF-8 text {again}") from None
    except OSError as e:
        raise UnusableReplay(f"{what} is unreadable ({e.strerror}) {again}") from None
    for k, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue  # (clang skips blank lines)
        try:
            site_of_line(line)
        except ValueError:
            raise UnusableReplay(f"{what} is no replay file (line {k}: {line[:60]!r}) {again}") from None


def shell_flags(flags: list[str]) -> str:
    return " ".join(shlex.quote(f) for f in flags)


def read_manifest(path: str) -> dict:
    """The manifest of tune directory ``path``; ConfigError naming it."""
    mf = os.path.join(path, MANIFEST)
    doc = read_format_json(mf, FORMAT, "tune directory", hint="make one with mlgo-host tune")
    if not isinstance(doc.get("modules"), dict):
        raise ConfigError(f"{mf}: a tune directory's manifest without its 'modules' object")
    for key in ("root", "base", "policy_source"):
        _check_field(mf, key, doc.get(key), str)
    for name, entry in doc["modules"].items():
        check_module_entry(mf, name, entry)
    return doc


def check_module_entry(mf: str, name: str, m: Any) -> None:
    """ConfigError naming manifest ``mf`` and the field when module ``name``'s entry holds a field of the
    wrong type (hand-edited or corrupt): every reader (a build's wrapper too) trusts them once read here."""
    where = f"modules.{name}"
    if not isinstance(m, dict):
        raise ConfigError(f"{mf}: {where} must be an object, got {_shown(m)}")
    for key in ("replay", "inline_replay", "source_sha256", "status"):
        _check_field(mf, f"{where}.{key}", m.get(key), str)
    for key in ("default_size", "best_size", "policy_size", "compiles"):
        _check_field(mf, f"{where}.{key}", m.get(key), int)
    _check_field(mf, f"{where}.base_flags", m.get("base_flags"), list, str)
    ident = m.get("identity")
    if not ident:  # (none recorded: every reader takes a falsy one so)
        return
    if not isinstance(ident, dict):
        raise ConfigError(f"{mf}: {where}.identity must be an object or null, got {_shown(ident)}")
    for key, kind, item in (("source", str, None), ("output", str, None), ("flags", list, str)):
        _check_field(mf, f"{where}.identity.{key}", ident.get(key), kind, item, null=False)


def _check_field(mf: str, field: str, v: Any, kind: type, item: type | None = None, null: bool = True) -> None:
    """ConfigError naming ``field`` unless ``v`` is a ``kind`` (of ``item``s), or None when ``null``."""
    if v is None and null:
        return
    # (a JSON true is a Python int: no size or count)
    ok = isinstance(v, kind) and not isinstance(v, bool) and (item is None or all(isinstance(x, item) for x in v))
    if not ok:
        want = {str: "a string", int: "an integer", list: "a list"}[kind] + (" of strings" if item is str else "")
        raise ConfigError(f"{mf}: {field} must be {want}{' or null' if null else ''}, got {_shown(v)}")


def _shown(v: Any) -> str:
    """A field's value as its JSON, cut short (the error stays one line)."""
    text = json.dumps(v)
    return text if len(text) <= 60 else text[:57] + "..."


def identity_of(argv, cwd: str, source: str, output: str) -> dict | None:
    """A compile's identity (``argv`` compiler first), as :class:`IdentityIndex` looks it up; None when it has none."""
    try:
        return command_identity(list(argv), cwd, source, output)
    except (ValueError, TypeError):
        return None


class TunedDir:
    """The tuned modules of ``path``, found by module name or by the identity of a compile."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self.manifest = read_manifest(self.path)
        self.modules: dict[str, dict] = self.manifest["modules"]
        self.index = IdentityIndex({n: m["identity"] for n, m in self.modules.items() if m.get("identity")})
        self._replays: dict[str, Replay] = {}

    def __len__(self) -> int:
        return len(self.modules)

    def match(self, argv, cwd: str, source: str, output: str) -> str | None:
        """The tuned module a compile is (``argv`` compiler first), or None."""
        ident = identity_of(argv, cwd, source, output)
        return None if ident is None else self.index.match(ident)

    def flags_for(self, name: str | None, changed: bool = False) -> list[str]:
        """Module ``name``'s base flags (an inline threshold) and replay flags, each if any;
        UnusableReplay when its replay file is gone or damaged (the compile would fail on it)."""
        if not name or name not in self.modules:
            return []
        # the search was compiled with these: the replay's sizes are theirs
        base = list(self.modules[name].get("base_flags") or ())
        rel = self.modules[name].get("inline_replay")
        if not rel:
            return base
        path = os.path.join(self.path, rel)
        check_inline_replay(path, name, self.path)
        return [*base, *inline_replay_flags(path, changed)]

    def module_of_source(self, source: str) -> str | None:
        """The tuned module compiled from ``source`` (a path, maybe relative to the tune's root)."""
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
            return sha256_of(source) != want
        except OSError:
            return True

    def replay(self, name: str) -> Replay:
        """Module ``name``'s JSON replay (read once)."""
        if name not in self._replays:
            self._replays[name] = read_replay(os.path.join(self.path, self.modules[name]["replay"]))
        return self._replays[name]


class TunedPolicies:
    """Policies for compiles with a tune directory, one instance per thread (policies keep state)."""

    def __init__(self, tuned: TunedDir, fallback: Policy | None, seed: int = 0, greedy: bool = True):
        self.tuned = tuned
        self.fallback = fallback
        self.seed = seed
        self.greedy = greedy
        self._bases: dict[str, Policy] = {}

    def _base(self, replay: Replay) -> Policy:
        key = replay.base_path()
        if key not in self._bases:
            try:
                self._bases[key] = load_policy(key, seed=self.seed, greedy=self.greedy)
            except ConfigError as e:
                raise ConfigError(f"{replay.path}: base policy: {e}") from None
        return self._bases[key]

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


class TuneStore:
    """``T``'s results, replays and manifest, each written atomically as a result arrives."""

    def __init__(self, path: str, manifest: dict, results: dict[str, dict], identities: dict[str, dict]):
        self.path = path
        self.manifest = manifest
        self.results = results
        self.identities = identities

    @classmethod
    def open(cls, path: str, corpus_dir: str, policy: str | None, clang: str, mods: Sequence[Module]) -> "TuneStore":
        path = os.path.abspath(path)
        if os.path.exists(path) and not os.path.isdir(path):
            raise ConfigError(f"--output {path} exists and is not a directory")
        for sub in (REPLAYS, DATA):  # (each result is written there)
            p = os.path.join(path, sub)
            if os.path.lexists(p) and not os.path.isdir(p):
                raise ConfigError(f"{p} is not a directory: a tune directory keeps its {sub} there "
                                  "(move it away to continue T)")
        mf = os.path.join(path, MANIFEST)
        if os.path.exists(mf):
            manifest = read_manifest(path)
            src = manifest.get("policy_source", "default")
            if policy is not None and _policy_key(policy) != src:
                raise ConfigError(f"{path} was tuned from {src}; give that --policy (or none) to continue it, "
                                  "or another --output")
        else:
            manifest = {"format": FORMAT, "corpus": os.path.abspath(corpus_dir), "modules": {},
                        "policy_source": _policy_key(policy or "default"),
                        "base": _install_policy(path, policy or "default"), "clang": clang}
        idents = read_sources(corpus_dir)
        root = project_root(idents.values())
        manifest["root"] = root
        rel = {n: relative_identity(i, root) for n, i in idents.items()}
        results = _load_results(os.path.join(path, DATA))
        for m in mods:  # a module rebuilt since (other bitcode or command) is searched anew
            if m.name in results and results[m.name].get("module_key") != m.key:
                log.warning("tune: %s changed since it was tuned: searching it again", m.name)
                del results[m.name]
            elif m.name in results and results[m.name]["status"] == "failed":
                # a failure is no result: its cause may be gone (a missing tool, a timeout too short)
                log.warning("tune: %s failed last time: searching it again", m.name)
                del results[m.name]
        store = cls(path, manifest, results, rel)
        store.restore_replays()
        return store

    def restore_replays(self) -> None:
        """Write again each result's compiler replay file that is missing or damaged (a build would
        fall back to -Oz for its module): the result in data/ says what it holds."""
        for r in self.results.values():
            if r["status"] == "ok":
                self._write_inline_replay(r, only_changed=True)

    def policy_blob(self) -> dict:
        base = self.manifest["base"]
        if base in HEURISTICS:
            return {"heuristic": base}
        # normpath: the base is named relative to replays/, which a new T has not made yet
        return policy_blob_from_dir(os.path.normpath(os.path.join(self.path, REPLAYS, base)))

    def add(self, res: dict) -> None:
        """Keep one module's search result and write it out."""
        name = res["name"]
        if res["status"] == "skipped":  # started after the time was up
            return
        if res["status"] != "ok" and name not in self.results:
            log.warning("tune: %s: %s", name, res.get("reason") or "failed")
        self.results[name] = res
        with atomic_path(os.path.join(self.path, DATA, module_file(name, ".pkl"))) as tmp, open(tmp, "wb") as f:
            pickle.dump(res, f, protocol=pickle.HIGHEST_PROTOCOL)
        if res["status"] == "ok":
            self._write_inline_replay(res)
        self.manifest["modules"][name] = self._entry(res)
        atomic_write_json(os.path.join(self.path, MANIFEST), self.manifest)

    def _write_inline_replay(self, r: dict, only_changed: bool = False) -> None:
        """The compiler's replay file of the module's best set (none when it is -Oz's object);
        ``only_changed``: left as it is when it already holds that."""
        path = os.path.join(self.path, REPLAYS, module_file(r["name"], INLINE_REPLAY_EXT))
        if r.get("inline") is None:
            if os.path.exists(path):
                os.unlink(path)
            return
        data = replay_text([site_of_line(ln) for ln in r["inline"]], r["scope"]).encode()
        if only_changed and _holds(path, data):
            return
        try:
            atomic_write_bytes(path, data)
        except OSError as e:
            raise ConfigError(f"{path}: cannot write the replay file ({e.strerror})") from None

    def _entry(self, r: dict) -> dict:
        has = r["status"] == "ok" and r.get("inline") is not None
        return {"replay": None, "inline_replay": f"{REPLAYS}/{module_file(r['name'], INLINE_REPLAY_EXT)}" if has
                else None, "identity": self.identities.get(r["name"]),
                "source_sha256": _source_digest(self.identities.get(r["name"]), self.manifest.get("root")),
                "status": r["status"], "reason": r.get("reason", ""), "default_size": r["default_size"],
                "policy_size": r.get("policy_size"), "best_size": r.get("best_size"), "compiles": r["compiles"],
                "decisions": r.get("decisions", 0), "tried": len(r.get("tried", ())),
                "flips_measured": r.get("flips_measured", 0), "flips_in_copies": r.get("flips_in_copies", 0),
                "batches": r.get("batches", 0),
                "flips_accepted": sum(1 for f in r.get("flips", ()) if f["accepted"]),
                "replay_matches": r.get("replay_matches"), "stopped": r.get("stopped"),
                # the starts measured: the object at each inline threshold, and with the start policy's decisions
                "threshold_sizes": r.get("thresholds"), "policy_start_size": r.get("policy_start"),
                "start": r.get("start"),
                # the flags the module's search was compiled with (an inline threshold): a build adds them
                "base_flags": list(r.get("base_flags") or ()) if r["status"] == "ok"
                and r.get("best_size") is not None and r["best_size"] < r["default_size"] else []}

    def report(self, mods: Sequence[Module], run_minutes: float, run_compiles: int,
               spent: dict[str, dict] | None = None) -> dict[str, Any]:
        """The summary of ``mods``, also written with report.csv and report.png."""
        rows = [self.manifest["modules"][m.name] | {"module": m.name} for m in mods
                if m.name in self.manifest["modules"]]
        ok = [r for r in rows if r["status"] == "ok" and r["best_size"] is not None]
        d = sum(r["default_size"] for r in ok)
        b = sum(r["best_size"] for r in ok)
        p = sum(r["policy_size"] for r in ok if r["policy_size"] is not None)
        compiles = sum(r["compiles"] for r in rows)
        s = {"modules": len(mods), "tuned": len(ok), "failed": len(rows) - len(ok),
             "improved": sum(1 for r in ok if r["best_size"] < r["default_size"]),
             "default_text": d, "best_text": b, "gain_bytes": d - b,
             "gain_pct": 100.0 * (d - b) / d if d else 0.0,
             "policy_pct": 100.0 * (p - d) / d if d and self.manifest["base"] != "default" else None,
             "compiles": compiles, "compiles_per_module": compiles / len(rows) if rows else 0.0,
             "run_compiles": run_compiles, "run_minutes": round(run_minutes, 2),
             "identified": sum(1 for r in rows if r.get("identity")),
             "searched_past_start": sum(1 for m in mods if (self.results.get(m.name) or {}).get("tried")),
             "exhausted": sum(1 for m in mods if (self.results.get(m.name) or {}).get("tried")
                              and self.results[m.name].get("stopped") == "exhausted"),
             "time_spent": spent or {}}
        atomic_write_json(os.path.join(self.path, "summary.json"), s)
        _write_csv(os.path.join(self.path, "report.csv"), rows)
        _plot(os.path.join(self.path, "report.png"), ok, s)
        return s


def _source_digest(identity: dict | None, root: str | None) -> str | None:
    """sha256 of a module's source as tuned (a build compares it)."""
    if not identity:
        return None
    try:
        return sha256_of(os.path.join(root or "", identity["source"]))
    except OSError:
        return None


def _holds(path: str, data: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read() == data
    except OSError:
        return False


def _policy_key(policy: str) -> str:
    return policy if policy in HEURISTICS else os.path.abspath(policy)


def _install_policy(path: str, policy: str) -> str:
    """The replays' base: a heuristic's name, or the saved policy copied to ``T/policy``."""
    load_policy(policy)  # a bad name or directory fails here, before any compile
    if policy in HEURISTICS:
        return policy
    dest = os.path.join(path, POLICY)
    shutil.rmtree(dest, ignore_errors=True)
    copy_without_saved_model(policy, dest)
    return os.path.join("..", POLICY)


def _load_results(data_dir: str) -> dict[str, dict]:
    out: dict[str, dict] = {}
    names = sorted(os.listdir(data_dir)) if os.path.isdir(data_dir) else []
    for p in (os.path.join(data_dir, fn) for fn in names if fn.endswith(".pkl")):
        try:
            with open(p, "rb") as f:
                r = pickle.load(f)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError) as e:
            raise ConfigError(f"{p}: unreadable tune data ({e}); remove it to search that module again") from None
        if not (isinstance(r, dict) and isinstance(r.get("name"), str) and isinstance(r.get("status"), str)):
            # a valid pickle of something else (a file put there by hand)
            raise ConfigError(f"{p}: unreadable tune data (a {type(r).__name__}, not a module's search result); "
                              "remove it to search that module again")
        out[r["name"]] = r
    return out


def load_tune_results(path: str) -> list[dict]:
    """Every ok search result of tune directory ``path`` (what ``search_data`` reads)."""
    read_manifest(path)
    return [r for r in _load_results(os.path.join(path, DATA)).values() if r["status"] == "ok"]


_CSV_FIELDS = ("module", "decisions", "default_size", "policy_size", "best_size", "gain_bytes", "gain_pct",
               "compiles", "tried", "flips_accepted", "stopped", "status", "reason")


def _write_csv(path: str, rows: list[dict]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=_CSV_FIELDS, extrasaction="ignore")
    w.writeheader()
    for r in sorted(rows, key=lambda r: r["module"]):
        gain = (r["default_size"] - r["best_size"]) if r.get("best_size") is not None else None
        w.writerow(dict(r, gain_bytes=gain, gain_pct=None if gain is None or not r["default_size"]
                        else round(100.0 * gain / r["default_size"], 3)))
    atomic_write_bytes(path, buf.getvalue().encode())


def _plot(path: str, rows: list[dict], s: dict) -> None:
    """Gain (% of the module's -Oz .text) against module size."""
    if not rows:
        return
    import matplotlib  # lazily: ~0.5 s to import, only for the report

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    x = np.array([max(r["default_size"], 1) for r in rows], dtype=float)
    y = np.array([100.0 * (r["default_size"] - r["best_size"]) / max(r["default_size"], 1) for r in rows])
    ax.scatter(x, y, s=14, alpha=0.7)
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("module .text at -Oz (bytes)")
    ax.set_ylabel("smaller than -Oz (%)")
    ax.set_title(f"tune: {s['gain_pct']:.2f}% smaller than -Oz in total ({s['gain_bytes']} bytes), "
                 f"{s['compiles_per_module']:.0f} compiles/module", fontsize=9)
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
