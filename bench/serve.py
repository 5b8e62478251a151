"""Wall time of a `make -j2` build through `mlgo-host serve` + `mlgo-clang`
(policy default, 2 slots) against the same build with plain clang-19, and
with `mlgo-clang` alone (no server: the wrapper's own cost).

Sources: the benchmark corpus's C/C++ files when their sdists are already
extracted in the benchmark cache (`mlgo-host corpus benchmark`, or --fetch
here), else ~40 generated C modules.  Prints the figures and writes
bench/results/serve.json.  The served objects are checked byte-identical to
the plain ones.

usage: .venv/bin/python bench/serve.py [--repeat 3] [--jobs 2] [--generated] [--fetch] [--max-files 60]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)


def generated_entries(d: str, n: int = 40) -> list[dict]:
    rng = random.Random(7)
    entries = []
    for m in range(n):
        lines = []
        nf = rng.randint(15, 40)
        for i in range(nf):
            body = [f"static int f{i}(int x, const int *p) {{", "  int s = x;"]
            for j in range(rng.choice((1, 2, 3, 6))):
                body.append(f"  if (s & {1 << rng.randint(0, 7)}) s = s * {rng.randint(3, 99)} + p[{j % 4}];"
                            f" else s ^= {rng.randint(1, 999)};")
            if rng.random() < 0.3:
                body.append(f"  for (int j = 0; j < (x & 3); j++) s += p[j] * {rng.randint(2, 9)};")
            body.append("  return s;\n}")
            lines.append("\n".join(body))
        lines.append(f"int entry_{m}(int a, const int *p) {{\n  int t = 0;")
        for i in range(nf):
            for _ in range(rng.choice((1, 1, 2, 3))):
                lines.append(f"  t += f{i}(a + {rng.randint(0, 99)}, p);")
        lines.append("  return t;\n}\n")
        src = os.path.join(d, f"gen{m:02d}.c")
        with open(src, "w") as f:
            f.write("\n".join(lines))
        entries.append({"directory": d, "file": src, "arguments": ["clang-19", "-Oz", "-c", src, "-o", "x.o"]})
    return entries


def benchmark_entries(fetch: bool) -> list[dict] | None:
    """Compile entries of the benchmark corpus sources, if extracted (or
    fetched with --fetch). None when not available."""
    try:
        from mlgo_host.corpus import benchmark as B
    except ImportError:
        return None
    spec = B.load_spec()
    cache = B.default_cache_dir()
    entries = []
    for pkg in spec.packages:
        archive = cache / "sdists" / pkg.filename
        if fetch:
            archive = B.fetch(pkg, cache)
        elif not archive.exists():
            continue  # not downloaded: no network use unless --fetch
        top = B.extract(archive, cache / "src")  # no-op when already extracted
        entries += B.compile_entries(pkg, top, "clang-19", spec.opt_level)
    return entries or None


def build_entries(work: str, generated: bool, fetch: bool, max_files: int) -> tuple[list[dict], str]:
    """(compile entries, what they are): at most ``max_files`` benchmark
    corpus sources spread over the packages, else generated C modules in
    ``work``/src."""
    entries = None if generated else benchmark_entries(fetch)
    if entries is None:
        gen = os.path.join(work, "src")
        os.makedirs(gen)
        return generated_entries(gen), "generated C modules"
    if len(entries) > max_files:  # an even spread over the packages
        step = len(entries) / max_files
        entries = [entries[int(i * step)] for i in range(max_files)]
    return entries, "benchmark corpus sources"


def write_makefile(entries: list[dict], out_dir: str) -> list[str]:
    rules, objs = [], []
    for i, e in enumerate(entries):
        args = list(e["arguments"])
        src = e["file"]
        is_cxx = os.path.splitext(src)[1] in (".cc", ".cpp", ".cxx", ".C")
        flags = []
        skip = False
        for j, a in enumerate(args[1:], 1):
            if skip:
                skip = False
                continue
            if a == "-o":
                skip = True
                continue
            if a in ("-c", src):
                continue
            flags.append(a)
        obj = os.path.join(out_dir, f"o{i:03d}.o")
        objs.append(obj)
        cc = "$(CXX)" if is_cxx else "$(CC)"
        rules.append(f"{obj}:\n\tcd {shlex.quote(e['directory'])} && {cc} {' '.join(shlex.quote(f) for f in flags)} "
                     f"-c {shlex.quote(src)} -o {obj}\n")
    with open(os.path.join(out_dir, "Makefile"), "w") as f:
        f.write("all: " + " ".join(objs) + "\n" + "".join(rules))
    return objs


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def make(out_dir: str, jobs: int, cc: str, cxx: str, env: dict, server_pid: int | None = None) -> tuple[float, float]:
    """(wall s, CPU s of the build: make, wrappers, compilers, + the server)."""
    for f in os.listdir(out_dir):
        if f.endswith(".o"):
            os.unlink(os.path.join(out_dir, f))
    cpu0 = _children_cpu() + (proc_cpu(server_pid) if server_pid else 0.0)
    t = time.monotonic()
    r = subprocess.run(["make", "-s", f"-j{jobs}", "-C", out_dir, f"CC={cc}", f"CXX={cxx}"], env=env,
                       capture_output=True, text=True)
    wall = time.monotonic() - t
    if server_pid:
        time.sleep(0.3)  # the recorder's llvm-size of the last objects
    cpu = _children_cpu() + (proc_cpu(server_pid) if server_pid else 0.0) - cpu0
    if r.returncode != 0:
        raise SystemExit(f"build failed ({cc}):\n{r.stderr[-2000:]}")
    return wall, cpu


def read_objs(objs: list[str]) -> list[bytes]:
    out = []
    for o in objs:
        with open(o, "rb") as f:
            out.append(f.read())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--pin", action="store_true", help="serve --pin (slot thread + compiler on one CPU)")
    ap.add_argument("--generated", action="store_true", help="use generated C files even if the corpus exists")
    ap.add_argument("--fetch", action="store_true", help="download + extract the benchmark sdists first (pip)")
    ap.add_argument("--max-files", type=int, default=60, help="at most this many benchmark sources")
    ap.add_argument("--output", default=os.path.join(HERE, "results", "serve.json"))
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="mlgo-bench-serve-")
    srv = None
    try:
        entries, kind = build_entries(work, args.generated, args.fetch, args.max_files)
        out_dir = os.path.join(work, "build")
        os.makedirs(out_dir)
        objs = write_makefile(entries, out_dir)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLGO_")}
        mlgo_cc, mlgo_cxx = os.path.join(BIN, "mlgo-clang"), os.path.join(BIN, "mlgo-clang++")

        # plain reference (also warms the page cache)
        make(out_dir, args.jobs, "clang-19", "clang++-19", env)
        plain_objs = read_objs(objs)

        ch = os.path.join(work, "ch")
        stats = os.path.join(work, "stats.jsonl")
        log = open(os.path.join(work, "server.log"), "wb")
        srv = subprocess.Popen([sys.executable, "-m", "mlgo_host", "serve", "--channels", ch, "--slots",
                                str(args.slots), "--policy", "default", "--stats", stats] + (["--pin"] if args.pin else []), stdout=log, stderr=log,
                               env=env)
        end = time.monotonic() + 60
        while not os.path.exists(os.path.join(ch, "server.json")):
            if srv.poll() is not None or time.monotonic() > end:
                raise SystemExit("server did not start: " + open(log.name).read())
            time.sleep(0.05)
        served_env = dict(env, MLGO_CHANNELS=ch, MLGO_FALLBACK="fail")

        runs: dict[str, list[tuple[float, float]]] = {"plain": [], "served": [], "wrapper_only": []}
        identical = True
        for _ in range(args.repeat):
            runs["plain"].append(make(out_dir, args.jobs, "clang-19", "clang++-19", env))
            runs["served"].append(make(out_dir, args.jobs, mlgo_cc, mlgo_cxx, served_env, srv.pid))
            identical &= read_objs(objs) == plain_objs
            runs["wrapper_only"].append(make(out_dir, args.jobs, mlgo_cc, mlgo_cxx, env))
        srv.send_signal(signal.SIGTERM)
        rc = srv.wait(timeout=120)
        srv = None
        with open(stats) as f:
            recs = [json.loads(line) for line in f]
        ok = sum(r["status"] == "ok" for r in recs)
        decisions = sum(r["observations"] for r in recs) // max(args.repeat, 1)
        fig: dict = {}
        for name, rs in runs.items():
            walls, cpus = [w for w, _ in rs], [c for _, c in rs]
            fig[name] = {"wall_median_s": round(statistics.median(walls), 3), "wall_min_s": round(min(walls), 3),
                         "cpu_median_s": round(statistics.median(cpus), 3),
                         "wall_s": [round(w, 3) for w in walls], "cpu_s": [round(c, 3) for c in cpus]}
        ratio = {f"{name}_vs_plain": {k: round(fig[name][k] / fig["plain"][k], 3)
                                      for k in ("wall_median_s", "wall_min_s", "cpu_median_s")}
                 for name in ("served", "wrapper_only")}
        res = {
            "sources": kind, "files": len(entries), "jobs": args.jobs, "slots": args.slots, "repeat": args.repeat,
            "pin": args.pin, "cpus": os.cpu_count(), "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
            "builds": fig, "ratios": ratio,
            "decisions_per_build": decisions, "compiles_recorded": len(recs), "compiles_ok": ok,
            "objects_identical_to_plain": bool(identical), "server_exit": rc,
        }
        print(f"{res['files']} {kind}, make -j{args.jobs}, {args.slots} slots, {args.repeat} runs each "
              f"(load average at the end {res['loadavg_at_end'][0]}):")
        print(f"  {'':24} {'wall median':>11} {'wall min':>9} {'CPU median':>11}")
        for name, label in (("plain", "plain clang-19"), ("wrapper_only", "mlgo-clang, no server"),
                            ("served", "mlgo-clang + serve")):
            f_ = fig[name]
            line = f"  {label:24} {f_['wall_median_s']:>10.2f}s {f_['wall_min_s']:>8.2f}s {f_['cpu_median_s']:>10.2f}s"
            if name != "plain":
                r_ = ratio[f"{name}_vs_plain"]
                line += f"   ({r_['wall_median_s']:.2f}x / {r_['wall_min_s']:.2f}x / {r_['cpu_median_s']:.2f}x)"
            print(line)
        print(f"  {decisions} decisions per build, {ok}/{len(recs)} served compiles ok, "
              f"objects identical to plain: {identical}")
        os.makedirs(os.path.dirname(args.output), exist_ok=True)
        tmp = args.output + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
        os.replace(tmp, args.output)
        return 0 if identical and rc == 0 and ok == len(recs) else 1
    finally:
        if srv is not None and srv.poll() is None:
            srv.kill()
            srv.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
