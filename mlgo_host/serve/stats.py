"""The per-compile JSON lines of ``serve --stats FILE`` (written by :mod:`mlgo_host.serve.server`:
``Slot._hand_record``, ``Server.flags_record``) and their aggregation per build: the ``MLGO_BUILD``
label, else the server run; within a build the last record of each output counts (a rebuild).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any, Iterable

from mlgo_host.collected import STATUSES
from mlgo_host.corpus.identity import common_dir


def aggregate(records: Iterable[dict]) -> list[dict[str, Any]]:
    """One summary per build, in order of first appearance."""
    builds: dict[str, list[dict]] = {}
    for r in records:
        builds.setdefault(r.get("build") or f"server {r.get('server', '?')}", []).append(r)
    out = []
    for key, recs in builds.items():
        modules: dict[str, dict] = {}
        for r in recs:
            modules[r.get("output") or f"<no output #{len(modules)}>"] = r
        root = common_dir(list(modules))
        counts = dict.fromkeys(STATUSES, 0)
        counts.update(Counter(r["status"] for r in modules.values()))
        sized = [r for r in modules.values() if r.get("text_size") is not None]
        decisions: Counter[str] = Counter()
        for r in modules.values():
            decisions.update({a: int(n) for a, n in (r.get("decisions") or {}).items()})
        rows = []
        for out_path, r in sorted(modules.items()):
            d = r.get("decisions") or {}
            tot = sum(int(v) for v in d.values())
            rows.append({
                "module": os.path.relpath(out_path, root) if root and os.path.isabs(out_path) else out_path,
                "output": out_path, "text_size": r.get("text_size"), "observations": r.get("observations", 0),
                "inline_rate": (int(d.get("1", 0)) / tot) if tot and set(d) <= {"0", "1"} else None,
                "duration_s": r.get("duration_s"), "status": r["status"], "error": r.get("error"),
            })
        out.append({
            "build": key, "root": root, "compiles": len(recs), "modules": len(modules), "status": counts,
            "text_size": sum(int(r["text_size"]) for r in sized), "sized_modules": len(sized),
            "observations": sum(int(r.get("observations") or 0) for r in modules.values()),
            "decisions": dict(sorted(decisions.items())),
            "compile_s": round(sum(float(r.get("duration_s") or 0) for r in modules.values()), 3),
            "policies": sorted({str(r.get("policy")) for r in recs}),
            "rows": rows,
        })
        for name, totals in (("guard", guard_totals), ("tuned", tuned_totals)):
            if (summary := totals(modules.values())) is not None:
                out[-1][name] = summary
    return out


def tuned_totals(records: Iterable[dict]) -> dict[str, Any] | None:
    """Compiles per tuned outcome and the bytes the tuned ones saved against -Oz (None without --replay)."""
    t = [r for r in records if r.get("tuned")]
    if not t:
        return None
    counts = {k: sum(1 for r in t if r["tuned"] == k) for k in ("tuned", "stale", "default")}
    saved = sum(int(r["tuned_default_text"]) - int(r["text_size"]) for r in t
                if r["tuned"] == "tuned" and r.get("tuned_default_text") is not None and r.get("text_size") is not None)
    return dict(counts, saved_bytes=saved)


def guard_totals(records: Iterable[dict]) -> dict[str, Any] | None:
    """Objects the guard kept per side, bytes saved, seconds of plain compiles (None: nothing guarded)."""
    g = [r for r in records if r.get("guard")]
    if not g:
        return None
    kept = {k: sum(1 for r in g if r["guard"] == k) for k in ("policy", "default", "skipped")}
    saved = sum(int(r["guard_policy_text"]) - int(r["guard_default_text"]) for r in g
                if r["guard"] == "default" and r.get("guard_policy_text") is not None
                and r.get("guard_default_text") is not None)
    return {"kept": kept, "saved_bytes": saved, "guard_s": round(sum(float(r.get("guard_s") or 0) for r in g), 3)}


def compare(build: dict, baseline: dict) -> dict[str, Any]:
    """Per-module text size against a baseline build (matched by the output path relative to each
    build's root); totals over modules sized in both."""
    base = {r["module"]: r for r in baseline["rows"]}
    tot_p = tot_b = matched = 0
    for row in build["rows"]:
        b = base.get(row["module"])
        row["baseline_text_size"] = b["text_size"] if b else None
        row["size_change"] = None
        if b and b["text_size"] is not None and row["text_size"] is not None:
            matched += 1
            tot_p += row["text_size"]
            tot_b += b["text_size"]
            row["size_change"] = row["text_size"] / b["text_size"] - 1 if b["text_size"] else None
    return {"baseline": baseline["build"], "matched": matched, "text_size": tot_p, "baseline_text_size": tot_b,
            "size_change": (tot_p / tot_b - 1) if tot_b else None}


def format_build(b: dict, top: int | None = None) -> str:
    st = ", ".join(f"{k} {v}" for k, v in b["status"].items() if v)
    dec = b["decisions"]
    tot = sum(dec.values())
    rate = f", inlined {100.0 * dec.get('1', 0) / tot:.1f}%" if tot and set(dec) <= {"0", "1"} else ""
    lines = [
        f"build {b['build']}  (policy {', '.join(b['policies'])})",
        f"  {b['compiles']} compiles, {b['modules']} modules ({st}); text size {b['text_size']} bytes "
        f"over {b['sized_modules']} objects; {b['observations']} decisions{rate}; compile time {b['compile_s']:.2f} s",
    ]
    if g := b.get("guard"):
        k = g["kept"]
        lines.append(f"  guard: kept the policy's object {k['policy']}x, the default's {k['default']}x "
                     f"(skipped {k['skipped']}); {g['saved_bytes']} bytes saved vs the policy's objects; "
                     f"plain compiles {g['guard_s']:.2f} s")
    if t := b.get("tuned"):
        lines.append(f"  tuned replays: {t['tuned']} tuned, {t['stale']} stale (changed since tuning), "
                     f"{t['default']} default (no tuned module); {t['saved_bytes']} bytes saved vs -Oz "
                     "by the tuned ones")
    if cmp := b.get("compare"):
        ch = f"{100.0 * cmp['size_change']:+.2f}%" if cmp["size_change"] is not None else "n/a"
        lines.append(f"  vs {cmp['baseline']}: {cmp['text_size']} vs {cmp['baseline_text_size']} bytes "
                     f"over {cmp['matched']} common modules ({ch})")
    rows = b["rows"]
    if top is not None:
        rows = sorted(rows, key=lambda r: -(r["text_size"] or 0))[:top]
    w = max([len("module")] + [len(r["module"]) for r in rows])
    lines.append(f"  {'module':<{w}}  {'text':>9}  {'obs':>6}  {'inline':>6}  {'time_s':>7}  status"
                 + ("  (baseline, change)" if cmp else ""))
    for r in rows:
        rate = f"{100.0 * r['inline_rate']:5.1f}%" if r["inline_rate"] is not None else "     -"
        size = str(r["text_size"]) if r["text_size"] is not None else "-"
        t = f"{r['duration_s']:.3f}" if r.get("duration_s") is not None else "-"
        line = f"  {r['module']:<{w}}  {size:>9}  {r['observations']:>6}  {rate:>6}  {t:>7}  {r['status']}"
        if cmp:
            ch = f"{100.0 * r['size_change']:+.2f}%" if r.get("size_change") is not None else "n/a"
            line += f"  ({r.get('baseline_text_size')}, {ch})"
        if r.get("error"):
            line += f"  [{r['error'][:120]}]"
        lines.append(line)
    return "\n".join(lines)
