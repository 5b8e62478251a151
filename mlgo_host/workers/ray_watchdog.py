"""The watchdog of one Ray actor, ``python -m mlgo_host.workers.ray_watchdog ACTOR_PID ROOT`` with a pipe as
stdin: until that pipe closes (the actor shut down, or died), it records the actor's compiler children; then it
kills those still alive and every process naming ``ROOT`` (the actor's temporary directory) and removes ``ROOT``:
a compiler blocked on its channel would otherwise wait forever after a ``ray.kill``, SIGKILL or OOM kill.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import sys

from mlgo_host import procs

POLL_S = 0.05


def watch(actor: int, stdin_fd: int = 0) -> dict[int, procs.ProcStat]:
    """``actor``'s children (pid -> stat) recorded until ``stdin_fd`` reaches end-of-file."""
    me = os.getpid()
    seen: dict[int, procs.ProcStat] = {}
    while True:
        readable, _, _ = select.select([stdin_fd], [], [], POLL_S)
        if readable and not os.read(stdin_fd, 4096):
            return seen
        for c in procs.children(actor):
            if c != me and c not in seen:
                st = procs.stat(c)
                if st is not None:
                    seen[c] = st
        for c in [c for c, st in seen.items() if not procs.same_process(c, st)]:
            del seen[c]  # exited (or its pid reused): never kill it


def clean_up(seen: dict[int, procs.ProcStat], root: str) -> None:
    """Kill the recorded children still alive and any process naming ``root``; remove ``root``."""
    for c, st in seen.items():
        if procs.same_process(c, st):
            procs.kill_group_or_process(c)
    needle = root.encode()
    for pid, cmd in procs.own_processes():
        if needle in cmd:
            procs.kill_group_or_process(pid)
    shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[0].isdigit():
        sys.stderr.write("usage: python -m mlgo_host.workers.ray_watchdog ACTOR_PID ROOT\n")
        return 2
    actor, root = int(argv[0]), argv[1]
    if os.fork() > 0:  # go on in a grandchild (Ray kills an actor's direct children with it)
        os._exit(0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C of the driver's terminal is not for us
    clean_up(watch(actor), root)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
