"""Channel benchmark: what a host costs per inliner decision and per compile.

On two generated modules (~600 and ~2,500 inliner decisions) it runs, side by
side in one run and alternating, several repetitions of: the plain compile
(``clang-19 -Oz -c``), the minimal reference host (``bench/ref_host.py``)
and ``mlgo-host run --policy default``, each unpinned and pinned to one CPU
(host and compiler on the same CPU). Each run is a child process reaped with
``os.wait4``: its CPU (host + compiler) minus the compiler's CPU (which both
hosts report from their own ``wait4``) is the host's CPU. A fixed cost and a
per-decision cost are fitted from the two sizes (medians), for the host's CPU
and for the wall-time overhead over the plain compile; the per-decision host
CPU is also fitted within each repetition (the two sizes run minutes apart at
most), and the median and range of those fits are reported: on a shared
machine the spread says how much to trust a figure. Both hosts also report
the CPU of their serving loop alone (``serve_cpu_s``: first byte to end of
stream, no start-up): "in-loop µs/dec" is that over the decisions of the
larger module (median of the repetitions), the per-decision cost without the
noise of a fixed cost.

Python bytecode: when the environment sets PYTHONDONTWRITEBYTECODE (as this
project's machines do), every start would recompile mlgo_host's sources (~30
ms of CPU), which an installed package never does; the hosts therefore run
with bytecode cached in a private PYTHONPYCACHEPREFIX (filled by the warm-up
runs), unless --no-pycache.

--c-floor adds a C version of the reference host's loop: the kernel's share
of the ping-pong (read, write, sleep and wake-up), a floor for any host.

usage: python bench/channel.py [--reps N] [--cpu CPU] [--no-pycache] [--c-floor] [--out FILE]
Prints a table and writes bench/results/channel.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from mlgo_host.corpus import synth  # noqa: E402

CLANG = "clang-19"
SIZES = {"600": 330, "2500": 1300}  # decisions (approx.) -> generated functions

# --c-floor: the reference host's loop in C (same protocol handling, no
# interpreter), built with clang-19 into the work directory. What is left of
# its per-decision CPU is the kernel's share of the ping-pong (one read, one
# write, one sleep and wake-up per decision): the floor for any host.
C_FLOOR = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
extern char **environ;
static char buf[1 << 22];
static long tsize(const char *t) {
  if (!strncmp(t, "double\"", 7) || strstr(t, "int64_t\"") == t || strstr(t, "uint64_t\"") == t) return 8;
  if (!strncmp(t, "float\"", 6) || strstr(t, "int32_t\"") == t || strstr(t, "uint32_t\"") == t) return 4;
  if (strstr(t, "int16_t\"") == t || strstr(t, "uint16_t\"") == t) return 2;
  return 1;
}
static double tcpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
int main(int argc, char **argv) {  /* cfloor DIR PIN(-1: none) COMPILER ARGS... */
  char in[4096], out[4096], flag[4200];
  int pin = atoi(argv[2]);
  if (pin >= 0) { cpu_set_t s; CPU_ZERO(&s); CPU_SET(pin, &s); sched_setaffinity(0, sizeof s, &s); }
  snprintf(in, sizeof in, "%s/ch.in", argv[1]);
  snprintf(out, sizeof out, "%s/ch.out", argv[1]);
  snprintf(flag, sizeof flag, "-inliner-interactive-channel-base=%s/ch", argv[1]);
  unlink(in); unlink(out);
  if (mkfifo(in, 0600) || mkfifo(out, 0600)) { perror("mkfifo"); return 2; }
  char **cmd = calloc(argc + 8, sizeof *cmd);
  int n = 0;
  for (int i = 3; i < argc; i++) cmd[n++] = argv[i];
  char *fl[] = {"-mllvm", "-enable-ml-inliner=release", "-mllvm", "-inliner-interactive-include-default",
                "-mllvm", flag};
  for (int i = 0; i < 6; i++) cmd[n++] = fl[i];
  pid_t pid;
  if (posix_spawnp(&pid, cmd[0], NULL, NULL, cmd, environ)) { perror("spawn"); return 2; }
  int wfd = open(in, O_WRONLY), rfd = open(out, O_RDONLY);
  long len = 0, nbytes = 0, off = -1, n_obs = 0;
  char *nl;
  while (!(nl = memchr(buf, '\n', len))) {
    ssize_t k = read(rfd, buf + len, sizeof buf - len);
    if (k <= 0) return 2;
    len += k;
  }
  *nl = 0;
  char *adv = strstr(buf, "\"advice\""), *p = buf;
  while ((p = strstr(p, "{\"name\":\"")) && (!adv || p < adv)) {
    char *name = p + 9, *t = strstr(p, "\"type\":\"") + 8, *sh = strstr(p, "\"shape\":[") + 9;
    long cnt = 1;
    while (*sh != ']') { cnt *= strtol(sh, &sh, 10); if (*sh == ',') sh++; }
    if (!strncmp(name, "callee_basic_block_count\"", 25)) off = nbytes;
    nbytes += cnt * tsize(t);
    p = sh;
  }
  long used = nl - buf + 1;
  memmove(buf, buf + used, len - used);
  len -= used;
  char yes[8] = {1}, no[8] = {0};
  double c0 = tcpu();
  for (;;) {
    nl = memchr(buf, '\n', len);
    if (!nl || (buf[2] == 'o' && len < (nl - buf) + 2 + nbytes)) {
      ssize_t k = read(rfd, buf + len, sizeof buf - len);
      if (k <= 0) break;
      len += k;
      continue;
    }
    if (buf[2] == 'o') {
      if (write(wfd, memcmp(nl + 1 + off, no, 8) ? yes : no, 8) != 8) return 2;
      n_obs++;
      used = (nl - buf) + 2 + nbytes;
    } else {
      used = nl - buf + 1;
    }
    memmove(buf, buf + used, len - used);
    len -= used;
  }
  double loop = tcpu() - c0;
  close(wfd); close(rfd);
  int status; struct rusage ru;
  wait4(pid, &status, 0, &ru);
  unlink(in); unlink(out);
  printf("{\"observations\": %ld, \"returncode\": %d, \"compiler_cpu_s\": %.6f, \"serve_cpu_s\": %.6f}\n", n_obs,
         WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
         ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6, loop);
  return off < 0 ? 3 : WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}
"""


def run_one(argv, env=None):
    t0 = time.perf_counter()
    pid = os.posix_spawnp(argv[0], argv, env or os.environ,
                          file_actions=[(os.POSIX_SPAWN_OPEN, 1, OUTFILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
                                        (os.POSIX_SPAWN_OPEN, 2, ERRFILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)])
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    with open(OUTFILE) as f:
        out = f.read()
    if rc != 0:
        with open(ERRFILE) as f:
            raise SystemExit(f"{argv[:4]}... failed ({rc}): {f.read()[-500:]}")
    return wall, ru.ru_utime + ru.ru_stime, out


def fit(n1, y1, n2, y2):
    per = (y2 - y1) / (n2 - n1)
    return y1 - per * n1, per


def main() -> int:
    global OUTFILE, ERRFILE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=7, help="repetitions of every variant and size, alternating")
    ap.add_argument("--cpu", type=int, default=None, help="CPU for the pinned variants (default: the last one)")
    ap.add_argument("--no-pycache", action="store_true",
                    help="run the hosts with the environment's bytecode settings as they are")
    ap.add_argument("--c-floor", action="store_true",
                    help="also run a C version of the reference host (built with clang-19): the kernel's share")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "channel.json"))
    args = ap.parse_args()
    load_start = os.getloadavg()
    cpu = args.cpu if args.cpu is not None else max(os.sched_getaffinity(0))
    work = tempfile.mkdtemp(prefix="mlgo-bench-")
    OUTFILE, ERRFILE = os.path.join(work, "stdout"), os.path.join(work, "stderr")
    py = sys.executable
    env = dict(os.environ)
    bytecode = "as the environment says"
    if not args.no_pycache and env.get("PYTHONDONTWRITEBYTECODE"):
        env.pop("PYTHONDONTWRITEBYTECODE")
        env["PYTHONPYCACHEPREFIX"] = os.path.join(work, "pycache")
        bytecode = "cached in a private PYTHONPYCACHEPREFIX (the environment sets PYTHONDONTWRITEBYTECODE)"
    try:
        srcs = {}
        for k, nf in SIZES.items():
            srcs[k] = os.path.join(work, f"m{k}.c")
            with open(srcs[k], "w") as f:
                f.write(synth.inline_module(nf, seed=7))

        cfloor = os.path.join(work, "cfloor")
        if args.c_floor:
            with open(cfloor + ".c", "w") as f:
                f.write(C_FLOOR)
            subprocess.run([CLANG, "-O2", "-o", cfloor, cfloor + ".c"], check=True)
            os.mkdir(cfloor + ".d")

        def argv(variant, k):
            out = os.path.join(work, f"{variant}-{k}.o")
            comp = [CLANG, "-Oz", "-c", srcs[k], "-o", out]
            if variant == "plain":
                return comp
            if variant.startswith("c-floor"):
                return [cfloor, cfloor + ".d", str(cpu if variant.endswith("pinned") else -1)] + comp
            if variant.startswith("ref"):
                pin = ["--pin", str(cpu)] if variant.endswith("pinned") else []
                return [py, os.path.join(HERE, "ref_host.py")] + pin + ["--"] + comp
            pin = [f"--pin={cpu}"] if variant.endswith("pinned") else []
            return [py, "-m", "mlgo_host", "run", "--policy", "default"] + pin + ["--"] + comp

        variants = ["plain", "ref", "ours", "ref-pinned", "ours-pinned"]
        if args.c_floor:
            variants += ["c-floor", "c-floor-pinned"]
        # warm-up (page cache, the default-slot cache) + byte identity
        for k in SIZES:
            for v in variants:
                run_one(argv(v, k), env)
            base = open(os.path.join(work, f"plain-{k}.o"), "rb").read()
            for v in variants[1:]:
                assert open(os.path.join(work, f"{v}-{k}.o"), "rb").read() == base, f"{v} object differs from plain"
        data = {v: {k: [] for k in SIZES} for v in variants}
        decisions = {}
        for rep in range(args.reps):
            order = variants[rep % len(variants):] + variants[: rep % len(variants)]
            for k in SIZES:
                for v in order:
                    wall, cpu_s, out = run_one(argv(v, k), env)
                    serve = 0.0
                    if v == "plain":
                        comp = cpu_s
                    else:
                        j = json.loads(out.strip().splitlines()[-1])
                        comp = j["compiler_cpu_s"]
                        serve = j["serve_cpu_s"]
                        decisions[k] = j["observations"]
                    data[v][k].append({"wall": wall, "cpu": cpu_s, "compiler_cpu": comp, "host_cpu": cpu_s - comp,
                                       "serve_cpu": serve})
            print(f"rep {rep + 1}/{args.reps} done", file=sys.stderr)

        # no TensorFlow on the `run` path
        r = subprocess.run([py, "-X", "importtime", "-m", "mlgo_host", "run", "--", CLANG, "-Oz", "-c", srcs["600"],
                            "-o", os.path.join(work, "imp.o")], capture_output=True, text=True, env=env)
        imports_tf = "tensorflow" in r.stderr
        imports_np = "numpy" in r.stderr

        med = {v: {k: {m: statistics.median(x[m] for x in data[v][k]) for m in data[v][k][0]} for k in SIZES}
               for v in variants}
        (k1, k2), (n1, n2) = list(SIZES), (decisions["600"], decisions["2500"])
        load = os.getloadavg()
        res = {"decisions": decisions, "reps": args.reps, "pinned_cpu": cpu, "imports_tensorflow": imports_tf,
               "imports_numpy": imports_np, "bytecode": bytecode, "c_floor": args.c_floor,
               "loadavg_at_start": load_start, "loadavg_at_end": load, "cpus": os.cpu_count(),
               "median": med, "hosts": {}, "runs": data}
        print(f"\nchannel benchmark: {n1} and {n2} inliner decisions, {args.reps} reps, medians"
              f" (pinned = host and compiler on CPU {cpu}); Python bytecode {bytecode}")
        busy = max(load_start[0], load[0]) > 1.5
        print(f"load average at the start / end: {load_start[0]:.1f} / {load[0]:.1f} on {os.cpu_count()} CPUs"
              + ("  (machine busy: figures are noisy, compare rows, not runs)" if busy else ""))
        print(f"plain compile: {med['plain'][k1]['wall']:.3f} s / {med['plain'][k2]['wall']:.3f} s wall")
        hdr = (f"{'host':<12} {'host CPU µs/dec':>15} {'per-rep fits: median [min, max]':>32} "
               f"{'in-loop µs/dec':>14} {'host CPU fixed s':>16} "
               f"{'wall µs/dec':>11} {'wall fixed s':>12} {'ratio ~600':>10} {'ratio ~2500':>11} "
               f"{'clang +CPU µs/dec':>17}")
        print(hdr)
        print("-" * len(hdr))
        for v in variants[1:]:
            hf, hp = fit(n1, med[v][k1]["host_cpu"], n2, med[v][k2]["host_cpu"])
            per_rep = sorted(fit(n1, a["host_cpu"], n2, b["host_cpu"])[1] * 1e6
                             for a, b in zip(data[v][k1], data[v][k2]))
            rep_med = statistics.median(per_rep)
            # the serving loop's own CPU (first byte to end of stream), per decision, at the larger size
            in_loop = sorted(x["serve_cpu"] / n2 * 1e6 for x in data[v][k2])
            loop_med = statistics.median(in_loop)
            d1 = med[v][k1]["wall"] - med["plain"][k1]["wall"]
            d2 = med[v][k2]["wall"] - med["plain"][k2]["wall"]
            wf, wp = fit(n1, d1, n2, d2)
            _, cp = fit(n1, med[v][k1]["compiler_cpu"] - med["plain"][k1]["compiler_cpu"],
                        n2, med[v][k2]["compiler_cpu"] - med["plain"][k2]["compiler_cpu"])
            r1 = med[v][k1]["wall"] / med["plain"][k1]["wall"]
            r2 = med[v][k2]["wall"] / med["plain"][k2]["wall"]
            res["hosts"][v] = {"host_cpu_us_per_decision": hp * 1e6, "host_cpu_fixed_s": hf,
                               "host_cpu_us_per_decision_per_rep": per_rep,
                               "host_cpu_us_per_decision_per_rep_median": rep_med,
                               "serve_loop_cpu_us_per_decision": {"median": loop_med, "min": in_loop[0],
                                                                  "max": in_loop[-1]},
                               "wall_us_per_decision": wp * 1e6, "wall_fixed_s": wf,
                               "wall_ratio": {k1: r1, k2: r2}, "compiler_extra_cpu_us_per_decision": cp * 1e6}
            spread = f"{rep_med:.1f} [{per_rep[0]:.1f}, {per_rep[-1]:.1f}]"
            print(f"{v:<12} {hp * 1e6:>15.1f} {spread:>32} {loop_med:>14.1f} {hf:>16.3f} {wp * 1e6:>11.1f} "
                  f"{wf:>12.3f} {r1:>10.2f} "
                  f"{r2:>11.2f} {cp * 1e6:>17.1f}")
        print(f"`mlgo-host run --policy default` imports TensorFlow: {imports_tf}, numpy: {imports_np}")
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
        print(f"wrote {os.path.relpath(args.out)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
