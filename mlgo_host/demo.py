"""``make demo``: the main job end to end on the benchmark corpus, split by project
(:data:`HELDOUT_FRACTION` of its seven projects held out, then validation).

1. build the benchmark corpus (pinned PyPI sdists, C and C++; cached),
2. behavioural cloning of clang's own heuristic (configs/inlining/bc.gin): imitation without search,
3. search, then imitate (configs/inlining/search.gin) for ``--minutes``: rounds of per-module flip
   search on the training split (each at most ``--round-minutes``: the points of the learning
   curve), weighted cloning of the best decisions found, the gate chosen on the validation split,
4. ``mlgo-host tune`` on the held-out split for ``--tune-minutes``: the headroom the policies aim at
   (it searches the very modules it reports: not a generalization figure),
5. the held-out table against clang's own -Oz (both policies, search + imitate behind the guard,
   the shipped policy, which saw files of these projects, and tune's replays), the learning curve,
   and where to point TensorBoard.

Every step keeps its output under ``--output`` and is skipped (or resumed) when run again.

    python -m mlgo_host.demo --output demo_out [--minutes M] [--round-minutes R] [--workers N]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time

from mlgo_host.errors import MlgoHostError
from mlgo_host.shipped import shipped_policy_dir

#: the share of the benchmark corpus's 7 projects held out (the split is by project)
HELDOUT_FRACTION = 0.3
REPO_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


@contextlib.contextmanager
def _step(title: str, timings: dict[str, float], key: str):
    print(f"\n== {title}", file=sys.stderr, flush=True)
    t = time.monotonic()
    yield
    timings[key] = time.monotonic() - t


def _mlgo(args: list[str], shown: list[str] | None = None) -> None:
    """Run ``mlgo-host args``, echoing the command (or ``shown``, a shorter spelling of it)."""
    cmd = [sys.executable, "-m", "mlgo_host", *args]
    print("$ mlgo-host " + " ".join(shown or args), file=sys.stderr, flush=True)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    rc = subprocess.run(cmd, env=env).returncode
    if rc != 0:
        raise SystemExit(f"demo: step failed (exit {rc}): mlgo-host {' '.join(args)}")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    t0 = time.monotonic()
    out = os.path.abspath(args.output)
    os.makedirs(out, exist_ok=True)
    if not os.path.isdir(REPO_CONFIGS):
        raise SystemExit("demo: configs/ not found next to the package (run from a checkout: make demo)")
    timings: dict[str, float] = {}
    corpus = _build_corpus(args, out, timings)
    common = [f"num_workers={args.workers}", f"heldout_fraction={HELDOUT_FRACTION}"]
    bc_root = _clone_default(corpus, out, common, timings)
    search_root = _search_then_imitate(args, corpus, out, common, timings)
    tuned = _tune_heldout(args, corpus, out, timings)
    table = _evaluate_heldout(args, corpus, out, bc_root, search_root, tuned, timings)
    from mlgo_host.evaluation.plots import plot_search

    curve = plot_search(os.path.join(search_root, "state.json"), os.path.join(out, "search_curve.png"))
    timings["total"] = time.monotonic() - t0
    with open(os.path.join(out, "demo_result.json"), "w") as f:
        json.dump({"table": table, "timings_s": {k: round(v, 1) for k, v in timings.items()}}, f, indent=1)
    print(format_table(table))
    print(_gate_note(os.path.join(search_root, "saved_policy")))
    print("minutes: " + ", ".join(f"{k} {v / 60:.1f}" for k, v in timings.items()))
    print(f"per-module CSVs: {out}/heldout_*.csv; learning curve: {curve or '(no round yet)'}")
    print(f"TensorBoard:     tensorboard --logdir {search_root}   (then open http://localhost:6006)")
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mlgo_host.demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", default="demo_out", help="where everything goes (default: demo_out)")
    p.add_argument("--corpus", default=None,
                   help="use this corpus instead of building the benchmark corpus into OUTPUT/corpus")
    # the defaults let two rounds or more (search, imitation, gate, evaluation) fit the budget on 2 CPUs
    p.add_argument("--minutes", type=float, default=3.5,
                   help="time budget of the search-then-imitate training, its rounds' imitation and evaluation "
                        "included (default: 3.5)")
    p.add_argument("--round-minutes", type=float, default=0.3,
                   help="the longest one round's search starts compiles (default: 0.3); what it measured by "
                        "then is kept, the next round searches the modules not searched yet first")
    p.add_argument("--tune-minutes", type=float, default=1.5,
                   help="time budget of tune on the held-out split (default: 1.5)")
    p.add_argument("--compiles-per-round", type=int, default=700,
                   help="search compiles per round, shared by module size (default: 700)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2,
                   help="collection worker processes (default: the number of CPUs)")
    p.add_argument("--gin_bindings", nargs="+", action="extend", default=[], metavar="BINDING",
                   help="extra gin bindings for the search-then-imitate run")
    return p


def _build_corpus(args: argparse.Namespace, out: str, timings: dict[str, float]) -> str:
    """Step 1: ``--corpus``, or the benchmark corpus built into OUTPUT/corpus once."""
    corpus = args.corpus or os.path.join(out, "corpus")
    with _step(f"1/5 corpus: {corpus}", timings, "corpus"):
        if not os.path.exists(os.path.join(corpus, "corpus_description.json")):
            if args.corpus:
                raise SystemExit(f"demo: {corpus} is not a corpus (no corpus_description.json)")
            _mlgo(["corpus", "benchmark", "--output", corpus, "--jobs", str(args.workers)])
        else:
            print("already built", file=sys.stderr)
    return corpus


def _clone_default(corpus: str, out: str, common: list[str], timings: dict[str, float]) -> str:
    """Step 2: behavioural cloning of the default heuristic (once); returns its run's root."""
    bc_root = os.path.join(out, "bc")
    title = "2/5 behavioural cloning of the default heuristic (trace, vocab, cloning): imitation without search"
    with _step(title, timings, "bc"):
        if not os.path.exists(os.path.join(bc_root, "saved_policy", "metadata.json")):
            _mlgo(["train", "--root_dir", bc_root, "--corpus", corpus,
                   "--gin_files", os.path.join(REPO_CONFIGS, "inlining", "bc.gin"), "--gin_bindings", *common])
        else:
            print("already trained", file=sys.stderr)
    return bc_root


def _search_then_imitate(args: argparse.Namespace, corpus: str, out: str, common: list[str],
                         timings: dict[str, float]) -> str:
    """Step 3: search, then imitate, for ``--minutes`` (resumed); returns its run's root."""
    search_root = os.path.join(out, "search")
    title = f"3/5 search, then imitate: {args.minutes:g} minutes of rounds, searches of {args.round_minutes:g}"
    with _step(title, timings, "search"):
        _mlgo(["train", "--root_dir", search_root, "--corpus", corpus,
               "--gin_files", os.path.join(REPO_CONFIGS, "inlining", "search.gin"),
               "--gin_bindings", *common, f"time_budget_minutes={args.minutes}",
               f"compiles_per_round={args.compiles_per_round}", f"round_search_minutes={args.round_minutes}",
               # two gate thresholds: each costs a compile of every validation module per round
               "search_loop.train_search.gate_thresholds=(0.5, 0.9)",
               *args.gin_bindings])
    return search_root


def _tune_heldout(args: argparse.Namespace, corpus: str, out: str, timings: dict[str, float]) -> str:
    """Step 4: tune on the held-out modules; returns the tune directory."""
    tuned = os.path.join(out, "tune")
    with _step(f"4/5 tune the held-out modules: {args.tune_minutes:g} minutes of batched search", timings, "tune"):
        held = heldout_names(corpus)
        tune_args = ["tune", "--corpus", corpus, "--output", tuned, "--budget-minutes", str(args.tune_minutes),
                     "--jobs", str(args.workers), "--modules"]
        _mlgo(tune_args + held, shown=tune_args + [f"<the {len(held)} held-out modules>"])
    return tuned


def _evaluate_heldout(args: argparse.Namespace, corpus: str, out: str, bc_root: str, search_root: str, tuned: str,
                      timings: dict[str, float]) -> dict:
    """Step 5: the held-out table of both runs' policies, the shipped one and tune's replays."""
    policies = {"behavioural cloning": os.path.join(bc_root, "saved_policy"),
                "search + imitate": os.path.join(search_root, "saved_policy")}
    with _step("5/5 held-out evaluation against clang -Oz", timings, "eval"):
        try:  # the shipped policy, split by file in training: it saw files of these held-out projects
            policies["pretrained-oz (saw them)"] = shipped_policy_dir("pretrained-oz")
        except MlgoHostError as e:
            print(f"demo: {e}", file=sys.stderr)
        return heldout_table(corpus, policies, out, jobs=args.workers, guard_row="search + imitate",
                             replays={"tune (searched there)": tuned})


def _gate_note(policy_dir: str) -> str:
    """What the search policy's gate says about its row (an empty line when it leaves the default)."""
    from mlgo_host.policies.saved import read_metadata

    gate = read_metadata(policy_dir).get("gate", {})
    if gate.get("threshold", 0.0) < 1.0:
        return ""
    rule = gate.get("rule", {})
    return (f"search + imitate: no gate made the validation project(s) {rule.get('min_gain_pct', 0):g} % smaller "
            f"than -Oz with no module {rule.get('max_module_growth_pct', 1):g} % bigger,\nso that policy keeps "
            "clang's own decisions (the gate: docs/training.md).\n")


def heldout_names(corpus: str) -> list[str]:
    """The modules of the training runs' held-out split."""
    from mlgo_host.corpus.corpus import load_corpus

    _, held = load_corpus(corpus).split(HELDOUT_FRACTION, 0)
    return [m.name for m in held if m.error is None]


def heldout_table(corpus: str, policies: dict[str, str], out: str, *, jobs: int, guard_row: str | None = None,
                  replays: dict[str, str] | None = None) -> dict:
    """Each policy (greedy) against -Oz on the training runs' held-out split; ``guard_row``: also that
    policy behind the guard; ``replays``: tune directories, each module compiled with its replay."""
    from mlgo_host.corpus.corpus import project_of
    from mlgo_host.evaluation.evaluate import EvalReport, apply_guard, evaluate

    rows = []
    projects = sorted({project_of(n) for n in heldout_names(corpus)})
    runs = [(label, path, None) for label, path in policies.items()]
    runs += [(label, "default", t) for label, t in (replays or {}).items()]
    for label, path, replay in runs:
        rep = evaluate(corpus, path, split="heldout", heldout_fraction=HELDOUT_FRACTION, jobs=jobs, seed=0,
                       replay_dir=replay)
        slug = label.lower().replace(" ", "_")
        rep.write_csv(os.path.join(out, f"heldout_{slug}.csv"))
        rows.append(_table_row(label, path, rep))
        if label == guard_row:  # the same compiles, kept as eval --guard keeps them
            guarded = EvalReport(policy=rep.policy, rows=[apply_guard(r) for r in rep.rows], guard=True)
            rows.append(_table_row(f"{label} + guard", path, guarded, worst=False))
    return {"corpus": corpus, "heldout_fraction": HELDOUT_FRACTION, "projects": projects, "rows": rows}


def _table_row(label: str, path: str, rep, worst: bool = True) -> dict:
    ok = [r for r in rep.rows if r.ok]
    w = max(ok, key=lambda r: (r.policy_text - r.baseline_text) / max(r.baseline_text, 1), default=None)
    return {"policy": label, "path": path, **rep.summary().as_dict(),
            "worst_module": None if w is None or not worst else {
                "module": w.module, "baseline": w.baseline_text, "policy": w.policy_text,
                "change_percent": 100.0 * (w.policy_text - w.baseline_text) / max(w.baseline_text, 1)}}


def format_table(table: dict) -> str:
    rows = table["rows"]
    if not rows:
        return "no evaluation"
    base = rows[0]
    lines = [f"Held-out projects: {', '.join(table.get('projects', []))}; modules: {base['ok']} ok of "
             f"{base['modules']}; clang -Oz total .text {base['baseline_total']:,} bytes",
             f"{'policy':<26}{'total .text':>13}{'vs -Oz':>10}{'smaller':>9}{'equal':>7}{'bigger':>8}"
             f"{'mean reward':>13}  worst module",
             f"{'clang -Oz (default)':<26}{base['baseline_total']:>13,}{'+0.000%':>10}{'':>9}{'':>7}{'':>8}"
             f"{'0':>13}"]
    for r in rows:
        ch = r["change_percent"]
        w = r["worst_module"]
        worst = "" if w is None or w["change_percent"] <= 0 else f"{w['module']} {w['change_percent']:+.2f}%"
        lines.append(f"{r['policy']:<26}{r['policy_total']:>13,}{(f'{ch:+.3f}%' if ch is not None else 'n/a'):>10}"
                     f"{r['smaller']:>9}{r['equal']:>7}{r['bigger']:>8}{r['mean_reward']:>+13.5f}  {worst}")
    return "\n".join(lines)


def _main() -> int:
    try:
        return main()
    except MlgoHostError as e:  # e.g. a --corpus too small to have held-out modules
        print(f"demo: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_main())
