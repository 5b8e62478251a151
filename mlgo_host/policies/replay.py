"""Replay files (docs/formats.md).  Decision indices count the compile's observations (the channel's own
ids restart per function).  A forced action changes what the compiler asks next: from the first mismatch
with the recorded fingerprint (or a forced action the advisor rejects) the base answers and the replay is
``stale``."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Any

from mlgo_host.channel.problems import BINARY, MASKED_CHOICE, PROBLEMS
from mlgo_host.errors import ConfigError, MlgoHostError
from mlgo_host.formats import check_format, read_format_json
from mlgo_host.fsutil import atomic_write_json
from mlgo_host.policies.heuristic import HEURISTICS
from mlgo_host.policies.loading import load_base_policy
from mlgo_host.policies.base import Policy

FORMAT = "mlgo_host.replay/1"
WHAT = "replay file"  # how formats.py's messages name it
HASH = "blake2b-64"
_DIGEST_SIZE = 8


@dataclasses.dataclass
class Replay:
    forced: dict[int, Any]
    base: str = "default"
    advisor: str = "inline"
    module: str | None = None
    observations: int | None = None
    fingerprint: dict | None = None
    #: the file it was read from (resolves a relative ``base``); not written
    path: str | None = dataclasses.field(default=None, compare=False)

    def to_json(self) -> dict:
        return {"format": FORMAT, "advisor": self.advisor, "base": self.base,
                "forced": {str(i): a for i, a in sorted(self.forced.items())},
                **{k: v for k in ("module", "observations", "fingerprint") if (v := getattr(self, k)) is not None}}

    @classmethod
    def from_json(cls, d: Any, where: str = "replay") -> "Replay":
        """Validate a parsed replay; ConfigError(``where: ...``) on any flaw."""
        check_format(d, FORMAT, WHAT, where)
        advisor = d.get("advisor", "inline")
        if advisor not in PROBLEMS:
            raise ConfigError(f"{where}: unknown advisor {advisor!r} (have {', '.join(PROBLEMS)})")
        base = d.get("base", "default")
        if not isinstance(base, str) or not base:
            raise ConfigError(f"{where}: 'base' must be a policy name or directory, got {base!r}")
        forced = _parse_forced(d.get("forced", {}), advisor, where)
        obs = d.get("observations")
        if obs is not None and (type(obs) is not int or obs < 0):
            raise ConfigError(f"{where}: 'observations' must be a non-negative integer, got {obs!r}")
        module = d.get("module")
        if module is not None and not isinstance(module, str):
            raise ConfigError(f"{where}: 'module' must be a string, got {module!r}")
        fp = d.get("fingerprint")
        if fp is not None:
            _check_fingerprint(fp, where)
        return cls(forced, base, advisor, module, obs, fp)

    def base_path(self) -> str:
        """``base`` as load_policy takes it, a relative directory looked up beside the replay file first."""
        if self.base in HEURISTICS or os.path.isabs(self.base) or not self.path:
            return self.base
        beside = os.path.join(os.path.dirname(os.path.abspath(self.path)), self.base)
        return beside if os.path.exists(beside) else self.base

    def with_fingerprint(self, policy: "ReplayPolicy") -> "Replay":
        """This replay with the fingerprint and observation count of ``policy``'s most recent session."""
        return dataclasses.replace(self, fingerprint=policy.observed_fingerprint(), observations=policy.seen)


def _parse_forced(raw: Any, advisor: str, where: str) -> dict[int, Any]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: 'forced' must be an object of decision index -> action, got {type(raw).__name__}")
    kind = PROBLEMS[advisor].action_kind
    forced: dict[int, Any] = {}
    for k, a in raw.items():
        try:
            i = int(k)
        except (TypeError, ValueError):
            i = -1
        if i < 0 or str(i) != str(k).strip():
            raise ConfigError(f"{where}: forced decision index {k!r} is not a non-negative integer")
        at = f"{where}: forced[{k}]"
        if kind == BINARY and (type(a) is not int or a not in (0, 1)):
            raise ConfigError(f"{at}: an inlining decision is 0 or 1, got {a!r}")
        if kind == MASKED_CHOICE and (type(a) is not int or a < 0):
            raise ConfigError(f"{at}: an eviction index is a non-negative integer, got {a!r}")
        if kind not in (BINARY, MASKED_CHOICE) and type(a) not in (int, float):
            raise ConfigError(f"{at}: a priority is a number, got {a!r}")
        forced[i] = a
    return forced


def _check_fingerprint(fp: Any, where: str) -> None:
    if not isinstance(fp, dict) or fp.get("hash") != HASH:
        raise ConfigError(f"{where}: 'fingerprint' must be an object with \"hash\": \"{HASH}\"")
    at = fp.get("at", {})
    digests = list(at.values()) if isinstance(at, dict) else [None]
    if fp.get("end") is not None:
        digests.append(fp["end"])
    for h in digests:
        if not isinstance(h, str) or len(h) != 2 * _DIGEST_SIZE or not _is_hex(h):
            raise ConfigError(f"{where}: fingerprint digest {h!r} is not {2 * _DIGEST_SIZE} hex digits")
    for k in at:  # a dict: anything else failed above
        if not str(k).isdigit():
            raise ConfigError(f"{where}: fingerprint index {k!r} is not a non-negative integer")


def _is_hex(s: str) -> bool:
    try:
        bytes.fromhex(s)
    except ValueError:
        return False
    return True


def read_replay(path: str | os.PathLike) -> Replay:
    """A replay file, validated; ConfigError naming the file on any flaw."""
    path = os.fspath(path)
    r = Replay.from_json(read_format_json(path, FORMAT, WHAT), where=path)
    r.path = path
    return r


def write_replay(path: str | os.PathLike, replay: Replay) -> None:
    atomic_write_json(os.fspath(path), replay.to_json())


def stream_fingerprint(raw: bytes, nbytes: int, forced) -> dict:
    """The fingerprint :class:`ReplayPolicy` records, from a recorded episode's observation bytes
    (``nbytes`` each): a search keeps its best compile without compiling it again."""
    want = {int(i) for i in forced}
    h = hashlib.blake2b(digest_size=_DIGEST_SIZE)
    at = {}
    for i in range(len(raw) // nbytes if nbytes else 0):
        h.update(raw[i * nbytes:(i + 1) * nbytes])
        if i in want:
            at[str(i)] = h.hexdigest()
    return {"hash": HASH, "at": at, "end": h.hexdigest()}


class ReplayPolicy(Policy):
    """Forces ``replay.forced``, defers to ``base`` elsewhere.  After a session: ``seen`` decisions,
    ``applied`` forced actions, ``stale``/``stale_at``."""

    def __init__(self, replay: Replay, base: Policy, name: str | None = None):
        self.replay = replay
        self.base = base
        self.name = name or f"replay({base.name})"
        self.stochastic = base.stochastic
        self._want = {int(i): bytes.fromhex(h) for i, h in (replay.fingerprint or {}).get("at", {}).items()}
        self._reset()

    def _reset(self) -> None:
        self.seen = self.applied = 0
        self.stale_at: int | None = None  # first decision whose check failed
        self.stale_reason = ""
        self._forced = self.replay.forced  # emptied when the replay goes stale
        self._hash = hashlib.blake2b(digest_size=_DIGEST_SIZE)
        self._at: dict[int, bytes] = {}

    def bind(self, header, advisor) -> None:
        if advisor.name != self.replay.advisor:
            raise ConfigError(f"{self.replay.path or 'replay'}: made for the {self.replay.advisor} advisor, "
                              f"used for {advisor.name}")
        super().bind(header, advisor)
        self.base.bind(header, advisor)
        self._reset()

    def _forced_action(self, obs) -> Any:
        """Hash the observation; the forced action of this decision if it still applies, else None."""
        i = self.seen
        self.seen = i + 1
        self._hash.update(obs.raw)
        a = self._forced.get(i)
        if a is None:
            return None
        d = self._at[i] = self._hash.digest()
        want = self._want.get(i)
        if want is not None and d != want:
            self._go_stale(i, "the observation stream differs from the recorded one")
            return None
        try:
            self.advisor.validate(obs, a)
        except MlgoHostError as e:
            self._go_stale(i, f"forced action {a!r} rejected: {e}")
            return None
        self.applied += 1
        return a

    def _go_stale(self, i: int, why: str) -> None:
        self.stale_at = i
        self.stale_reason = f"decision {i}: {why}"
        self._forced = {}

    def act(self, obs) -> Any:
        a = self._forced_action(obs)
        return self.base.act(obs) if a is None else a

    def act_logp(self, obs) -> tuple[Any, float]:
        a = self._forced_action(obs)
        return self.base.act_logp(obs) if a is None else (a, 0.0)

    @property
    def stale(self) -> bool:
        """The module's stream is not the one the replay was recorded on."""
        if self.stale_at is not None:
            return True
        fp = self.replay.fingerprint
        if self.replay.observations is not None and self.seen != self.replay.observations:
            return True
        return bool(fp and fp.get("end") is not None and self._hash.hexdigest() != fp["end"])

    @property
    def missed(self) -> int:
        return len(self.replay.forced) - self.applied

    def observed_fingerprint(self) -> dict:
        return {"hash": HASH, "at": {str(i): d.hex() for i, d in sorted(self._at.items())},
                "end": self._hash.hexdigest()}

    def report(self) -> dict:
        """What the most recent session did with the replay (for JSON outputs)."""
        out = {"forced": len(self.replay.forced), "applied": self.applied, "missed": self.missed,
               "decisions": self.seen, "stale": self.stale}
        if self.stale:
            out["stale_reason"] = self.stale_reason or (
                f"the stream differs after the last forced decision ({self.seen} decisions, "
                f"{self.replay.observations} recorded)")
        return out


def replay_policy(replay: Replay, base: str | None = None, seed: int = 0, greedy: bool = True) -> ReplayPolicy:
    """A :class:`ReplayPolicy` for ``replay``; ``base`` overrides the file's."""
    where = replay.path or "replay"
    path = base or replay.base_path()
    if os.path.isfile(path):
        raise ConfigError(f"{where}: the base of a replay cannot be another replay ({path})")
    try:
        b = load_base_policy(path, seed=seed, greedy=greedy)
    except ConfigError as e:
        raise ConfigError(f"{where}: base policy: {e}") from None
    stem = os.path.splitext(os.path.basename(replay.path))[0] if replay.path else "replay"
    return ReplayPolicy(replay, b, name=f"{stem}+{b.name}")


def load_replay(path: str | os.PathLike, base: str | None = None, seed: int = 0,
                greedy: bool = True) -> ReplayPolicy:
    """:func:`replay_policy` of a replay file."""
    return replay_policy(read_replay(path), base=base, seed=seed, greedy=greedy)
