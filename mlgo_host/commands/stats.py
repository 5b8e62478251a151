"""Summarize the per-compile JSON lines written by `mlgo-host serve --stats`.

Per build (the clients' MLGO_BUILD label, else the server run): compiles and
modules by status, total llvm-size text, decisions and inlining rate, compile
time, and a per-module table.  --baseline FILE2 compares each module with the
same one (same output path below the build's root) of FILE2's last build.

example: mlgo-host stats build.jsonl --baseline default.jsonl
"""

from __future__ import annotations

import argparse
import json

from mlgo_host.commands.help import at_least_one


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="stats file written by `mlgo-host serve --stats`")
    p.add_argument("--build", metavar="LABEL",
                   help="only this build (its MLGO_BUILD label, or 'server <id>'; default: every build)")
    p.add_argument("--baseline", metavar="FILE2",
                   help="compare module sizes with the last build of FILE2 (e.g. a --policy default build)")
    p.add_argument("--top", type=at_least_one, default=None, metavar="N",
                   help="list only the N largest modules (default: all)")
    p.add_argument("--json", action="store_true", help="print the summaries as JSON")


def run(args: argparse.Namespace) -> int:
    from mlgo_host.errors import ConfigError
    from mlgo_host.collected import read_records
    from mlgo_host.serve.stats import aggregate, compare, format_build

    builds = aggregate(read_records(args.file))
    if args.build is not None:
        builds = [b for b in builds if b["build"] == args.build]
        if not builds:
            raise ConfigError(f"no build {args.build!r} in {args.file}")
    if args.baseline:
        base = aggregate(read_records(args.baseline))
        if not base:
            raise ConfigError(f"{args.baseline} has no records")
        for b in builds:
            b["compare"] = compare(b, base[-1])
    if args.json:
        print(json.dumps(builds, indent=1))
    else:
        print("\n\n".join(format_build(b, args.top) for b in builds) if builds else f"{args.file}: no records")
    return 0
