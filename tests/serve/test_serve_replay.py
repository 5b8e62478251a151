"""A replay file served to `mlgo-clang`: the stats line says what the replay
did (forced, applied, stale); a stale one leaves the base's object."""

from __future__ import annotations

import json

from _serve_util import ServerProc, c_source, mlgo_clang, needs_clang, plain_object, read_stats, wait_for
from mlgo_host.policies.replay import FORMAT


@needs_clang
def test_served_replay_reports_applied_and_stale(tmp_path):
    for k in (1, 2):
        (tmp_path / f"s{k}.c").write_text(c_source(k))
    replay = tmp_path / "r.json"
    # a fingerprint no stream has: decision 3 is never forced, the base (default) answers everything
    replay.write_text(json.dumps({"format": FORMAT, "base": "default", "forced": {"3": 1, "5": 0},
                                  "fingerprint": {"hash": "blake2b-64", "at": {"3": "00" * 8}}}))
    ch, stats = str(tmp_path / "ch"), str(tmp_path / "stats.jsonl")
    with ServerProc(ch, slots=1, policy=str(replay), stats=stats):
        r = mlgo_clang(["-Oz", "-c", str(tmp_path / "s1.c"), "-o", str(tmp_path / "s1.o")], ch)
        assert r.returncode == 0, r.stderr
        rec = wait_for(lambda: (read_stats(stats) or [None])[0], 30, "a stats line")
    assert rec["status"] == "ok"
    assert rec["replay"]["stale"] and rec["replay"]["applied"] == 0 and rec["replay"]["forced"] == 2
    assert "decision 3" in rec["replay"]["stale_reason"]
    assert (tmp_path / "s1.o").read_bytes() == plain_object(str(tmp_path / "s1.c"), str(tmp_path / "p1.o"))
