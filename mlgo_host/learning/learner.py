"""The learner: one training run's tf-agents PPO agent, saved policies and TF checkpoints (one per iteration)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any

import gin
import numpy as np
import tensorflow as tf
from tf_agents.utils import common as tfa_common

from mlgo_host.channel.codec import Header
from mlgo_host.channel.problems import get_problem
from mlgo_host.errors import ConfigError
from mlgo_host.learning.export import save_policy
from mlgo_host.learning.networks import tf_logits
from mlgo_host.learning.ppo import create_ppo_agent
from mlgo_host.learning.preprocessing import GinNormConfig
from mlgo_host.learning.trajectories import episodes_to_steps, episodes_to_trajectories
from mlgo_host.learning.weights import import_actor_weights
from mlgo_host.measure.sizes import compiler_version
from mlgo_host.policies.saved import read_saved_policy, set_gate
from mlgo_host.policies.specs import SAME_NAMES, InputBinding, PolicySpec
from mlgo_host.policies.vocab import Vocab
from mlgo_host.workers.worker import policy_blob_from_dir


@gin.configurable(module="learner")
class Learner:
    def __init__(
        self,
        header_json: dict,
        advisor: str,
        vocab_dir: str,
        root_dir: str,
        seed: int = 0,
        *,
        clang: str = "clang-19",
        sequence_length: int = 16,
        batch_size: int = 256,
        use_tf_function: bool = True,
        keep_checkpoints: int = 3,
        keep_default: bool = False,
        gate: float | None = None,
        deterministic: bool = True,
        start_spec: PolicySpec | None = None,
    ):
        if deterministic:
            # a resumed run retraces an uninterrupted one (cheap for networks this small)
            tf.config.experimental.enable_op_determinism()
        tf.random.set_seed(seed)
        self.root_dir = root_dir
        self.seed = seed
        self.clang = clang
        self.sequence_length = sequence_length
        self.batch_size = batch_size
        self.header = Header.from_json(header_json)
        self.vocab = Vocab.load(vocab_dir)
        slot = get_problem(advisor).default_slot(clang)
        # keep_default: the default decision is an input (an imitation warm start reads it)
        self.spec = PolicySpec.from_header(self.header, advisor, vocab_names=self.vocab.names(), default_slot=slot,
                                           keep_default=keep_default)
        self.binding = SAME_NAMES
        if start_spec is not None and start_spec.meaning_changes(slot):
            self.spec, self.binding = _bound_start(start_spec, slot, self.header)
        self.gate = gate
        self.norm = GinNormConfig()
        self.agent = create_ppo_agent(self.spec, self.vocab, self.norm)
        self.actor = self.agent.actor_net
        self._train = self.agent.train
        if use_tf_function:  # traced once per batch shape
            self._train = tfa_common.function(self.agent.train, autograph=False)
        self.ckpt = tf.train.Checkpoint(agent=self.agent)
        self.ckpt_dir = os.path.join(root_dir, "checkpoints")
        self.manager = tf.train.CheckpointManager(self.ckpt, self.ckpt_dir, max_to_keep=keep_checkpoints,
                                                  checkpoint_name="ckpt")

    def warmstart(self, policy_dir: str) -> None:
        """Start from a saved policy with this run's inputs and normalization."""
        sp = read_saved_policy(policy_dir)
        if list(sp.spec.input_names) != list(self.spec.input_names):
            raise ConfigError(f"warm-start policy {policy_dir!r} reads features {list(sp.spec.input_names)}, "
                              f"this run's actor {list(self.spec.input_names)}")
        if sp.actor.norm.to_json() != self.norm.to_json():
            raise ConfigError(f"warm-start policy {policy_dir!r} normalizes features as {sp.actor.norm.to_json()}, "
                              f"this run as {self.norm.to_json()} (keep NormConfig equal in both configs)")
        import_actor_weights(self.actor, sp.actor.weights())

    def policy_blob(self) -> dict:
        """The current actor as a TF-free saved-policy blob for workers."""
        with tempfile.TemporaryDirectory(prefix="mlgo-blob-", dir=self.root_dir) as d:
            p = os.path.join(d, "policy")
            self.save_policy(p, step=int(self.agent.train_step_counter.numpy()), saved_model=False)
            return policy_blob_from_dir(p)

    def save_policy(self, path: str, step: int, saved_model: bool = True) -> None:
        save_policy(path, self.actor, self.spec, self.vocab, self.norm,
                    compiler=compiler_version(self.clang).splitlines()[0], training_step=step,
                    saved_model=saved_model)
        if self.gate is not None:
            set_gate(path, self.gate, inherited_from="warm start")

    def checkpoint(self, iteration: int) -> None:
        self.manager.save(checkpoint_number=iteration)

    def restore(self, iteration: int) -> None:
        path = os.path.join(self.ckpt_dir, f"ckpt-{iteration}")
        if not tf.io.gfile.exists(path + ".index"):
            raise ConfigError(f"no checkpoint for iteration {iteration} in {self.ckpt_dir} (state.json says it was done)")
        try:
            self.ckpt.restore(path).assert_existing_objects_matched()
        except (tf.errors.OpError, IndexError, AssertionError, ValueError) as e:
            # a damaged .index (OpError) or cut .data file (IndexError, from TF's reader), or another network's
            # (AssertionError): the run cannot go on from it
            what = (getattr(e, "message", None) or str(e)).strip().splitlines()
            raise ConfigError(f"checkpoint {path} (iteration {iteration}) cannot be restored: "
                              f"{what[0][:300] if what else type(e).__name__}") from None

    def train(self, episodes: list, rewards: list[float], iteration: int) -> dict[str, Any]:
        """One PPO update; returns loss metrics, entropy and the approximate KL to the collecting policy (the
        shuffle seeded by (seed, iteration): a resumed run trains on the same batches)."""
        trajs = episodes_to_trajectories(
            self.spec, episodes, rewards, sequence_length=self.sequence_length, batch_size=self.batch_size,
            seed=self.seed * 1_000_003 + iteration, binding=self.binding)
        metrics: dict[str, list[float]] = {}
        for t in trajs:
            info = self._train(experience=t)
            metrics.setdefault("total_loss", []).append(float(info.loss))
            for k, v in info.extra._asdict().items():
                with contextlib.suppress(TypeError, ValueError):
                    metrics.setdefault(k, []).append(float(np.mean(np.asarray(v))))
        out = {k: float(np.mean(v)) for k, v in metrics.items() if v}
        out.update(self._entropy_and_kl(episodes))
        out["batches"] = len(trajs)
        return out

    def _entropy_and_kl(self, episodes: list, max_steps: int = 20000) -> dict[str, float]:
        steps = episodes_to_steps(self.spec, episodes, [0.0] * len(episodes), self.binding)
        n = min(steps.n, max_steps)
        obs = {k: v[:n] for k, v in steps.observation.items()}
        logits = tf_logits(self.actor, self.spec, obs).astype(np.float64)
        logits = np.where(np.isfinite(logits), logits, -1e30)
        logits -= logits.max(axis=1, keepdims=True)
        logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        p = np.exp(logp)
        entropy = float(-(p * np.where(p > 0, logp, 0.0)).sum(axis=1).mean())
        new_lp = logp[np.arange(n), steps.action[:n]]
        old_lp = np.concatenate([np.asarray(ep.logps, np.float64) for ep in episodes if ep.n])[:n]
        return {"entropy": entropy, "kl": float(np.mean(old_lp - new_lp))}


def _bound_start(start: PolicySpec, compiler_slot: str, header: Header) -> tuple[PolicySpec, InputBinding]:
    """A warm start made on another kind of compiler keeps its inputs, each read from the feature of this
    compiler that carries its meaning; one this compiler cannot supply is an error."""
    binding = start.bind_inputs(compiler_slot)
    if binding.lost:
        name, was, now = binding.lost[0]
        raise ConfigError(f"warm-start policy input {name!r} meant '{was}'; this compiler sends that in no feature "
                          f"({name!r} carries '{now}' here): train it with the kind of compiler it was made with")
    start.check_header(header, binding)
    return start, binding
