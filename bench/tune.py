"""`mlgo-host tune` (batched search) against a plain greedy pass, on the same modules in the same run.

Greedy pass (bench/greedy.py): every decision of the module once, in order,
one flip per compile over the channel (flip it, keep the flip when
llvm-size .text shrinks, go on from the new best).  Tune: `mlgo-host tune` with its default batched search (call-site
keys from one channel compile, then decision sets compiled by the compiler's
inline replay, many flips per compile, each flip's gain read from its
functions), run twice per prior (--priors; the first is tune's default and
the one the goals read): with a fifth of the greedy pass's compiles, and
with as many.  All start from the compiler's default; the default compile
that measures -Oz (cached) is counted in none.

Modules: the benchmark corpus's held-out split by module (Corpus.split(0.2, seed=0, by="module"));
by default exactly the modules of the previous results' greedy pass
(--modules-from, bench/results/tune.json), so figures compare across
runs; else those with at most --max-bc-kb of bitcode.

Prints and writes bench/results/tune.json: per method total .text vs -Oz,
modules improved, compiles (per module), minutes, and for tune the flips
measured per compile (all of its compiles counted: the probe, the
references and the splits too), how many of them were measured in copies
of their function, and the packing bound in place: every first-pass flip
of each module with >= 50 decisions packed at once into batches of
disjoint footprints (no order, no budget, no copies), the most flips per
compile the checked attribution allows there without copies.  With
--without-copies (default) the default prior's two runs are repeated with
`tune --no-copies`, side by side, and with --without-thresholds (default)
with `tune --no-thresholds` (every search from -Oz's decisions; by default
a module first compiles at a few inline thresholds and starts from the
smallest: mlgo_host.search.starts), side by side.

With --split all --language C --per-module 14 30 --modules-from '' it measures
the prior on one language of a corpus of whole projects (e.g. the validation
corpus's C): each prior's tune at those fixed compiles per file, against the
greedy pass over every decision (bench/results/tune_prior_c.json).

usage: .venv/bin/python bench/tune.py [--corpus bench_corpus] [--jobs 2] [--modules-from JSON]
(build the corpus first: mlgo-host corpus benchmark --output bench_corpus)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter

from mlgo_host.corpus.corpus import load_corpus
from mlgo_host.fsutil import atomic_write_json
from mlgo_host.search.driver import BatchedSearch
from mlgo_host.search.passes import known_start
from mlgo_host.search.tune import tune
from mlgo_host.search.tunedir import _load_results

from greedy import greedy_pass

HERE = os.path.dirname(os.path.abspath(__file__))


def greedy_run(mods, jobs: int, work: str, clang: str) -> dict:
    """The greedy pass over every module, from the default."""
    t0 = time.monotonic()
    rows = greedy_pass(mods, jobs, work, clang)
    return _figures(rows, time.monotonic() - t0, len(mods))


def _figures(rows: list[dict], seconds: float, n: int) -> dict:
    d = sum(r["default_size"] for r in rows)
    b = sum(r["best_size"] for r in rows)
    c = sum(r["compiles"] for r in rows)
    return {"modules": n, "searched": len(rows), "default_text": d, "best_text": b, "gain_bytes": d - b,
            "gain_pct": round(100.0 * (d - b) / d, 3) if d else float("nan"),
            "improved": sum(r["best_size"] < r["default_size"] for r in rows),
            "compiles": c, "compiles_per_module": round(c / max(len(rows), 1), 1), "minutes": round(seconds / 60.0, 2),
            "per_module": {r["name"]: {"default": r["default_size"], "best": r["best_size"], "compiles": r["compiles"],
                                       "decisions": r["decisions"]} for r in rows}}


def tune_run(corpus: str, mods, jobs: int, work: str, per_module: float, clang: str, label: str,
             prior: str | None, copies: bool = True, thresholds: bool = True) -> dict:
    out = os.path.join(work, label)
    t0 = time.monotonic()
    s = tune(corpus, out, compiles_per_module=per_module, jobs=jobs, clang=clang, modules=[m.name for m in mods],
             progress=sys.stderr.isatty(), prior=prior, copies=copies, thresholds=thresholds)
    with open(os.path.join(out, "tune.json")) as f:
        man = json.load(f)["modules"]
    data = _load_results(os.path.join(out, "data"))
    rows = [dict(m, name=n) for n, m in man.items() if m["status"] == "ok"]
    big = [r for r in rows if r["decisions"] >= 50]
    largest = max(rows, key=lambda r: r["decisions"])
    fig = {"modules": len(mods), "searched": len(rows), "default_text": s["default_text"],
           "best_text": s["best_text"], "gain_bytes": s["gain_bytes"], "gain_pct": round(s["gain_pct"], 3),
           "improved": s["improved"], "compiles": s["compiles"],
           "compiles_per_module": round(s["compiles_per_module"], 1),
           "minutes": round((time.monotonic() - t0) / 60.0, 2), "budget_per_module": round(per_module, 1),
           "flips_measured": sum(r["flips_measured"] for r in rows),
           "flips_per_compile": round(sum(r["flips_measured"] for r in rows) / max(1, s["compiles"]), 2),
           "flips_per_compile_50plus": round(sum(r["flips_measured"] for r in big)
                                             / max(1, sum(r["compiles"] for r in big)), 2),
           "modules_50plus": len(big), "prior": prior or "patterns", "copies": copies, "thresholds": thresholds,
           # the threshold starts (mlgo_host.search.starts): modules that measured them, that started from one,
           # and the bytes those starts alone were below -Oz
           "threshold_measured": sum(1 for r in data.values() if r.get("thresholds")),
           "threshold_starts": sum(1 for r in data.values() if r.get("base_flags")),
           "threshold_start_bytes": sum(r["default_size"] - min(v for v in r["thresholds"].values() if v is not None)
                                        for r in data.values() if r.get("base_flags")),
           "flips_in_copies": sum(r.get("flips_in_copies", 0) for r in rows),
           "packing_bound_50plus": packing_bound(out, {m.name: m for m in mods}, {r["name"] for r in big}),
           "largest": {"module": largest["name"], "decisions": largest["decisions"],
                       "compiles": largest["compiles"], "flips_measured": largest["flips_measured"],
                       "flips_per_compile": round(largest["flips_measured"] / max(1, largest["compiles"]), 2),
                       "flips_in_copies": largest.get("flips_in_copies", 0)},
           "replay_reproduces_Oz": sum(1 for r in rows if r.get("replay_matches")),
           "per_module": {r["name"]: {"default": r["default_size"], "best": r["best_size"], "compiles": r["compiles"],
                                      "decisions": r["decisions"], "flips_measured": r["flips_measured"],
                                      "batches": r["batches"]} for r in rows}}
    return fig


def packing_bound(out: str, mods: dict, names: set[str]) -> dict:
    """The most flips of a first pass one compile can measure under the
    checked attribution: every candidate flip of each module packed at
    once (no order, no budget) into batches of disjoint footprints, from
    the module's stored probe and reference (no compile).  Flips per batch,
    on the modules ``names``, and the function most flips touch."""
    flips = batches = 0
    per = {}
    for name, r in _load_results(os.path.join(out, "data")).items():
        ref = known_start(r)
        if name not in names or ref is None:
            continue
        s = BatchedSearch(mods[name], r["probe"], None, budget=0, copies=False)  # (in place: copies lift it)
        s.base = ref
        cands = s.candidates()
        n = len(s.batches_of(cands))
        hub = Counter(f for c in cands for f in c.footprint).most_common(1)
        per[name] = {"flips": len(cands), "batches": n, "hub_flips": hub[0][1] if hub else 0}
        flips, batches = flips + len(cands), batches + n
    return {"flips_per_compile": round(flips / max(1, batches), 2), "per_module": per}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="bench_corpus", help="the benchmark corpus (mlgo-host corpus benchmark)")
    ap.add_argument("--heldout-fraction", type=float, default=0.2)
    ap.add_argument("--split", choices=("heldout", "all"), default="heldout",
                    help="the modules: the held-out split by module (default) or every module of the corpus")
    ap.add_argument("--language", choices=("C", "C++"), default=None, help="only the modules of this language")
    ap.add_argument("--per-module", type=float, nargs="+", default=None, metavar="K",
                    help="tune at these compiles per module instead of a fifth of the greedy pass's and as many")
    ap.add_argument("--max-bc-kb", type=float, default=100.0, help="without --modules-from: leave out modules with "
                                                                    "more bitcode")
    ap.add_argument("--modules-from", metavar="JSON", default=os.path.join(HERE, "results", "tune.json"),
                    help="take the modules of this earlier result's greedy pass (default: the previous results; "
                         "'' for the bitcode-size filter)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--clang", default="clang-19")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "tune.json"))
    ap.add_argument("--work", default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--priors", nargs="+", default=["pretrained-oz", "patterns"],
                    help="tune's --prior, one pair of runs each (the first is tune's default, which the goals read)")
    ap.add_argument("--without-copies", action=argparse.BooleanOptionalAction, default=True,
                    help="also run the default prior's searches with every flip measured in place (tune --no-copies)")
    ap.add_argument("--without-thresholds", action=argparse.BooleanOptionalAction, default=True,
                    help="also run the default prior's searches from -Oz's decisions only (tune --no-thresholds)")
    ap.add_argument("--greedy-from", metavar="JSON", default=None,
                    help="reuse the greedy pass of an earlier run's JSON (same modules; its compiles and gains are "
                         "deterministic, its minutes are that run's)")
    args = ap.parse_args()
    corpus = load_corpus(args.corpus)
    held = corpus.split(args.heldout_fraction, seed=0, by="module")[1] if args.split == "heldout" else corpus.modules
    held = [m for m in held if args.language is None or m.language == args.language]
    if args.modules_from and os.path.exists(args.modules_from):
        with open(args.modules_from) as f:
            names = set(json.load(f)["greedy"]["per_module"])
        mods = sorted((m for m in held if m.name in names), key=lambda m: m.name)
        assert len(mods) == len(names), "modules of --modules-from missing from the corpus"
        which = f"the {len(mods)} modules of {os.path.basename(args.modules_from)}'s greedy pass"
    else:
        mods = sorted((m for m in held if m.size <= 1024 * args.max_bc_kb), key=lambda m: m.name)
        lang = f"{args.language} " if args.language else ""
        which = f"{len(mods)} of {len(held)} {lang}modules of the {args.split} split (bitcode <= {args.max_bc_kb:g} KB)"
    work = args.work or tempfile.mkdtemp(prefix="bench-tune-")
    os.makedirs(work, exist_ok=True)
    print(f"{which}; work dir {work}", file=sys.stderr)
    if args.greedy_from:  # the greedy pass is deterministic: its figures from an earlier run of these modules
        with open(args.greedy_from) as f:
            greedy = dict(json.load(f)["greedy"], reused_from=os.path.basename(args.greedy_from))
        assert sorted(greedy["per_module"]) == sorted(m.name for m in mods), "not the same modules"
    else:
        greedy = greedy_run(mods, args.jobs, work, args.clang)
    print(f"greedy pass: {greedy['gain_pct']:.3f}% smaller than -Oz, {greedy['compiles_per_module']} compiles/module, "
          f"{greedy['minutes']:.1f} min", file=sys.stderr)
    if args.per_module:
        return _fixed_budgets(args, mods, work, greedy, which)
    per_module = greedy["compiles"] / max(greedy["searched"], 1)
    runs = {}
    for prior in args.priors:  # the default (first) prior's runs are the ones the goals read
        tag = "" if prior == args.priors[0] else "_" + prior.replace("-", "_")
        p = None if prior == "patterns" else prior
        runs["tune_fifth" + tag] = tune_run(args.corpus, mods, args.jobs, work, per_module / 5.0, args.clang,
                                            "T5" + tag, p)
        runs["tune_equal" + tag] = tune_run(args.corpus, mods, args.jobs, work, per_module, args.clang, "T1" + tag, p)
        if prior == args.priors[0] and args.without_copies:  # side by side: the same search, every flip in place
            runs["tune_fifth_no_copies"] = tune_run(args.corpus, mods, args.jobs, work, per_module / 5.0, args.clang,
                                                    "T5_no_copies", p, copies=False)
            runs["tune_equal_no_copies"] = tune_run(args.corpus, mods, args.jobs, work, per_module, args.clang,
                                                    "T1_no_copies", p, copies=False)
        if prior == args.priors[0] and args.without_thresholds:  # side by side: every search from -Oz
            runs["tune_fifth_no_thresholds"] = tune_run(args.corpus, mods, args.jobs, work, per_module / 5.0,
                                                        args.clang, "T5_no_thresholds", p, thresholds=False)
            runs["tune_equal_no_thresholds"] = tune_run(args.corpus, mods, args.jobs, work, per_module, args.clang,
                                                        "T1_no_thresholds", p, thresholds=False)
    fifth, equal = runs["tune_fifth"], runs["tune_equal"]
    goals = {"flips_per_compile_50plus >= 8": fifth["flips_per_compile_50plus"] >= 8
             and equal["flips_per_compile_50plus"] >= 8,
             "greedy's gain in <= 1/5 of its compiles": fifth["gain_bytes"] >= greedy["gain_bytes"]
             and fifth["compiles"] <= greedy["compiles"] / 5.0,
             ">= 1.5x greedy's gain with as many compiles": equal["gain_bytes"] >= 1.5 * greedy["gain_bytes"]
             and equal["compiles"] <= greedy["compiles"]}
    res = {"corpus": os.path.basename(os.path.normpath(args.corpus)), "split": f"held-out {args.heldout_fraction:g} (seed 0)", "modules": which,
           "jobs": args.jobs, "load_average_at_end": os.getloadavg()[0], "greedy": greedy, **runs, "goals": goals}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    atomic_write_json(args.out, res)
    for k in ("greedy", *runs):
        r = res[k]
        extra = f", {r['flips_per_compile']} flips/compile ({r['flips_per_compile_50plus']} on the " \
                f"{r['modules_50plus']} modules with >= 50 decisions)" if "flips_per_compile" in r else ""
        print(f"{k:>10}: {r['gain_pct']:6.3f}% smaller than -Oz ({r['gain_bytes']} of {r['default_text']} bytes), "
              f"{r['improved']}/{r['searched']} modules smaller, {r['compiles']} compiles "
              f"({r['compiles_per_module']}/module), {r['minutes']:.1f} min{extra}")
    for g, ok in goals.items():
        print(f"goal {g}: {'met' if ok else 'NOT met'}")
    return 0


def _fixed_budgets(args, mods, work: str, greedy: dict, which: str) -> int:
    """Each prior's tune at each of ``--per-module``'s compiles per module, against the greedy pass."""
    runs = {}
    for prior in args.priors:
        p = None if prior == "patterns" else prior
        for k in args.per_module:
            label = f"tune_{k:g}_{prior.replace('-', '_')}"
            runs[label] = tune_run(args.corpus, mods, args.jobs, work, k, args.clang, label, p)
            r = runs[label]
            print(f"{label}: {r['gain_pct']:.3f}% ({r['gain_bytes']} B), {r['compiles']} compiles, "
                  f"{100.0 * r['gain_bytes'] / max(greedy['gain_bytes'], 1):.0f} % of the greedy pass's bytes",
                  file=sys.stderr)
    goals = {f"{label} >= the greedy pass": r["gain_bytes"] >= greedy["gain_bytes"] for label, r in runs.items()}
    res = {"corpus": os.path.basename(os.path.normpath(args.corpus)), "split": args.split, "language": args.language,
           "modules": which, "jobs": args.jobs, "greedy": greedy, **runs, "goals": goals}
    atomic_write_json(args.out, res)
    print(f"greedy pass: {greedy['gain_pct']:.3f}% ({greedy['gain_bytes']} B), "
          f"{greedy['compiles_per_module']} compiles/module", file=sys.stderr)
    for g, ok in goals.items():
        print(f"goal {g}: {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
