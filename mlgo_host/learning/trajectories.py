"""Episodes -> the trajectories ``agent.train`` takes, cut into fixed-length sequences and batched
(ml-compiler-opt's ``create_sequence_example_dataset_fn`` without tf.data)."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory

from mlgo_host.errors import ConfigError
from mlgo_host.learning.tensor_specs import numpy_observations
from mlgo_host.policies.specs import SAME_NAMES, InputBinding, PolicySpec


def old_logits(spec: PolicySpec, actions: np.ndarray, logps: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """The collecting policy's logits rebuilt from the log-probability of the action taken (all episodes
    keep): exact for 2 actions; for a masked choice the rest is spread evenly over the other legal columns
    (the importance ratio stays exact, the KL is approximate)."""
    n = actions.shape[0]
    lp = np.minimum(np.asarray(logps, np.float64), np.log1p(-1e-6))
    rest = np.log(-np.expm1(lp))  # log(1 - p)
    A = spec.num_actions
    floor = np.finfo(np.float32).min
    legal = (mask.reshape(n, A) != 0) if mask is not None else np.ones((n, A), bool)
    legal[np.arange(n), actions] = True
    k = legal.sum(axis=1)
    others = np.where(k > 1, rest - np.log(np.maximum(k - 1, 1)), floor)
    out = np.where(legal, others[:, None], floor)
    out[np.arange(n), actions] = lp
    return out.astype(np.float32)


@dataclasses.dataclass
class StepArrays:
    observation: dict[str, np.ndarray]
    action: np.ndarray
    logits: np.ndarray
    reward: np.ndarray
    step_type: np.ndarray
    next_step_type: np.ndarray

    @property
    def n(self) -> int:
        return int(self.action.shape[0])


def episodes_to_steps(spec: PolicySpec, episodes: Iterable[Any], rewards: Iterable[Any],
                      binding: InputBinding = SAME_NAMES) -> StepArrays:
    """Episodes concatenated step by step.  ``rewards``: per episode, a scalar for every decision
    (ml-compiler-opt's convention) or one per decision.  Step types as ``trajectory.from_episode``."""
    obs_parts: dict[str, list[np.ndarray]] = {f.name: [] for f in spec.features}
    acts, logits, rews, st, nst = [], [], [], [], []
    for ep, r in zip(episodes, rewards, strict=True):
        n = ep.n
        if n == 0:
            continue
        o = numpy_observations(spec, ep.features(), n, binding)
        for k, v in o.items():
            obs_parts[k].append(v)
        a = np.asarray(ep.actions).reshape(n).astype(np.int64)
        if a.min() < 0 or a.max() >= spec.num_actions:
            raise ConfigError(f"episode actions outside [0, {spec.num_actions})")
        acts.append(a)
        m = o[spec.mask.name] if spec.mask is not None else None
        logits.append(old_logits(spec, a, np.asarray(ep.logps).reshape(n), m))
        rr = np.asarray(r, np.float32)
        rews.append(np.full(n, rr, np.float32) if rr.ndim == 0 else rr.reshape(n))
        st.append(np.full(n, ts.StepType.MID, np.int32))
        st[-1][0] = ts.StepType.FIRST
        nst.append(np.full(n, ts.StepType.MID, np.int32))
        nst[-1][-1] = ts.StepType.LAST
    if not acts:
        raise ConfigError("no decisions in the episodes")
    return StepArrays({k: np.concatenate(v) for k, v in obs_parts.items()}, np.concatenate(acts),
                      np.concatenate(logits), np.concatenate(rews), np.concatenate(st), np.concatenate(nst))


def episodes_to_trajectories(
    spec: PolicySpec,
    episodes: Iterable[Any],
    rewards: Iterable[Any],
    *,
    sequence_length: int = 16,
    batch_size: int | None = 256,
    seed: int = 0,
    shuffle: bool = True,
    binding: InputBinding = SAME_NAMES,
) -> list[trajectory.Trajectory]:
    """Batches ``[B, T, ...]``: all decisions in order, cut into windows of ``sequence_length``, shuffled
    (seeded) and grouped ``batch_size`` at a time (``None``: one batch); remainders are dropped."""
    if sequence_length < 2:
        raise ConfigError("sequence_length must be at least 2 (PPO needs a next step)")
    steps = episodes_to_steps(spec, episodes, rewards, binding)
    T = sequence_length
    nw = steps.n // T
    if nw == 0:
        raise ConfigError(f"{steps.n} decisions: fewer than one sequence of {T}")
    order = np.arange(nw)
    if shuffle:
        np.random.default_rng(seed).shuffle(order)
    B = nw if batch_size is None else min(int(batch_size), nw)
    out = []
    for start in range(0, nw - B + 1, B):
        idx = (order[start : start + B, None] * T + np.arange(T)[None, :])  # [B, T]
        take = lambda a: tf.constant(a[idx])  # noqa: E731
        out.append(trajectory.Trajectory(
            step_type=take(steps.step_type),
            observation={k: take(v) for k, v in steps.observation.items()},
            action=take(steps.action),
            policy_info={"dist_params": {"logits": take(steps.logits)}},
            next_step_type=take(steps.next_step_type),
            reward=take(steps.reward),
            discount=tf.ones(idx.shape, tf.float32),
        ))
    return out
