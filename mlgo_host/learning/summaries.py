"""TensorBoard summaries of training, under ``root_dir`` (the learner only).

Tags follow ml-compiler-opt where it has them: ``reward_distribution/p10`` …
``p90`` and ``reward_distribution/mean`` (module rewards against the default
heuristic), plus ``heldout/size_change_pct``, ``loss/*`` (policy gradient
loss, entropy, KL, ...), ``perf/*`` (modules per minute, decisions per second,
collection and training seconds) and ``failures/modules``.
"""

from __future__ import annotations

import os
from typing import Any

import tensorflow as tf

LOSS_KEYS = ("policy_gradient_loss", "value_estimation_loss", "entropy", "kl", "total_loss",
             "entropy_regularization_loss", "l2_regularization_loss", "kl_penalty_loss")
PERF_KEYS = ("modules_per_minute", "decisions_per_second", "collect_s", "train_s", "save_s")


class Summaries:
    def __init__(self, root_dir: str):
        self.writer = tf.summary.create_file_writer(os.path.join(root_dir, "train"))

    def write_iteration(self, step: int, reward_dist: dict[str, float], row: dict[str, Any],
                        eval_row: dict[str, Any] | None) -> None:
        with self.writer.as_default(step=step):
            for k, v in reward_dist.items():
                tf.summary.scalar(f"reward_distribution/{k}", v)
            for k in LOSS_KEYS:
                if k in row and row[k] is not None:
                    tf.summary.scalar(f"loss/{k}", row[k])
            for k in PERF_KEYS:
                if k in row:
                    tf.summary.scalar(f"perf/{k}", row[k])
            tf.summary.scalar("failures/modules", row.get("failures", 0))
            if eval_row is not None:
                tf.summary.scalar("heldout/size_change_pct", eval_row["size_change_pct"])
                tf.summary.scalar("heldout/modules_bigger", eval_row["bigger"])
                tf.summary.scalar("heldout/modules_smaller", eval_row["smaller"])
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
