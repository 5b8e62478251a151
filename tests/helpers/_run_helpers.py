"""Helpers of the tests that run `mlgo-host train` as a subprocess."""

from __future__ import annotations

import json
import os


def run_env(tmp) -> dict:
    """The environment of a training subprocess: its own TMPDIR (to look for leftovers), quiet TF."""
    os.makedirs(tmp, exist_ok=True)
    return {**os.environ, "TMPDIR": str(tmp), "TF_CPP_MIN_LOG_LEVEL": "2"}


def read_state(root) -> dict:
    with open(os.path.join(root, "state.json")) as f:
        return json.load(f)
