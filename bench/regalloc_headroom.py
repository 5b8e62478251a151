"""What the passes after inlining could give on size: each file compiled plainly at its own flags and
again with a register-allocation advisor answered by a heuristic policy, or with extra code-size flags.
Per configuration: the total against the plain compile and the files more than 1 % bigger; then the
*oracle* over a set of configurations, the smallest object of each file.  A policy that chooses per
file without compiling gets at most the oracle; the advisors' own per-decision choices are not searched.

Configurations (``--configs``, comma-separated):
  evict:POLICY[:SEED]   the eviction advisor (regalloc-evict) answered by POLICY (default, random...)
  prio:POLICY[:SEED]    the priority advisor (regalloc-priority)
  formula:NAME          the priority advisor answered by one of FORMULAS below, a fixed function of the
                        live range's size, spill weight and stage (the features the advisor sends)
  evict-rule:NAME       the eviction advisor answered by one of EVICT_RULES below, from the candidates'
                        features (greedy's own rule is a cost comparison the channel sends in parts)
  flags:NAME            one of FLAGS below added to the compile

The sizes are kept in the output as they are measured: a stopped run continues where it stopped.

usage: .venv/bin/python bench/regalloc_headroom.py --corpus DIR [--language C] [--modules-file M] [--limit N]
           [--configs evict:default,prio:default,evict:random:0,prio:random:0,flags:outliner] [--jobs 2]
Writes bench/results/regalloc_headroom.json (``--output``).
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from mlgo_host.fsutil import atomic_write_json  # noqa: E402
from mlgo_host.policies.base import Policy  # noqa: E402
from mlgo_host.policies.heuristic import SpillWeightPriority  # noqa: E402

ADVISORS = {"evict": "regalloc-evict", "prio": "regalloc-priority"}


def _tiered(key):
    """Live ranges back from a failed split (stage 2, greedy's ``RS_Split``) after all others, as greedy
    orders them; within each tier by ``key(size, weight)``."""
    return lambda size, w, stage: (stage != 2) * 2**30 + min(key(size, w), 2**30 - 1)


def _gated(cut: int):
    """Stage 2 last, as in :func:`_tiered`; then ranges of at least ``cut`` slot units by weight, then the
    shorter ones by size (greedy's long global ranges before its short local ones)."""
    def priority(size, w, stage):
        if stage == 2:
            return min(size, 2**28)
        return 2**30 + min(w * 1e6, 2**29) if size >= cut else 2**29 + min(size, 2**28)
    return priority


#: name -> priority from (li_size, weight, stage); the float is converted to ``unsigned`` by the compiler
FORMULAS = {"size": lambda size, w, stage: size,
            "weight": lambda size, w, stage: w * 1e4,
            "weight1e6": lambda size, w, stage: w * SpillWeightPriority.SCALE,  # the heuristic spill-weight
            "weight_then_size": lambda size, w, stage: min(w * 1e4, 2**24) * 256 + min(size, 2**20) / 4096,
            "weight_x_size": lambda size, w, stage: w * size,
            "sqrt_weight_x_size": lambda size, w, stage: w ** 0.5 * size,
            "weight_x_sqrt_size": lambda size, w, stage: w * size ** 0.5 * 1e3,
            "weight2_x_size": lambda size, w, stage: w * w * size,
            "rev_weight": lambda size, w, stage: 2**24 - w * 1e4,
            # greedy's own tiers kept: stage 2 (back from a failed split) waits for the rest
            "stage_size": _tiered(lambda size, w: size),
            "stage_weight": _tiered(lambda size, w: w * 1e6),
            "stage_weight_x_sqrt_size": _tiered(lambda size, w: w * size ** 0.5 * 1e3),
            "stage_weight_then_size": _tiered(lambda size, w: min(w * 1e4, 2**22 - 1) * 256 + min(size, 2**20) / 4096),
            **{f"gated_weight_{cut}": _gated(cut) for cut in (200, 500, 2000)}}
#: name -> (evict only when the cheapest candidate costs less than this times the range itself, None: always;
#: the cost features, compared in order)
EVICT_RULES = {"cheapest": (None, ("use_def_density",)),
               "cheapest_hints": (None, ("nr_broken_hints", "use_def_density")),
               "cheaper": (1.0, ("use_def_density",)),
               "cheaper_hints": (1.0, ("nr_broken_hints", "use_def_density")),
               "cheaper_half": (0.5, ("use_def_density",)),
               "cheaper_twice": (2.0, ("use_def_density",)),
               "cheaper_quarter": (0.25, ("use_def_density",)),
               "cheaper_tenth": (0.1, ("use_def_density",)),
               "cheaper_30th": (1 / 30, ("use_def_density",))}
FLAGS = {"outliner": ["-mllvm", "-enable-machine-outliner=always"],
         "merge": ["-mllvm", "-enable-merge-functions"]}


class FormulaPolicy(Policy):
    """A priority policy: ``FORMULAS[name]`` of the observation's ``li_size``, ``weight`` and ``stage``, clamped."""

    def __init__(self, name: str):
        self.name = name
        self.formula = FORMULAS[name]

    def bind(self, header, advisor):
        super().bind(header, advisor)
        self._read = header.first_values(["li_size", "weight", "stage"])

    def act(self, obs):
        size, weight, stage = self._read(obs.raw)
        return float(min(max(self.formula(max(float(size), 0.0), max(weight, 0.0), int(stage)), 0.0), 2.0**31))


class EvictRulePolicy(Policy):
    """An eviction policy: the legal candidate of the lowest cost (``EVICT_RULES[name]``'s features, compared in
    order), when that is below a factor times the cost of the range being allocated (the last column); else
    nothing is evicted and the range is left to split or spill.  The compiler sends a NaN density for some
    columns: a NaN compares false, so a range whose own cost is NaN evicts nothing."""

    def __init__(self, name: str):
        self.name = name
        self.factor, self.costs = EVICT_RULES[name]

    def act(self, obs):
        mask = obs["mask"].reshape(-1)  # each feature is a [1, W] row of the candidates, the range itself last
        costs = [obs[f].reshape(-1) for f in self.costs]
        w = mask.size
        cost = {i: tuple(float(c[i]) for c in costs) for i in range(w - 1) if mask[i]}
        if not cost:
            return w - 1
        best = min(cost, key=cost.__getitem__)
        if self.factor is None or not mask[w - 1]:
            return best
        own = tuple(float(c[w - 1]) for c in costs)
        return best if cost[best][:-1] + (cost[best][-1] / self.factor,) < own else w - 1


def measure(task: tuple) -> tuple[str, dict]:
    """(module name, {config: text size or None}) for the configurations not measured yet."""
    from mlgo_host.measure.compile import compile_module, compile_plain
    from mlgo_host.policies import load_policy

    module, configs, clang = task
    sizes = {}
    for config in configs:
        kind, _, rest = config.partition(":")
        if kind == "plain":
            res = compile_plain(module, clang=clang)
        elif kind == "flags":
            res = compile_plain(module, clang=clang, extra_args=FLAGS[rest])
        elif kind == "evict-rule":
            res = compile_module(module, EvictRulePolicy(rest), advisor="regalloc-evict", clang=clang)
        elif kind == "formula":
            res = compile_module(module, FormulaPolicy(rest), advisor="regalloc-priority", clang=clang)
        else:
            name, _, seed = rest.partition(":")
            res = compile_module(module, load_policy(name, seed=int(seed or 0)), advisor=ADVISORS[kind], clang=clang)
        sizes[config] = res.text_size if res.ok else None
    return module.name, sizes


def summarize(sizes: dict[str, dict[str, int | None]], configs: list[str]) -> dict:
    """Per configuration: the change of the total against plain, the files smaller / bigger / > 1 %
    bigger; the oracle over every configuration, over the advisors only, and per project."""
    ok = {m: s for m, s in sizes.items() if all(s.get(c) is not None for c in ["plain", *configs])}
    plain = sum(s["plain"] for s in ok.values())
    out: dict = {"files": len(ok), "plain_text": plain, "by_config": {}}
    if not plain:
        return out
    for c in configs:
        pairs = [(s[c], s["plain"]) for s in ok.values()]
        out["by_config"][c] = {"change_pct": round(100.0 * (sum(a for a, _ in pairs) - plain) / plain, 3),
                               "smaller": sum(a < b for a, b in pairs), "bigger": sum(a > b for a, b in pairs),
                               "bigger_1pct": sum(a > 1.01 * b for a, b in pairs)}
    advisors = [c for c in configs if not c.startswith("flags:")]
    for label, among in (("oracle_change_pct", configs), ("oracle_advisors_change_pct", advisors)):
        best = sum(min(s[c] for c in ["plain", *among]) for s in ok.values())
        out[label] = round(100.0 * (best - plain) / plain, 3)
    per = collections.defaultdict(lambda: [0, 0])
    for m, s in ok.items():
        per[m.split("/", 1)[0]][0] += s["plain"]
        per[m.split("/", 1)[0]][1] += min(s[c] for c in ["plain", *configs])
    out["oracle_by_project"] = {p: round(100.0 * (b - a) / a, 3) for p, (a, b) in sorted(per.items()) if a}
    return out


def main() -> int:
    from mlgo_host.corpus.corpus import load_corpus

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--language", choices=["C", "C++", "all"], default="C")
    ap.add_argument("--modules-file", default=None, help="the files to measure, one name a line (default: all)")
    ap.add_argument("--limit", type=int, default=None, help="measure the first N files (corpus order)")
    ap.add_argument("--configs", default="evict:default,prio:default,evict:random:0,evict:random:1,"
                                         "prio:random:0,prio:random:1,flags:outliner,flags:merge")
    ap.add_argument("--clang", default="clang-19")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--output", default=os.path.join(HERE, "results", "regalloc_headroom.json"))
    args = ap.parse_args()
    configs = [c for c in args.configs.split(",") if c and c != "plain"]
    known = {"flags": FLAGS, "formula": FORMULAS, "evict-rule": EVICT_RULES}
    bad = [c for c in configs if c.partition(":")[0] not in (*ADVISORS, *known)
           or c.partition(":")[2] not in known.get(c.partition(":")[0], [c.partition(":")[2]])]
    if bad:
        raise SystemExit(f"regalloc_headroom: unknown configuration {bad[0]!r}")
    modules = [m for m in load_corpus(args.corpus).modules if args.language in ("all", m.language)]
    if args.modules_file:
        with open(args.modules_file) as f:
            wanted = set(f.read().split())
        modules = [m for m in modules if m.name in wanted]
    modules = modules[:args.limit]
    sizes: dict = {}
    if os.path.exists(args.output):
        with open(args.output) as f:
            sizes = json.load(f).get("sizes", {})
    tasks = [(m, [c for c in ["plain", *configs] if c not in sizes.get(m.name, {})], args.clang) for m in modules]
    tasks = [t for t in tasks if t[1]]
    print(f"{len(modules)} files, {len(tasks)} to measure", file=sys.stderr)
    with mp.Pool(args.jobs) as pool:
        for i, (name, got) in enumerate(pool.imap_unordered(measure, tasks), 1):
            sizes.setdefault(name, {}).update(got)
            if i % 20 == 0 or i == len(tasks):
                atomic_write_json(args.output, {"corpus": os.path.basename(os.path.normpath(args.corpus)),
                                                "sizes": sizes})
    names = {m.name for m in modules}
    summary = summarize({m: s for m, s in sizes.items() if m in names}, configs)
    atomic_write_json(args.output, {"corpus": os.path.basename(os.path.normpath(args.corpus)),
                                    "language": args.language, "configs": configs, "summary": summary,
                                    "sizes": sizes})
    print(json.dumps({k: v for k, v in summary.items() if k != "oracle_by_project"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
