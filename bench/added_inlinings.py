"""Where a policy adds inlinings to -Oz's, file by file, and what each file's size does.

Each file of the given language is compiled with the policy (its part for that language, as
``pretrained-oz`` answers it), counting the decisions where it answers "inline" and -Oz's own decision
is "no" (an added inlining) and the reverse (a refusal), with the module's function count at its
first decision (the compiler's ``node_count``).  The summary bands the files by added inlinings,
absolute and per function: whether a cap on them would separate the files that grow more than 1 %
from those that win.

usage: .venv/bin/python bench/added_inlinings.py --corpus validation_corpus/ --corpus DEBIAN_CXX/ \\
           [--policy pretrained-oz] [--language C++] [--jobs 2]
Writes bench/results/added_inlinings.json (``--output``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from mlgo_host.fsutil import atomic_write_json  # noqa: E402
from mlgo_host.policies.base import Policy  # noqa: E402

COUNT_BANDS = ((1, 5), (5, 10), (10, 20), (20, 40), (40, 80), (80, None))
RATIO_BANDS = ((0.0, 0.05), (0.05, 0.1), (0.1, 0.15), (0.15, 0.2), (0.2, 0.3), (0.3, None))


class CountingPolicy(Policy):
    """``base``'s answers, counting those that differ from -Oz's decision (per compile)."""

    def __init__(self, base: Policy):
        self.base, self.name, self.stochastic = base, base.name, False

    def bind(self, header, advisor) -> None:
        self.base.bind(header, advisor)
        super().bind(header, advisor)
        self._default = advisor.default_advice
        self._functions = header.first_values(("node_count",))
        self.added = self.refused = 0
        self.functions = None

    def act(self, obs):
        action, default = self.base.act(obs), self._default(obs)
        if self.functions is None:
            self.functions = int(self._functions(obs.raw)[0])
        self.added += action == 1 and default == 0
        self.refused += action == 0 and default == 1
        return action


_policy = None


def _init(policy: str, language: str) -> None:
    global _policy
    from mlgo_host.policies import load_policy

    _policy = CountingPolicy(load_policy(policy).for_language(language))


def _measure(module) -> dict:
    from mlgo_host.measure.compile import baseline_size, compile_module

    res = compile_module(module, _policy)
    if not res.ok:
        return {"name": module.name, "error": res.reason}
    oz = baseline_size(module)
    return {"name": module.name, "oz": oz, "policy": res.text_size, "decisions": res.observations,
            "added": _policy.added, "refused": _policy.refused, "functions": _policy.functions,
            "change_pct": round(100.0 * (res.text_size - oz) / max(oz, 1), 3)}


def bands(files: list[dict], key, edges) -> list[dict]:
    out = []
    for lo, hi in edges:
        inside = [f for f in files if key(f) >= lo and (hi is None or key(f) < hi)]
        out.append({"from": lo, "to": hi, "files": len(inside), "bytes": sum(f["policy"] - f["oz"] for f in inside),
                    "over_1pct": sum(f["change_pct"] > 1.0 for f in inside)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", action="append", required=True)
    ap.add_argument("--policy", default="pretrained-oz")
    ap.add_argument("--language", default="C++", choices=("C", "C++"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--output", default=os.path.join(HERE, "results", "added_inlinings.json"))
    args = ap.parse_args()

    from mlgo_host.corpus.corpus import load_corpus

    modules = [m for c in args.corpus for m in load_corpus(c).modules if m.language == args.language]
    with mp.get_context("spawn").Pool(args.jobs, _init, (args.policy, args.language)) as pool:
        rows = list(pool.imap_unordered(_measure, modules, chunksize=4))
    ok = [r for r in rows if "error" not in r]
    adding = [r for r in ok if r["added"]]
    oz, pol = sum(r["oz"] for r in ok), sum(r["policy"] for r in ok)
    result = {"policy": args.policy, "language": args.language,
              "corpora": [os.path.basename(c.rstrip("/")) for c in args.corpus], "files": len(ok),
              "failed": len(rows) - len(ok), "change_pct": round(100.0 * (pol - oz) / max(oz, 1), 3),
              "files_adding": len(adding),
              "over_1pct": sorted(({k: r[k] for k in ("name", "change_pct", "added", "functions")}
                                   for r in ok if r["change_pct"] > 1.0), key=lambda r: -r["change_pct"]),
              "by_added": bands(adding, lambda r: r["added"], COUNT_BANDS),
              "by_added_per_function": bands(adding, lambda r: r["added"] / max(r["functions"] or 1, 1), RATIO_BANDS),
              "files_adding_inlinings": sorted(adding, key=lambda r: r["name"])}
    atomic_write_json(args.output, result)
    print(f"{len(ok)} files ({result['failed']} failed), {result['change_pct']:+.3f} % vs -Oz; "
          f"{len(adding)} add inlinings")
    for r in result["over_1pct"]:
        print(f"  > 1 %: {r['name']} {r['change_pct']:+.2f} %, {r['added']} added, {r['functions']} functions")
    for name in ("by_added", "by_added_per_function"):
        for b in result[name]:
            print(f"  {name} [{b['from']}, {b['to']}): {b['files']} files, {b['bytes']:+,} B, "
                  f"{b['over_1pct']} > 1 %")
    print(f"wrote {os.path.relpath(args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
