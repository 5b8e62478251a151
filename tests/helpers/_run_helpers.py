"""Helpers of the tests that run `mlgo-host train` as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess


def run_env(tmp) -> dict:
    """The environment of a training subprocess: its own TMPDIR (to look for leftovers), quiet TF."""
    os.makedirs(tmp, exist_ok=True)
    return {**os.environ, "TMPDIR": str(tmp), "TF_CPP_MIN_LOG_LEVEL": "2"}


def read_state(root) -> dict:
    with open(os.path.join(root, "state.json")) as f:
        return json.load(f)


def finished_run(cmd: list[str], base, timeout: float):
    """Run a training command to completion under ``base`` (root ``base/root``,
    TMPDIR ``base/tmp``); returns (root, the completed process)."""
    root = base / "root"
    p = subprocess.run(cmd(root), capture_output=True, text=True, timeout=timeout, env=run_env(base / "tmp"))
    assert p.returncode == 0, p.stderr[-3000:]
    return root, p
