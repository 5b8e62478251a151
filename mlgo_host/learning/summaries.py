"""TensorBoard summaries under ``root_dir/train``; PPO's tags as ml-compiler-opt's (``reward_distribution/p10``)."""

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

    def scalars(self, step: int, values: dict[str, Any]) -> None:
        """Each of ``values`` (tag -> value) that is not None, at ``step``."""
        with self.writer.as_default(step=step):
            for tag, v in values.items():
                if v is not None:
                    tf.summary.scalar(tag, v)
        self.writer.flush()

    def write_iteration(self, step: int, reward_dist: dict[str, float], row: dict[str, Any],
                        eval_row: dict[str, Any] | None) -> None:
        values = {f"reward_distribution/{k}": v for k, v in reward_dist.items()}
        values.update({f"loss/{k}": row.get(k) for k in LOSS_KEYS})
        values.update({f"perf/{k}": row[k] for k in PERF_KEYS if k in row})
        values["failures/modules"] = row.get("failures", 0)
        if "validation_size_change_pct" in row:  # what chooses saved_policy
            values.update({"validation/size_change_pct": row["validation_size_change_pct"],
                           "validation/worst_module_pct": row["validation_worst_pct"],
                           "validation/modules_bigger": row["validation_bigger"]})
        if eval_row is not None:
            values.update({"heldout/size_change_pct": eval_row["size_change_pct"],
                           "heldout/modules_bigger": eval_row["bigger"],
                           "heldout/modules_smaller": eval_row["smaller"]})
        self.scalars(step, values)

    def close(self) -> None:
        self.writer.close()
