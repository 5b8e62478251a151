"""Per-function object sizes (mlgo_host.measure.objsizes) under single inlining flips.

For each of --modules modules of the corpus (seeded sample, bitcode at most
--max-bc-kb): compile with the default policy (recording its actions and the
compiler's inline remarks, one per channel decision, naming caller and
callee), then --flips single flips (one decision forced to the other action
by a replay, the default elsewhere), and compare the two objects'
object_sizes:

* how often ``other`` moves under a flip, by how many bytes, and which
  sections (``other_sections``) move it;
* how often a function outside the flip's footprint changes: the footprint is
  the caller and callee, plus (``extended``) every function the caller was
  later inlined into in the default compile (the flip changes the body that
  was copied there), plus (``cascade``) the callers of every later decision
  that the flip changed (the flipped compile's remarks differ from the
  default's from that decision on: e.g. a callee left with one call site is
  then inlined there too); a change outside all of these would be a leak of
  the attribution;
* object_sizes' time per object against text_size's llvm-size subprocess,
  on the sampled modules and on --timing modules (default: the benchmark
  corpus's biggest objects: C++ with ~400 functions and ~1200 sections, C
  with ~180 functions, 6.5 MB of tables).

Writes bench/results/objsizes.json.

usage: .venv/bin/python bench/objsizes.py --corpus DIR [--modules 20] [--flips 10] [--max-bc-kb 300]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter

from mlgo_host.channel.session import run_session
from mlgo_host.corpus.corpus import load_corpus
from mlgo_host.episode import EpisodeRecorder
from mlgo_host.fsutil import atomic_write_json
from mlgo_host.measure.objsizes import object_sizes
from mlgo_host.measure.sizes import text_size
from mlgo_host.policies import load_policy
from mlgo_host.policies.replay import Replay, replay_policy

HERE = os.path.dirname(os.path.abspath(__file__))
TIMING = ("fasttext-0.9.3/src/fasttext", "fasttext-0.9.3/src/args", "pyzstd-0.16.2/zstd/lib/compress/zstd_compress",
          "ujson-5.10.0/deps/double-conversion/test/cctest/gay-precision")
# The ML advisor's remark names, one per channel decision (see shared protocol notes).
DECISION_REMARKS = ("IniningNotAttempted", "InliningSuccess", "InliningSuccessWithCalleeDeleted")


def remarks(path: str) -> list[tuple[str, str, str]]:
    """(name, caller, callee) of each channel decision's remark, in order."""
    out = []
    for doc in open(path).read().split("\n--- "):
        name = re.search(r"^Name:\s+(\S+)", doc, re.M)
        if name and name.group(1) in DECISION_REMARKS:
            caller = re.search(r"^Function:\s+(\S+)", doc, re.M).group(1)
            callee = re.search(r"^  - Callee:\s+(\S+)", doc, re.M).group(1)
            out.append((name.group(1), caller.strip("'\""), callee.strip("'\"")))
    return out


def compile_to(module, policy, work: str, tag: str, record: bool = False):
    """Compile ``module`` with ``policy`` into work/tag.o (+ tag.yaml remarks)."""
    out, yaml = os.path.join(work, tag + ".o"), os.path.join(work, tag + ".yaml")
    cmd = module.compile_command("clang-19", out) + ["-opt-record-file", yaml, "-opt-record-passes", "inline"]
    res = run_session(cmd, "inline", policy, recorder=EpisodeRecorder() if record else None, tmpdir=work)
    if res.returncode != 0 or not os.path.exists(out):
        return None
    return out, yaml, res


def footprint(decisions: list[tuple[str, str, str]], i: int) -> tuple[set[str], set[str]]:
    """Caller and callee of decision i; and with every function that the caller
    was inlined into later (transitively) in that compile."""
    _, caller, callee = decisions[i]
    direct = {caller, callee}
    hosts, extended = {caller}, set(direct)
    for name, c, e in decisions[i + 1:]:
        if name != "IniningNotAttempted" and e in hosts:
            hosts.add(c)
            extended.add(c)
    return direct, extended


def cascade(base: list[tuple[str, str, str]], flipped: list[tuple[str, str, str]], i: int) -> set[str]:
    """Callers of the decisions after ``i`` that differ between the two compiles."""
    out = set()
    for k in range(i + 1, max(len(base), len(flipped))):
        a = base[k] if k < len(base) else None
        b = flipped[k] if k < len(flipped) else None
        if a != b:
            out.update(d[1] for d in (a, b) if d is not None)
    return out


def changed_functions(a, b) -> dict[str, tuple[int, int]]:
    keys = set(a.functions) | set(b.functions)
    return {k: (a.functions.get(k, 0), b.functions.get(k, 0)) for k in keys
            if a.functions.get(k, 0) != b.functions.get(k, 0)}


def time_per_object(path: str, repeat: int = 5) -> tuple[float, float]:
    """Best-of-``repeat`` milliseconds of object_sizes and of text_size."""
    best = []
    for f in (object_sizes, text_size):
        ts = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            f(path)
            ts.append(time.perf_counter() - t0)
        best.append(1e3 * min(ts))
    return best[0], best[1]


def bench_module(module, flips: int, rng: random.Random, work: str) -> dict:
    base = compile_to(module, load_policy("default"), work, "base", record=True)
    if base is None:
        return {"module": module.name, "status": "default compile failed"}
    obj, yaml, res = base
    actions = [int(a) for a in res.episode.actions]
    decisions = remarks(yaml)
    if len(decisions) != len(actions):
        return {"module": module.name, "status": f"{len(decisions)} remarks for {len(actions)} decisions"}
    s0 = object_sizes(obj)
    assert s0.text == text_size(obj), module.name
    ms, ts = time_per_object(obj)
    row = {"module": module.name, "status": "ok", "obj_bytes": os.path.getsize(obj), "text": s0.text,
           "functions": len(s0.functions), "other": s0.other, "other_sections": s0.other_sections,
           "objsizes_ms": round(ms, 3), "llvm_size_ms": round(ts, 3), "flips": []}
    for i in sorted(rng.sample(range(len(actions)), min(flips, len(actions)))):
        pol = replay_policy(Replay(forced={i: 1 - actions[i]}))
        got = compile_to(module, pol, work, f"flip{i}")
        if got is None:
            row["flips"].append({"decision": i, "status": "compile failed"})
            continue
        s1 = object_sizes(got[0])
        assert s1.text == text_size(got[0]) and sum(s1.functions.values()) + s1.other == s1.text
        direct, extended = footprint(decisions, i)
        later = cascade(decisions, remarks(got[1]), i)
        changed = changed_functions(s0, s1)
        moved = {k: s1.other_sections.get(k, 0) - s0.other_sections.get(k, 0)
                 for k in set(s0.other_sections) | set(s1.other_sections)}
        row["flips"].append({
            "decision": i, "status": "ok", "to": 1 - actions[i], "remark": decisions[i][0],
            "caller": decisions[i][1], "callee": decisions[i][2], "stale": pol.stale,
            "text_delta": s1.text - s0.text, "other_delta": s1.other - s0.other,
            "other_sections_delta": {k: v for k, v in moved.items() if v},
            "changed": {k: list(v) for k, v in changed.items()},
            "outside_direct": sorted(set(changed) - direct), "outside_extended": sorted(set(changed) - extended),
            "outside_cascade": sorted(set(changed) - extended - later)})
    return row


def summarize(rows: list[dict]) -> dict:
    flips = [f for r in rows if r["status"] == "ok" for f in r["flips"] if f["status"] == "ok"]
    effective = [f for f in flips if f["changed"] or f["text_delta"] or f["other_delta"]]
    moved = [f for f in effective if f["other_delta"]]
    # the last FDE's 8-byte padding follows the parity of all FDEs: +-4 in .eh_frame
    beyond = [f for f in moved if any(k != ".eh_frame" or abs(v) != 4 for k, v in f["other_sections_delta"].items())]
    sections = Counter()
    for f in moved:
        for k, v in f["other_sections_delta"].items():
            sections[re.sub(r"\._Z.*", "._Z*", k)] += abs(v)
    ok = [r for r in rows if r["status"] == "ok"]
    return {
        "modules": len(ok), "flips": len(flips), "flips_changing_the_object": len(effective),
        "other_moved": len(moved), "other_moved_fraction": round(len(moved) / max(1, len(effective)), 3),
        "other_moved_abs_bytes": sorted(abs(f["other_delta"]) for f in moved),
        "other_moved_beyond_eh_frame_parity": len(beyond),
        "other_moved_beyond_eh_frame_parity_fraction": round(len(beyond) / max(1, len(effective)), 3),
        "other_moved_by_section_abs_bytes": dict(sections.most_common()),
        "outside_caller_callee": sum(bool(f["outside_direct"]) for f in effective),
        "outside_extended_footprint": sum(bool(f["outside_extended"]) for f in effective),
        "outside_footprint_and_cascade": sum(bool(f["outside_cascade"]) for f in effective),
        "text_delta_abs_bytes_median": statistics.median([abs(f["text_delta"]) for f in effective] or [0]),
        "objsizes_ms_median": statistics.median([r["objsizes_ms"] for r in ok] or [0]),
        "objsizes_ms_max": max([r["objsizes_ms"] for r in ok] or [0]),
        "llvm_size_ms_median": statistics.median([r["llvm_size_ms"] for r in ok] or [0]),
        "obj_bytes_max": max([r["obj_bytes"] for r in ok] or [0]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--modules", type=int, default=20)
    ap.add_argument("--flips", type=int, default=10)
    ap.add_argument("--max-bc-kb", type=float, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", default=os.path.join(HERE, "results", "objsizes.json"))
    ap.add_argument("--timing", nargs="*", default=list(TIMING), metavar="MODULE",
                    help="also time object_sizes on these modules' default objects (absent ones are skipped)")
    ap.add_argument("--keep", metavar="DIR", help="keep each module's objects and remarks in DIR/<n>/")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    mods = [m for m in load_corpus(args.corpus) if m.size <= args.max_bc_kb * 1024]
    rows = []
    for n, m in enumerate(rng.sample(mods, min(args.modules, len(mods)))):
        work = os.path.join(args.keep, str(n)) if args.keep else tempfile.mkdtemp(prefix="objsizes-")
        os.makedirs(work, exist_ok=True)
        try:
            rows.append(bench_module(m, args.flips, rng, work))
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
        r = rows[-1]
        print(m.name, r["status"], *([f"{len(r['flips'])} flips, other moved in "
                                      f"{sum(bool(f.get('other_delta')) for f in r['flips'])}"]
                                     if r["status"] == "ok" else []), file=sys.stderr)
    timing = []
    for m in [m for m in load_corpus(args.corpus) if m.name in args.timing]:
        with tempfile.TemporaryDirectory(prefix="objsizes-") as work:
            got = compile_to(m, load_policy("default"), work, "base")
            if got is not None:
                ms, ts = time_per_object(got[0])
                timing.append({"module": m.name, "obj_bytes": os.path.getsize(got[0]), "objsizes_ms": round(ms, 3),
                               "llvm_size_ms": round(ts, 3)})
    result = {"summary": summarize(rows), "timing": timing,
              "args": {k: v for k, v in vars(args).items() if k not in ("corpus", "output", "keep")},
              "modules": rows}
    atomic_write_json(args.output, result)
    print(json.dumps({**result["summary"], "other_moved_abs_bytes": str(result["summary"]["other_moved_abs_bytes"]),
                      "timing": timing}, indent=1))


if __name__ == "__main__":
    main()
