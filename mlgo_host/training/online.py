"""Training from episodes collected in real builds (``mlgo-host train --collected``, docs/training.md): each
invocation is one PPO iteration on the episode files not trained on yet, rewarded against the same module's
default-policy size.  The first one fixes ``R/vocab``: the warm start's (its weights were trained on it),
else ``vocab_path``'s, else built from its episodes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from typing import Any

import gin
import numpy as np

from mlgo_host.collected import load_episode, read_meta, read_records
from mlgo_host.errors import ConfigError, CorpusError
from mlgo_host.fsutil import atomic_write_json
from mlgo_host.learning.summaries import Summaries
from mlgo_host.measure.reward import reward
from mlgo_host.training.checks import check_counts, make_root
from mlgo_host.training.iteration import (STATE, Update, build_vocab, numeric_metrics, open_learner,
                                          percentile_summary, publish_policy, read_header, read_state,
                                          resolve_warmstart, train_and_save)

log = logging.getLogger("mlgo_host.train.online")

MODE = "online"
#: train_from_collected parameters that default to common.gin's macros
MACRO_PARAMS = ("clang_path", "vocab_path", "warmstart_policy", "seed")


@gin.configurable(module="online")
def train_from_collected(
    root_dir: str,
    collected_dir: str,
    baseline_stats: str,
    *,
    warmstart_policy: str | None = None,
    vocab_path: str | None = None,
    advisor: str = "inline",
    clang_path: str = "clang-19",
    seed: int = 0,
    progress: bool = True,
) -> dict[str, Any]:
    """One PPO update on the new episodes of ``collected_dir``; returns its history row."""
    check_counts("online.train_from_collected", 0, seed=seed)  # a negative one fails the update's shuffle
    root_dir = os.path.abspath(root_dir)
    collected_dir = os.path.abspath(collected_dir)
    warmstart_policy = resolve_warmstart(warmstart_policy)
    state = read_state(root_dir)
    if state and (state.get("config") or {}).get("mode") != MODE:
        raise ConfigError(f"{root_dir} holds a corpus training run; train from collected episodes in another "
                          f"--root_dir (warm start from its saved_policy)")
    consumed: list[str] = list(state.get("consumed", []))
    done = int(state.get("iteration", 0))
    # the new episodes and their rewards first: no TensorFlow work yet
    episodes, rewards, metas = _new_episodes(collected_dir, baseline_stats, consumed, done, advisor)
    header_json = _check_header(episodes, root_dir, collected_dir)
    vocab_dir, source = _vocab_source(root_dir, state, warmstart_policy, vocab_path)
    _start_run_dir(root_dir, state, header_json, vocab_dir, source, episodes)
    t0 = time.monotonic()
    learner = open_learner(root_dir, header_json, advisor=advisor, vocab_dir=vocab_dir, seed=seed, clang=clang_path,
                           done=done, warmstart_policy=warmstart_policy)
    if progress:
        print(f"iteration {done + 1}: training on {len(episodes)} episodes "
              f"({sum(ep.n for ep in episodes)} decisions)", file=sys.stderr, flush=True)
    t_setup = time.monotonic() - t0
    update = train_and_save(learner, root_dir, done + 1, episodes, rewards, saved_model=True)
    t1 = time.monotonic()
    publish_policy(update.policy_dir, os.path.join(root_dir, "saved_policy"))
    update.save_s += time.monotonic() - t1
    dist = percentile_summary(rewards)
    row = _history_row(update, episodes, metas, dist, t_setup)
    config = state.get("config") or {}
    with contextlib.closing(Summaries(root_dir)) as summaries:
        summaries.write_iteration(update.iteration, dist, row, None)
    atomic_write_json(os.path.join(root_dir, STATE), {  # last: the iteration is done
        "iteration": update.iteration, "consumed": consumed + [m["file"] for m in metas],
        "history": list(state.get("history", [])) + [row],
        "config": {"mode": MODE, "advisor": advisor, "collected_dir": collected_dir,
                   "baseline_stats": os.path.abspath(baseline_stats), "seed": seed, "vocab": vocab_dir,
                   "vocab_source": config.get("vocab_source", source),
                   "warmstart_policy": config.get("warmstart_policy", warmstart_policy)},
    })
    print(_summary_line(row), file=sys.stderr, flush=True)
    return row


def _new_episodes(collected_dir: str, baseline_stats: str, consumed: list[str], done: int, advisor: str):
    """(episodes, rewards, metas) of the episode files not yet trained on."""
    if not os.path.isdir(collected_dir):
        raise ConfigError(f"no collection directory {collected_dir} (serve with --collect DIR first)")
    if not os.path.exists(baseline_stats):
        raise ConfigError(f"no baseline stats file {baseline_stats} (serve the same tree with --policy default "
                          f"--stats FILE first)")
    try:
        episodes, rewards, metas = load_collected(collected_dir, baseline_stats, exclude=consumed, strict=True)
    except CorpusError as e:
        raise ConfigError(str(e)) from None
    if not episodes:
        raise ConfigError(f"no new episodes in {collected_dir} since iteration {done} "
                          f"({len(consumed)} already trained on): collect another build first")
    advisors = {m.get("advisor") for m in metas}
    if advisors != {advisor}:
        raise ConfigError(f"the episodes in {collected_dir} are from the {sorted(map(str, advisors))} advisor, "
                          f"this run trains {advisor!r}")
    deterministic = sorted({str(m.get("policy")) for m, ep in zip(metas, episodes) if not np.any(ep.logps)})
    if deterministic:
        raise ConfigError(f"episodes collected with the deterministic policy {', '.join(deterministic)} carry "
                          f"log-probability 0 and cannot train PPO; collect with a stochastic one (random or a "
                          f"saved policy)")
    return episodes, rewards, metas


def _check_header(episodes: list, root_dir: str, collected_dir: str) -> dict:
    """The episodes' common channel header, which must be the run's."""
    header_json = episodes[0].header.to_json()
    if any(ep.header.to_json() != header_json for ep in episodes[1:]):
        raise ConfigError(f"the new episodes in {collected_dir} have different channel headers "
                          f"(different compilers or flags in one collection)")
    header_path = os.path.join(root_dir, "header.json")
    if os.path.exists(header_path) and read_header(header_path) != header_json:
        raise ConfigError(f"the new episodes' channel header differs from the one {root_dir} was "
                          f"trained on ({header_path}): a different compiler or flags")
    return header_json


def _vocab_source(root_dir: str, state: dict, warmstart_policy: str | None,
                  vocab_path: str | None) -> tuple[str, str | None]:
    """(root_dir/vocab, where the first invocation copies it from: None to build it)."""
    vocab_dir = os.path.join(root_dir, "vocab")
    source = None
    if state:
        if not os.path.isdir(vocab_dir):
            raise ConfigError(f"{root_dir} has no vocab directory (state.json says iteration "
                              f"{state.get('iteration')} is done)")
        if warmstart_policy or vocab_path:
            log.info("%s continues after iteration %s: warmstart_policy/vocab_path apply to its first "
                     "iteration only", root_dir, state.get("iteration"))
    elif warmstart_policy:  # resolved: an absolute saved policy directory
        source = os.path.join(warmstart_policy, "vocab")  # its weights were trained on it
    elif vocab_path:
        source = os.path.abspath(vocab_path)
    if source is not None and not os.path.isdir(source):
        raise ConfigError(f"no vocab directory {source}")
    return vocab_dir, source


def _start_run_dir(root_dir: str, state: dict, header_json: dict, vocab_dir: str, source: str | None,
                   episodes: list) -> None:
    """The first invocation's header.json and vocab/."""
    make_root(root_dir)
    header_path = os.path.join(root_dir, "header.json")
    if not os.path.exists(header_path):
        atomic_write_json(header_path, header_json)
    if state:
        return
    if source is not None:
        publish_policy(source, vocab_dir)  # any directory, not only a policy
    else:
        build_vocab(episodes, vocab_dir, "the collected episodes have")


def _history_row(update: Update, episodes: list, metas: list[dict], dist: dict[str, float],
                 t_setup: float) -> dict[str, Any]:
    sizes = sum(float(m["text_size"]) for m in metas)
    bases = sum(float(m["baseline_text_size"]) for m in metas)
    return {
        "iteration": update.iteration, "episodes": len(episodes),
        "decisions": int(sum(ep.n for ep in episodes)),
        "reward_mean": dist.get("mean"), "reward_percentiles": {k: v for k, v in dist.items() if k != "mean"},
        "text_size": int(sizes), "baseline_text_size": int(bases),
        "size_change_pct": 100.0 * (sizes - bases) / bases if bases else None,
        "policies": sorted({str(m.get("policy")) for m in metas}),
        "builds": sorted({str(m.get("build")) for m in metas if m.get("build")}),
        "train_s": round(update.train_s, 3), "save_s": round(update.save_s, 3), "setup_s": round(t_setup, 3),
        **numeric_metrics(update),
    }


def _summary_line(row: dict) -> str:
    parts = [f"iteration {row['iteration']}:",
             f"reward mean {row['reward_mean']:+.4f}" if row.get("reward_mean") is not None else "reward n/a",
             f"{row['episodes']} episodes", f"{row['decisions']} decisions"]
    if row.get("size_change_pct") is not None:
        parts.append(f"collected build {row['size_change_pct']:+.3f}% text vs default")
    parts += [f"train {row['train_s']:.1f}s", f"save {row['save_s']:.1f}s"]
    return " ".join(parts)


def bind_common_macros() -> None:
    """Bind the :func:`train_from_collected` parameters the configuration leaves unbound to common.gin's
    macros, and ``advisor`` to ``train.advisor`` (so the operative config records them)."""
    def bound(selector: str) -> bool:
        try:
            gin.query_parameter(selector)
            return True
        except ValueError:
            return False

    with gin.unlock_config():
        for name in MACRO_PARAMS:
            if not bound(f"online.train_from_collected.{name}") and bound(f"%{name}"):
                gin.bind_parameter(f"online.train_from_collected.{name}", gin.query_parameter(f"%{name}"))
        if not bound("online.train_from_collected.advisor") and bound("train.advisor"):
            advisor = gin.query_parameter("train.advisor")
            if isinstance(advisor, str):
                gin.bind_parameter("online.train_from_collected.advisor", advisor)


def _rel_outputs(records: list[dict]) -> dict[str, dict]:
    """Records keyed by output path relative to their build's common root."""
    outs = [r["output"] for r in records if r.get("output")]
    if not outs:
        return {}
    root = os.path.commonpath([os.path.dirname(o) for o in outs])
    return {os.path.relpath(r["output"], root): r for r in records if r.get("output")}


def load_collected(directory: str, baseline_stats: str, delta: float = 0.01, *, exclude=(), strict: bool = False):
    """(episodes, rewards, metas) of ``directory`` but ``exclude``, in file name order, rewarded against the
    same modules' ``text_size`` in ``baseline_stats``, matched by output path, else by the path relative to the
    build's root (the common directory of all outputs, excluded ones too); each meta gains ``file`` and
    ``baseline_text_size``.  Episodes without a size are skipped, and without a baseline size unless ``strict``."""
    base_recs = [r for r in read_records(baseline_stats) if r.get("status") == "ok" and r.get("output")]
    base_abs = {r["output"]: r for r in base_recs}
    base_rel = _rel_outputs(base_recs)
    try:
        names = os.listdir(directory)
    except OSError as e:
        raise CorpusError(f"cannot read the collection directory {directory}: {e.strerror}") from None
    files = sorted(f for f in names if f.endswith(".npz"))
    exclude = set(exclude)
    loaded = {f: load_episode(os.path.join(directory, f)) for f in files if f not in exclude}
    all_metas = [loaded[f][1] if f in loaded else read_meta(os.path.join(directory, f)) for f in files]
    rel_of = {m["output"]: key for key, m in _rel_outputs(all_metas).items()}
    episodes, rewards, metas, missing = [], [], [], []
    for f, (ep, meta) in loaded.items():
        if meta.get("text_size") is None:
            continue
        b = base_abs.get(meta.get("output")) or base_rel.get(rel_of.get(meta.get("output"), ""))
        if b is None or b.get("text_size") is None:
            missing.append(meta.get("output") or f)
            continue
        episodes.append(ep)
        rewards.append(reward(float(meta["text_size"]), float(b["text_size"]), delta))
        metas.append(dict(meta, file=f, baseline_text_size=b["text_size"]))
    if strict and missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise CorpusError(f"{len(missing)} collected episode(s) have no default-policy size in {baseline_stats}: "
                          f"{shown} (build the same tree with --policy default --stats {baseline_stats})")
    return episodes, rewards, metas
