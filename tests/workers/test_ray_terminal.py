"""What `mlgo-host tune --backend ray` shows on the terminal: one line saying
a local Ray instance started (and where Ray's own messages went), none of
Ray's warnings or log lines; they are in that file.  A real tune of a small
project with clang-19 on a fresh Ray instance of its own."""

from __future__ import annotations

import os
import re
import shutil

import pytest

pytest.importorskip("ray")

from _tune_helpers import build_project_corpus, mlgo_host, read_manifest  # noqa: E402
from mlgo_host.workers.ray_pool import RAY_DRIVER_LOG  # noqa: E402

pytestmark = [pytest.mark.ray,
              pytest.mark.skipif(shutil.which("clang-19") is None, reason="clang-19 not installed")]


def test_tune_on_ray_prints_one_line_of_its_own_and_logs_rays(tmp_path):
    corpus = build_project_corpus(tmp_path)
    t = tmp_path / "T"
    r = mlgo_host("tune", "--corpus", str(corpus), "--output", str(t), "--backend", "ray", "--jobs", "2",
                  "--compiles-per-module", "3", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "3 modules tuned" in r.stdout and len(read_manifest(t)["modules"]) == 3
    lines = r.stderr.splitlines()
    assert "Warning" not in r.stderr and len(lines) == 1, r.stderr  # no FutureWarning, no Ray INFO line
    m = re.fullmatch(r"ray: started a local Ray instance \((\d+) CPUs\); Ray's own messages: (\S+)", lines[0])
    assert m, lines[0]
    assert int(m.group(1)) >= 1
    log = m.group(2)
    assert os.path.basename(log) == RAY_DRIVER_LOG and os.path.isfile(log)
    with open(log) as f:
        text = f.read()
    assert "Started a local Ray instance" in text  # Ray's own log line, kept there
