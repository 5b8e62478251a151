"""The gate's rule in search, then imitate, side by side on the same round policies.

Each ROOT is a finished ``mlgo-host train --gin_files configs/inlining/search.gin`` run on one corpus,
e.g. the demo's setting with another seed (the seed changes which projects validate and which are
held out):

    mlgo-host train --root_dir runs/s1 --corpus demo_out/corpus --gin_files configs/inlining/search.gin \\
        --gin_bindings num_workers=2 heldout_fraction=0.3 time_budget_minutes=3.5 compiles_per_round=700 \\
        round_search_minutes=0.3 "search_loop.train_search.gate_thresholds=(0.5, 0.9)" seed=1

Every round's policy (``ROOT/policy/<round>``) is compiled at each gate threshold over the run's
validation and held-out projects, without and with the bounds on added inlinings (3 uses, 150
functions). Each rule then picks its gate per round and its round by validation, as the loop does,
and the held-out figures of what it picks are reported:

* neither: no bounds, any validation saving;
* bounds: the bounds, any saving;
* min gain: no bounds, at least 0.1 %;
* both (``search.gin``'s defaults): the bounds and at least 0.1 %.

Writes ``bench/results/gate_rule.json`` (``--output``) and prints one line per run and rule.

usage: .venv/bin/python bench/gate_rule.py --corpus demo_out/corpus --heldout-fraction 0.3 \\
           --run 0=demo_out/search --run 1=runs/s1 --run 2=runs/s2 --run 3=runs/s3
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from mlgo_host.fsutil import atomic_write_json  # noqa: E402

BOUND = (3, 150)
RULES = {"neither": (False, 0.0), "bounds": (True, 0.0), "min gain": (False, 0.1), "both": (True, 0.1)}


def measure(root: str, corpus, seed: int, heldout_fraction: float, gates: list[float], jobs: int) -> list[dict]:
    """Every round policy of ``root`` at each gate, unbounded and bounded, on validation and held-out."""
    from mlgo_host.corpus.corpus import split_three
    from mlgo_host.policies.bounds import InliningBound, set_inlining_bound
    from mlgo_host.training.search_loop import _report
    from mlgo_host.training.workers import Workers

    _, val, held = split_three(corpus.modules, heldout_fraction, 0.2, seed, "project")
    rows = []
    pool = Workers(num_workers=jobs).pool("mlgo_host.search.worker:SearchWorker", advisor="inline",
                                          baseline_cache=os.path.join(root, "baselines"))
    with pool, tempfile.TemporaryDirectory() as tmp:
        for rnd in sorted(os.listdir(os.path.join(root, "policy")), key=int):
            for bounded in (False, True):
                policy = os.path.join(tmp, f"{rnd}-{bounded}")
                shutil.copytree(os.path.join(root, "policy", rnd), policy)
                set_inlining_bound(policy, InliningBound(*BOUND) if bounded else InliningBound())
                for gate in gates:
                    row = {"round": int(rnd), "bounded": bounded, "gate": gate}
                    row["validation"] = _figures(_report(pool, policy, gate, val, False, ""), sizes=True)
                    row["heldout"] = _figures(_report(pool, policy, gate, held, False, ""))
                    rows.append(row)
    return rows


def _figures(report, sizes: bool = False) -> dict:
    ok = [r for r in report.rows if r.ok]
    base, pol = sum(r.baseline_text for r in ok), sum(r.policy_text for r in ok)
    growth = [100.0 * (r.policy_text - r.baseline_text) / max(r.baseline_text, 1) for r in ok]
    out = {"pct": 100.0 * (pol - base) / base if base else 0.0, "worst_pct": max(growth, default=0.0),
           "bigger_1pct": sum(g > 1.0 for g in growth), "modules": len(ok)}
    if sizes:  # what the gate's rule reads
        out["sizes"] = {r.module: r.policy_text for r in ok}
        out["baseline"] = {r.module: r.baseline_text for r in ok}
    return out


def pick(rows: list[dict], bounded: bool, min_gain: float) -> dict:
    """The loop's choice under a rule: each round's gate by :func:`choose_gate`, then the round with the
    smallest validation total (the first of equals)."""
    from mlgo_host.learning.imitate import GateRule, choose_gate

    best = None
    zero = {"pct": 0.0, "worst_pct": 0.0, "bigger_1pct": 0}
    for rnd in sorted({r["round"] for r in rows}):
        mine = {r["gate"]: r for r in rows if r["round"] == rnd and r["bounded"] == bounded}
        baseline = next(iter(mine.values()))["validation"]["baseline"]
        gate, table = choose_gate({g: r["validation"]["sizes"] for g, r in mine.items()}, baseline,
                                  GateRule(1.0, min_gain))
        val = table[gate]["size_change_pct"] if gate in table else 0.0
        if best is None or val < best["validation_pct"]:
            best = {"round": rnd, "gate": gate, "validation_pct": val,
                    "heldout": mine[gate]["heldout"] if gate in mine else zero}
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, help="the corpus the runs trained on")
    ap.add_argument("--heldout-fraction", type=float, default=0.3, help="the runs' heldout_fraction (default 0.3)")
    ap.add_argument("--run", action="append", required=True, metavar="SEED=ROOT", help="a run's seed and root")
    ap.add_argument("--gates", default="0.5,0.9", help="gate thresholds (default: the demo's, 0.5,0.9)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--output", default=os.path.join(HERE, "results", "gate_rule.json"))
    args = ap.parse_args()
    from mlgo_host.corpus.corpus import load_corpus

    corpus = load_corpus(args.corpus)
    gates = [float(g) for g in args.gates.split(",")]
    out = {"corpus": os.path.basename(os.path.normpath(args.corpus)), "bound": BOUND, "runs": []}
    for spec in args.run:
        seed, root = spec.split("=", 1)
        rows = measure(root, corpus, int(seed), args.heldout_fraction, gates, args.jobs)
        picks = {name: pick(rows, *rule) for name, rule in RULES.items()}
        for row in rows:  # the per-module sizes were for the rule; the figures stay
            del row["validation"]["sizes"], row["validation"]["baseline"]
        out["runs"].append({"seed": int(seed), "rows": rows, "picks": picks})
        for name, p in picks.items():
            h = p["heldout"]
            print(f"seed {seed} {name:>9}: round {p['round']} gate {p['gate']:g} validation "
                  f"{p['validation_pct']:+.3f}%  held-out {h['pct']:+.3f}%, worst {h['worst_pct']:+.2f}%, "
                  f"{h['bigger_1pct']} > 1 %")
    atomic_write_json(args.output, out)
    print(f"wrote {os.path.relpath(args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
