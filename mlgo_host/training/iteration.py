"""The steps every PPO iteration shares, whether its episodes come from a corpus
(:mod:`~mlgo_host.training.train_loop`) or from real builds (:mod:`~mlgo_host.training.online`): open the
learner (restored, warm-started or fresh), train and save, commit.  ``state.json`` is written last and
atomically: it marks the iteration done, so a killed run redoes it from the previous checkpoint.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import shutil
import time
from typing import Any

import numpy as np

from mlgo_host.errors import ConfigError
from mlgo_host.formats import read_json_object
from mlgo_host.fsutil import dir_built_aside
from mlgo_host.policies.saved import gate_of, read_saved_policy
from mlgo_host.policies.vocab import VocabBuilder
from mlgo_host.learning.learner import Learner
from mlgo_host.shipped import SHIPPED, resolve_policy

STATE = "state.json"


#: what a state.json field is, when there: a count, or a container of that type
_STATE_COUNTS = ("iteration", "round")
_STATE_CONTAINERS = {"history": list, "consumed": list, "moving_average": dict, "config": dict}


def read_state(root_dir: str, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """``root_dir/state.json`` ({} before the first completed iteration) with the ``required`` fields; a state
    this cannot resume from is a :class:`ConfigError` naming the file."""
    path = os.path.join(root_dir, STATE)
    if not os.path.exists(path):
        return {}
    state = read_json_object(path, "state", "; move it away to start over")
    problem = _state_problem(state, required)
    if problem:
        raise ConfigError(f"{path}: unreadable state ({problem}); move it away to start over")
    return state


def _state_problem(state: dict, required: tuple[str, ...]) -> str | None:
    """What makes ``state`` no state.json a trainer wrote, if anything."""
    for k in _STATE_COUNTS:
        v = state.get(k, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            return f"{k} is {_short(v)}, not a count"
    for k, kind in _STATE_CONTAINERS.items():
        if k in state and not isinstance(state[k], kind):
            return f"{k} is {_short(state[k])}, not a JSON {'array' if kind is list else 'object'}"
    missing = [k for k in required if k not in state] if state else []
    return f"no {', '.join(missing)}" if missing else None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def read_header(path: str) -> dict:
    """The channel header a run trains on (``root_dir/header.json``)."""
    return read_json_object(path, "channel header", "; move it away to have it written again")


def resolve_warmstart(name_or_path: str | None) -> str | None:
    """``warmstart_policy`` (a shipped policy's name or a directory) as an absolute saved policy directory."""
    if not name_or_path:
        return None
    path = resolve_policy(name_or_path)
    if not os.path.isfile(os.path.join(path, "metadata.json")):
        close = difflib.get_close_matches(name_or_path, sorted(SHIPPED), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"warmstart_policy {name_or_path!r} is neither a policy the package ships "
                          f"({', '.join(sorted(SHIPPED))}) nor a saved policy directory (no metadata.json){hint}")
    return os.path.abspath(path)


def open_learner(root_dir: str, header_json: dict, *, advisor: str, vocab_dir: str, seed: int, clang: str,
                 done: int, warmstart_policy: str | None) -> Learner:
    """The learner after ``done`` completed iterations (0: warm start or fresh); its saved policies keep the
    warm start's gate."""
    start = read_saved_policy(warmstart_policy) if warmstart_policy else None
    learner = Learner(header_json, advisor=advisor, vocab_dir=vocab_dir, root_dir=root_dir, seed=seed, clang=clang,
                      keep_default=bool(start and start.spec.default_input),
                      gate=gate_of(start.metadata, warmstart_policy) if start else None,
                      start_spec=start.spec if start else None)
    if done:
        learner.restore(done)
    elif warmstart_policy:
        learner.warmstart(warmstart_policy)
    return learner


@dataclasses.dataclass
class Update:
    iteration: int  # 1-based: the iteration this update completes
    metrics: dict[str, Any]  # losses, entropy, KL, batches (empty: no episodes, no update)
    policy_dir: str  # root_dir/policy/<iteration>
    train_s: float
    save_s: float


def train_and_save(learner: Learner, root_dir: str, iteration: int, episodes: list, rewards: list[float], *,
                   saved_model: bool) -> Update:
    """Train (no episodes: no update), write ``policy/<iteration>/`` and the checkpoint."""
    t0 = time.monotonic()
    metrics = learner.train(episodes, rewards, iteration - 1) if episodes else {}
    t1 = time.monotonic()
    policy_dir = os.path.join(root_dir, "policy", str(iteration))
    learner.save_policy(policy_dir, step=iteration, saved_model=saved_model)
    learner.checkpoint(iteration)
    return Update(iteration, metrics, policy_dir, train_s=t1 - t0, save_s=time.monotonic() - t1)


def build_vocab(episodes: list, vocab_dir: str, source: str) -> None:
    """Quantile vocab of the episodes' features; ``source`` starts the error when they have none."""
    builder = VocabBuilder()
    for ep in episodes:
        builder.add(ep.features())
    if not builder.observations:
        raise ConfigError(f"{source} no observations; cannot build a vocab")
    builder.build().save(vocab_dir)


def percentile_summary(values: list[float]) -> dict[str, float]:
    """p10 ... p90 and the mean (ml-compiler-opt's reward_distribution)."""
    if not values:
        return {}
    arr = np.asarray(values, dtype=np.float64)
    return {**{f"p{p}": float(np.percentile(arr, p)) for p in range(10, 100, 10)}, "mean": float(arr.mean())}


def numeric_metrics(update: Update) -> dict[str, float]:
    return {k: v for k, v in update.metrics.items() if isinstance(v, (int, float))}


def publish_policy(policy_dir: str, dest: str) -> None:
    """``dest`` becomes a copy of a directory in one rename: a reader never sees half of it."""
    with dir_built_aside(dest) as tmp:
        shutil.copytree(policy_dir, tmp, dirs_exist_ok=True)
