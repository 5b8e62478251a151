"""What the guard of served builds costs and gains: a `make -j2` build through
`mlgo-host serve --policy P` (2 slots) without and with `--guard`, against the
same build with plain clang-19 (-Oz's objects).

Sources: as bench/serve.py (the benchmark corpus's C/C++ files when their
sdists are extracted in the benchmark cache, else generated C modules).
Prints and writes bench/results/guard.json: per build the wall and CPU
seconds, the total .text, the modules bigger / smaller than plain, and what
the guard kept (from the stats lines).

usage: .venv/bin/python bench/guard.py --policy DIR|never|always [--repeat 1] [--max-files 60] [--generated]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from serve import BIN, build_entries, make, write_makefile  # noqa: E402

from mlgo_host.fsutil import atomic_write_json  # noqa: E402
from mlgo_host.measure.sizes import text_size  # noqa: E402
from mlgo_host.serve.stats import aggregate  # noqa: E402


def sizes(objs: list[str]) -> list[int]:
    return [text_size(o) for o in objs]


def start_server(work: str, name: str, policy: str, slots: int, guard: bool, env: dict):
    ch, stats = os.path.join(work, f"ch-{name}"), os.path.join(work, f"stats-{name}.jsonl")
    log = open(os.path.join(work, f"server-{name}.log"), "wb")
    srv = subprocess.Popen([sys.executable, "-m", "mlgo_host", "serve", "--channels", ch, "--slots", str(slots),
                            "--policy", policy, "--stats", stats] + (["--guard"] if guard else []),
                           stdout=log, stderr=log, env=env)
    end = time.monotonic() + 60
    while not os.path.exists(os.path.join(ch, "server.json")):
        if srv.poll() is not None or time.monotonic() > end:
            raise SystemExit("server did not start: " + open(log.name).read())
        time.sleep(0.05)
    return srv, ch, stats


def stop(srv) -> int:
    srv.send_signal(signal.SIGTERM)
    return srv.wait(timeout=120)


def compare(got: list[int], plain: list[int]) -> dict:
    return {"text_total": sum(got), "vs_plain_percent": round(100.0 * (sum(got) - sum(plain)) / sum(plain), 3),
            "bigger": sum(g > p for g, p in zip(got, plain)), "smaller": sum(g < p for g, p in zip(got, plain)),
            "max_growth_percent": round(max(100.0 * (g - p) / p for g, p in zip(got, plain) if p), 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", required=True)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--generated", action="store_true", help="use generated C files even if the corpus exists")
    ap.add_argument("--max-files", type=int, default=60, help="at most this many benchmark sources")
    ap.add_argument("--output", default=os.path.join(HERE, "results", "guard.json"))
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="mlgo-bench-guard-")
    servers = []
    try:
        entries, kind = build_entries(work, args.generated, False, args.max_files)
        out_dir = os.path.join(work, "build")
        os.makedirs(out_dir)
        objs = write_makefile(entries, out_dir)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLGO_")}
        mlgo_cc, mlgo_cxx = os.path.join(BIN, "mlgo-clang"), os.path.join(BIN, "mlgo-clang++")

        make(out_dir, args.jobs, "clang-19", "clang++-19", env)  # warms the page cache
        plain_sizes = sizes(objs)
        runs: dict[str, list] = {"plain": [], "served": [], "guarded": []}
        got: dict[str, list[int]] = {}
        for name, guard in (("served", False), ("guarded", True)):
            srv, ch, stats = start_server(work, name, args.policy, args.slots, guard, env)
            servers.append(srv)
            for _ in range(args.repeat):
                last_build_start = time.time() - 1
                runs["plain"].append(make(out_dir, args.jobs, "clang-19", "clang++-19", env))
                runs[name].append(make(out_dir, args.jobs, mlgo_cc, mlgo_cxx, dict(env, MLGO_CHANNELS=ch,
                                                                                     MLGO_FALLBACK="fail"), srv.pid))
                got[name] = sizes(objs)
            stop(srv)
            servers.remove(srv)
            with open(stats) as f:
                recs = [json.loads(line) for line in f]
            if guard:  # the last build's records (one per output)
                kept = aggregate(r for r in recs if r["time"] >= last_build_start)[0]["guard"]
        fig = {}
        for name, rs in runs.items():
            walls, cpus = sorted(w for w, _ in rs), sorted(c for _, c in rs)
            fig[name] = {"wall_median_s": round(walls[len(walls) // 2], 3),
                         "cpu_median_s": round(cpus[len(cpus) // 2], 3)}
        res = {
            "sources": kind, "files": len(entries), "jobs": args.jobs, "slots": args.slots, "repeat": args.repeat,
            # (a heuristic's name, or the policy directory's last two parts: no path of this machine)
            "policy": args.policy if os.sep not in args.policy else os.path.join(*args.policy.rstrip("/").split("/")[-2:]),
            "cpus": os.cpu_count(),
            "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
            "builds": fig, "plain_text_total": sum(plain_sizes),
            "served": compare(got["served"], plain_sizes), "guarded": compare(got["guarded"], plain_sizes),
            "guard_kept": kept,
            "guard_cost": {k: round(fig["guarded"][k] / fig["served"][k], 3) for k in ("wall_median_s", "cpu_median_s")},
        }
        print(json.dumps(res, indent=1))
        atomic_write_json(args.output, res)
        return 0 if res["guarded"]["bigger"] == 0 else 1
    finally:
        for srv in servers:
            if srv.poll() is None:
                srv.kill()
                srv.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
