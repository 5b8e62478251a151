"""Compile once, with a policy answering every decision of one advisor.

Adds the advisor's flags to COMPILER ARGS (with -mllvm for clang, bare for
opt/llc), serves the channel, and prints one JSON object on stdout:
advisor, observations, contexts, decisions (advice -> count), returncode,
output (the -o file), text_size (llvm-size text of the object), wall_s,
compiler_cpu_s, host_cpu_s and serve_cpu_s.  Exit status: the compiler's; 2
with a one-line message on stderr when the host side fails; 130/143/129
after SIGINT/SIGTERM/SIGHUP (the compiler killed, FIFOs and temp files removed).

--actions FILE forces a replay file's actions at its decision indices
(0-based over every decision of the compile), its base policy (or --policy)
answering the rest.  The JSON adds "replay": {forced, applied, missed,
decisions, stale}; stale: the file's fingerprint does not match this compile
(the module changed), so forcing stopped at the first mismatch.  Format:
  {"format": "mlgo_host.replay/1", "advisor": "inline", "base": "default",
   "forced": {"12": 1, "40": 0}, "module": ..., "observations": ..., "fingerprint": ...}

--replay T (a tune directory): the replay of the tuned module this command
compiles (matched as `serve --replay` matches), else --policy; the JSON adds
"tuned": {"tuned": "tuned" | "stale" | "default", ...}.

example: mlgo-host run --policy default -- clang-19 -Oz -c x.c -o x.o
         mlgo-host run --actions x.replay.json -- clang-19 -Oz -c x.c -o x.o
"""

from __future__ import annotations

import argparse
import json
import os
import sys

# `run` does no BLAS work: one OpenBLAS thread starts faster
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from mlgo_host.channel.problems import PROBLEMS  # noqa: E402  (imports numpy)
from mlgo_host.commands.help import seconds, seed  # noqa: E402
from mlgo_host.errors import ConfigError  # noqa: E402
from mlgo_host.fsutil import check_file_target  # noqa: E402


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--advisor", choices=sorted(PROBLEMS), default="inline",
                   help="which of the compiler's decisions the policy makes (a replay's must match)")
    p.add_argument("--policy", default=None,
                   help="who answers: a heuristic (default = the compiler's own decision, never, always, random; "
                        "spill-weight for regalloc-priority) "
                        "or a saved policy directory (default: default); with --actions, the base policy "
                        "replacing the replay file's")
    p.add_argument("--actions", metavar="FILE",
                   help="a replay file (JSON): force its actions at its decision indices, its base policy "
                        "(or --policy) elsewhere; stops forcing if its fingerprint shows the module changed")
    p.add_argument("--replay", metavar="T",
                   help="a tune directory (mlgo-host tune --output T): the tuned decisions of the module this "
                        "command compiles, --policy elsewhere")
    p.add_argument("--save-replay", metavar="OUT",
                   help="with --actions: write the replay to OUT with this compile's fingerprint and decision "
                        "count, so later compiles of a changed module are detected as stale")
    p.add_argument("--seed", type=seed, default=0, help="seed of stochastic policies (random, --sample)")
    p.add_argument("--sample", action="store_true", help="sample from a saved policy instead of its greedy choice")
    p.add_argument("--timeout", type=seconds, default=600.0, metavar="SECONDS", help="time the whole compile may take")
    p.add_argument("--log", metavar="FILE", help="write observations and the advice taken in clang's training-log format")
    p.add_argument("--pin", metavar="CPU", type=int, nargs="?", const=-1, default=None,
                   help="run the host and the compiler on one CPU (CPU omitted: the current one); "
                        "cheaper ping-pong when that CPU is otherwise idle")
    # dest must not be "command": the CLI dispatcher keeps the subcommand name there
    p.add_argument("compiler_args", nargs=argparse.REMAINDER, metavar="-- COMPILER ARGS...",
                   help="the compiler command line (after --)")


def run(args: argparse.Namespace) -> int:
    from mlgo_host.channel.fifo import SignalExit, install_signal_cleanup

    install_signal_cleanup(sigint=True)  # SIGINT/SIGTERM/SIGHUP unwind the session, cleaning up
    try:
        return _run(args)
    except SignalExit as e:
        print(f"mlgo-host run: interrupted by {e.signame}; compiler killed, channel removed", file=sys.stderr)
        return int(e.code)


def _run(args: argparse.Namespace) -> int:
    import resource

    from mlgo_host.channel.problems import ready_and_run

    cmd = list(args.compiler_args)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise ConfigError("no compiler command given (mlgo-host run [options] -- COMPILER ARGS...)")
    if args.replay and not os.path.isdir(args.replay):
        # --replay is a tune directory, as for serve and eval; a file is what --actions takes
        if not os.path.exists(args.replay):
            raise ConfigError(f"--replay {args.replay}: no such tune directory")
        if args.actions:
            raise ConfigError(f"--replay {args.replay}: not a tune directory")
        print("mlgo-host run: warning: --replay FILE is deprecated: use --actions FILE", file=sys.stderr)
        args.actions, args.replay = args.replay, None
    if args.actions and args.replay:
        raise ConfigError("--actions and --replay T: give one of them")
    if args.save_replay and not args.actions:
        raise ConfigError("--save-replay needs --actions FILE (the forced actions to fingerprint)")
    for path, what in ((args.log, "training log"), (args.save_replay, "replay")):
        if path:
            check_file_target(path, what)
    name = None  # the tuned module whose replay answers (--replay T)
    if args.replay:
        pols, matched = _tuned(args, cmd)
        if flags := pols.tuned.flags_for(matched):  # tuned into a compiler replay: plain compiler flags, no channel
            return _run_with_flags(cmd, flags, matched, args.timeout)
        policy, name = pols.for_module(matched)
    elif args.actions:
        from mlgo_host.policies.replay import load_replay

        policy = load_replay(args.actions, base=args.policy, seed=args.seed, greedy=not args.sample)
        if args.advisor != policy.replay.advisor:
            raise ConfigError(f"replay file {args.actions} is for the {policy.replay.advisor} advisor, "
                              f"not {args.advisor} (use --advisor {policy.replay.advisor})")
    elif args.policy in (None, "default"):
        # the session answers the compiler's own decision itself, without importing the policies
        policy = None
    else:
        from mlgo_host.policies import load_policy

        policy = load_policy(args.policy, seed=args.seed, greedy=not args.sample)
    res = ready_and_run(cmd, args.advisor, policy, timeout=args.timeout, log_path=args.log, pin_cpu=args.pin)
    out = res.summary()
    out["policy"] = args.policy or "default"
    if args.replay:
        out["tuned"] = pols.outcome(policy, name)
    if args.actions or name is not None:
        out["policy"] = policy.name  # type: ignore[union-attr]
        out["replay"] = policy.report()  # type: ignore[union-attr]
    if args.save_replay and res.returncode == 0:  # (--save-replay needs --actions)
        from mlgo_host.policies.replay import write_replay

        write_replay(args.save_replay, policy.replay.with_fingerprint(policy))  # type: ignore[union-attr]
    out["text_size"] = _text_size(res.returncode, res.output, cmd[0])
    if args.log and res.contexts == 0:
        print(f"mlgo-host run: no training log written to {args.log}: the compiler opened no channel "
              f"(no {args.advisor} decisions to ask, e.g. at -O0)", file=sys.stderr)
    me = resource.getrusage(resource.RUSAGE_SELF)
    out["host_cpu_s"] = round(me.ru_utime + me.ru_stime, 4)
    if res.returncode != 0 and res.stderr_tail:
        sys.stderr.write(res.stderr_tail)
    print(json.dumps(out))
    return res.returncode


def _run_with_flags(cmd: list[str], flags: list[str], name: str, timeout: float) -> int:
    """The compile with a tuned module's compiler replay flags (no channel)."""
    from mlgo_host.channel.session import run_without_channel
    from mlgo_host.serve.client import classify

    rc, tail = run_without_channel(cmd + flags, timeout=timeout)
    output = classify(cmd[1:]).get("output")
    out = {"advisor": "inline", "returncode": rc, "output": output, "policy": f"tuned:{name}",
           "tuned": {"tuned": "tuned", "tuned_module": name, "flags": flags},
           "text_size": _text_size(rc, output, cmd[0])}
    if rc != 0 and tail:
        sys.stderr.write(tail)
    print(json.dumps(out))
    return rc


def _tuned(args: argparse.Namespace, cmd: list[str]):
    """The policies of ``--replay T`` (--policy the fallback) and the tuned module this command
    compiles (None: none)."""
    from mlgo_host.search.tunedir import TunedDir, TunedPolicies
    from mlgo_host.policies import load_policy
    from mlgo_host.serve.client import classify

    if args.advisor != "inline":
        raise ConfigError(f"--replay {args.replay}: tuned replays are inlining decisions (use --advisor inline)")
    pols = TunedPolicies(TunedDir(args.replay), load_policy(args.policy or "default", seed=args.seed,
                                                               greedy=not args.sample), args.seed, not args.sample)
    plan = classify(cmd[1:])
    return pols, (pols.tuned.match(cmd, os.getcwd(), plan["source"], plan["output"]) if plan["compile"] else None)


def _text_size(returncode: int, output: str | None, compiler: str) -> int | None:
    """The text size of a compile's object file; None when it made none (or e.g. -emit-llvm, -S: no object)."""
    from mlgo_host.serve.guard import object_text_size

    if returncode != 0 or not output or output == "-":
        return None
    return object_text_size(os.path.join(os.getcwd(), output), compiler)
