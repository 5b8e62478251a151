"""Serve channel slots for compilers launched by others (make, CMake, Ninja).

Creates N slots (FIFO pairs + a lock file each) in DIR and answers every
decision of the compiles that `mlgo-clang` / `mlgo-clang++` run on them,
concurrently, until SIGINT/SIGTERM.  Per compile, one JSON line goes to
--stats FILE (output, status, observations, decisions, duration, llvm-size
text of the object); summarize them with `mlgo-host stats FILE`.  With
--collect DIR each compile's episode is kept for training.

--guard: after a served compile succeeds, mlgo-clang compiles the same command
plainly beside the output and keeps the smaller valid object; the stats line
says which ("guard": "policy" | "default").  Clients override it with
MLGO_GUARD=0/1.

--replay T: a compile matched to a module `mlgo-host tune --output T` tuned
(by source, object and flags relative to the project root) gets its replay;
a module changed since falls back to --policy ("tuned": "stale"), other
compiles get --policy ("default").  A module tuned into compiler replays
needs no slot: its client compiles it with the module's flags and reports it
("by": "flags").

On SIGTERM/SIGINT: no new compiles; in-flight ones get --grace seconds, then
their clients fall back to a plain compile; everything made in DIR is
removed; exit status 0.  A restart on the same DIR removes what a killed
server left behind.

A server answers one advisor; clients with MLGO_CHANNELS_C / MLGO_CHANNELS_CXX
send C and C++ compiles to servers of their own (unset: MLGO_CHANNELS).

DIR (and T) steer every compile of the build, so they must be your own: a
symbolic link, another user's directory or one that group or others can
write to is refused (as ssh refuses a loose ~/.ssh).

example:
  mlgo-host serve --channels /tmp/mlgo --slots 4 --policy default --stats build.jsonl &
  MLGO_CHANNELS=/tmp/mlgo make -j8 CC=mlgo-clang CFLAGS=-Oz
  kill %1; mlgo-host stats build.jsonl
"""

from __future__ import annotations

import argparse
import os

from mlgo_host.commands.help import seconds, seconds_from_zero, seed


def add_arguments(p: argparse.ArgumentParser) -> None:
    from mlgo_host.channel.problems import PROBLEMS

    p.add_argument("--channels", metavar="DIR", required=True,
                   help="slot directory, created 0700 if needed; an existing one must be your own, no symbolic "
                        "link, writable by no one else (clients: MLGO_CHANNELS=DIR)")
    p.add_argument("--slots", type=int, default=os.cpu_count() or 2, metavar="N",
                   help="compiles served at the same time (default: the number of CPUs)")
    p.add_argument("--policy", default="default",
                   help="who answers: a heuristic (default = the compiler's own decision, never, always, random; "
                        "spill-weight for regalloc-priority) "
                        "or a saved policy directory")
    p.add_argument("--advisor", choices=sorted(PROBLEMS), default="inline",
                   help="which of the compiler's decisions the policy makes")
    p.add_argument("--stats", metavar="FILE",
                   help="append one JSON line per compile (read it with mlgo-host stats), those clients make with "
                        "a tune directory's flags included; created at start, even if no compile comes")
    p.add_argument("--collect", metavar="DIR",
                   help="keep each compile's episode (.npz) for training; saved policies sample, not greedy")
    p.add_argument("--seed", type=seed, default=0, help="seed of stochastic policies (slot K uses seed+K)")
    p.add_argument("--sample", action="store_true", help="sample from a saved policy (implied by --collect)")
    p.add_argument("--timeout", type=seconds, default=600.0, metavar="SECONDS",
                   help="time one compile's session may take")
    p.add_argument("--grace", type=seconds_from_zero, default=10.0, metavar="SECONDS",
                   help="on SIGTERM/SIGINT, time in-flight compiles get before they are aborted")
    p.add_argument("--compiler", default=None, metavar="PATH",
                   help="compiler whose inliner default-decision slot is detected at start "
                        "(default: $MLGO_CLANG or clang-19; each client's compiler's is detected too)")
    p.add_argument("--pin", action="store_true",
                   help="pin slot K's thread and its compilers to one CPU (K mod CPUs); helps when slots <= CPUs "
                        "and the machine is otherwise idle")
    p.add_argument("--guard", action="store_true",
                   help="clients also compile plainly and keep the smaller object: never bigger than the default "
                        "(one extra plain compile per served compile; MLGO_GUARD=0/1 overrides per client)")
    p.add_argument("--replay", metavar="T",
                   help="a tune directory (mlgo-host tune --output T): a compile of a tuned module (same source, "
                        "object and flags below the project root) gets its replay, a changed one --policy (stale)")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per compile on stderr")


def run(args: argparse.Namespace) -> int:
    from mlgo_host.serve.server import Server

    srv = Server(args.channels, slots=args.slots, policy=args.policy, advisor=args.advisor, stats_path=args.stats,
                 collect_dir=args.collect, timeout=args.timeout, grace=args.grace, seed=args.seed,
                 sample=args.sample, compiler=args.compiler, verbose=args.verbose,
                 pin=args.pin, guard=args.guard, replay_dir=args.replay)
    srv.install_signals()
    srv.start()
    if srv.signalled is not None:  # signalled while starting
        srv.shutdown()
        return 0
    tuned = f"{len(srv.tuned_dir)} tuned modules from {srv.replay_dir}, " if srv.tuned_dir is not None else ""
    srv.log(f"serving {srv.nslots} slots in {srv.root} (policy {srv.policy_name}, advisor {srv.advisor_name}, "
            f"{tuned}{'guarded, ' if srv.guard else ''}"
            f"pid {os.getpid()}); clients: MLGO_CHANNELS={srv.root} CC=mlgo-clang")
    rc = srv.serve_forever()
    srv.log("stopped")
    return rc
