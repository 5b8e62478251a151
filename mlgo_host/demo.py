"""``make demo``: the main job end to end on the benchmark corpus.

1. build the benchmark corpus (pinned PyPI sdists, C and C++; cached),
2. behavioural cloning warm start (configs/inlining/bc.gin: trace the
   default heuristic over the training split, quantile vocab, cloning),
3. a short PPO run from it (configs/inlining/ppo.gin) through the real
   compiler's interactive channel,
4. the held-out evaluation table against clang's own -Oz, a plot of the
   held-out size change per iteration, and where to point TensorBoard.

Every step keeps its output under ``--output`` and is skipped (or resumed,
for PPO) when the command runs again.

    python -m mlgo_host.demo --output demo_out [--iterations N] [--modules-per-iteration N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from mlgo_host.errors import MlgoHostError

REPO_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


def _step(title: str) -> None:
    print(f"\n== {title}", file=sys.stderr, flush=True)


def _mlgo(args: list[str]) -> None:
    cmd = [sys.executable, "-m", "mlgo_host", *args]
    print("$ mlgo-host " + " ".join(args), file=sys.stderr, flush=True)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    rc = subprocess.run(cmd, env=env).returncode
    if rc != 0:
        raise SystemExit(f"demo: step failed (exit {rc}): mlgo-host {' '.join(args)}")


def _configs() -> str:
    if not os.path.isdir(REPO_CONFIGS):
        raise SystemExit("demo: configs/ not found next to the package (run from a checkout: make demo)")
    return REPO_CONFIGS


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mlgo_host.demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", default="demo_out", help="where everything goes (default: demo_out)")
    p.add_argument("--corpus", default=None,
                   help="use this corpus instead of building the benchmark corpus into OUTPUT/corpus")
    p.add_argument("--iterations", type=int, default=12, help="PPO iterations (default: 12)")
    p.add_argument("--modules-per-iteration", type=int, default=32, help="modules per PPO iteration (default: 32)")
    p.add_argument("--eval-every", type=int, default=4, help="held-out evaluation every N iterations (default: 4)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2,
                   help="collection worker processes (default: the number of CPUs)")
    p.add_argument("--gin_bindings", nargs="+", action="extend", default=[], metavar="BINDING",
                   help="extra gin bindings for the PPO run")
    args = p.parse_args(argv)

    t0 = time.monotonic()
    out = os.path.abspath(args.output)
    os.makedirs(out, exist_ok=True)
    configs = _configs()
    timings: dict[str, float] = {}

    corpus = args.corpus or os.path.join(out, "corpus")
    _step(f"1/4 corpus: {corpus}")
    t = time.monotonic()
    if not os.path.exists(os.path.join(corpus, "corpus_description.json")):
        if args.corpus:
            raise SystemExit(f"demo: {corpus} is not a corpus (no corpus_description.json)")
        _mlgo(["corpus", "benchmark", "--output", corpus, "--jobs", str(args.workers)])
    else:
        print("already built", file=sys.stderr)
    timings["corpus"] = time.monotonic() - t

    common = [f"num_workers={args.workers}"]
    bc_root = os.path.join(out, "bc")
    _step("2/4 behavioural cloning warm start (trace the default heuristic, vocab, cloning)")
    t = time.monotonic()
    if not os.path.exists(os.path.join(bc_root, "saved_policy", "metadata.json")):
        _mlgo(["train", "--root_dir", bc_root, "--corpus", corpus,
               "--gin_files", os.path.join(configs, "inlining", "bc.gin"), "--gin_bindings", *common])
    else:
        print("already trained", file=sys.stderr)
    timings["bc"] = time.monotonic() - t

    ppo_root = os.path.join(out, "ppo")
    _step(f"3/4 PPO: {args.iterations} iterations x {args.modules_per_iteration} modules, from the BC policy")
    t = time.monotonic()
    _mlgo(["train", "--root_dir", ppo_root, "--corpus", corpus,
           "--gin_files", os.path.join(configs, "inlining", "ppo.gin"),
           "--gin_bindings", *common, f"num_iterations={args.iterations}",
           f"modules_per_iteration={args.modules_per_iteration}", f"eval_every={args.eval_every}",
           f"warmstart_policy='{os.path.join(bc_root, 'saved_policy')}'", *args.gin_bindings])
    timings["ppo"] = time.monotonic() - t

    _step("4/4 held-out evaluation against clang -Oz")
    t = time.monotonic()
    table = heldout_table(corpus, {"behavioural cloning": os.path.join(bc_root, "saved_policy"),
                                   "PPO": os.path.join(ppo_root, "saved_policy")},
                          out, jobs=args.workers)
    timings["eval"] = time.monotonic() - t
    from mlgo_host.trainers.plots import plot_training

    curve = plot_training(os.path.join(ppo_root, "state.json"), os.path.join(out, "ppo_heldout.png"))
    timings["total"] = time.monotonic() - t0
    with open(os.path.join(out, "demo_result.json"), "w") as f:
        json.dump({"table": table, "timings_s": {k: round(v, 1) for k, v in timings.items()}}, f, indent=1)
    print(format_table(table))
    print()
    print("minutes: " + ", ".join(f"{k} {v / 60:.1f}" for k, v in timings.items()))
    print(f"per-module CSVs: {out}/heldout_*.csv; held-out curve: {curve or '(no evaluation yet)'}")
    print(f"TensorBoard:     tensorboard --logdir {ppo_root}   (then open http://localhost:6006)")
    return 0


def heldout_table(corpus: str, policies: dict[str, str], out: str, *, jobs: int,
                  heldout_fraction: float = 0.2, seed: int = 0) -> dict:
    """Evaluate each policy (greedy) on the training runs' held-out split
    against the default heuristic (-Oz)."""
    from mlgo_host.trainers.evaluation import evaluate

    rows = []
    for label, path in policies.items():
        rep = evaluate(corpus, path, split="heldout", heldout_fraction=heldout_fraction, jobs=jobs, seed=seed)
        slug = label.lower().replace(" ", "_")
        rep.write_csv(os.path.join(out, f"heldout_{slug}.csv"))
        s = rep.summary()
        ok = [r for r in rep.rows if r.ok]
        worst = max(ok, key=lambda r: (r.policy_text - r.baseline_text) / max(r.baseline_text, 1), default=None)
        rows.append({"policy": label, "path": path, **s.as_dict(),
                     "worst_module": None if worst is None else {
                         "module": worst.module, "baseline": worst.baseline_text, "policy": worst.policy_text,
                         "change_percent": 100.0 * (worst.policy_text - worst.baseline_text)
                         / max(worst.baseline_text, 1)}})
    return {"corpus": corpus, "heldout_fraction": heldout_fraction, "rows": rows}


def format_table(table: dict) -> str:
    rows = table["rows"]
    if not rows:
        return "no evaluation"
    base = rows[0]
    lines = [f"Held-out modules: {base['ok']} ok of {base['modules']}; "
             f"clang -Oz total .text {base['baseline_total']:,} bytes",
             f"{'policy':<22}{'total .text':>13}{'vs -Oz':>10}{'smaller':>9}{'equal':>7}{'bigger':>8}"
             f"{'mean reward':>13}  worst module",
             f"{'clang -Oz (default)':<22}{base['baseline_total']:>13,}{'+0.000%':>10}{'':>9}{'':>7}{'':>8}"
             f"{'0':>13}"]
    for r in rows:
        ch = r["change_percent"]
        w = r["worst_module"]
        worst = "" if w is None else f"{w['module']} {w['change_percent']:+.2f}%"
        lines.append(f"{r['policy']:<22}{r['policy_total']:>13,}{(f'{ch:+.3f}%' if ch is not None else 'n/a'):>10}"
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
