"""The watchdog of one Ray actor: cleans up after an actor that died without
cleaning up itself (``ray.kill``, SIGKILL, the OOM killer).

Run as ``python -m mlgo_host.workers.ray_watchdog ACTOR_PID ROOT`` by
:class:`mlgo_host.workers.ray_pool.RayWorker`, with a pipe as its stdin.
It detaches (double fork: Ray kills an actor's direct children with it), then
records the actor's children (the compilers it starts, each in its own
session) every 50 ms until its stdin reaches end-of-file -- the actor closed
the pipe on shutdown, or died.  Then it kills the recorded children that are
still the same processes (with their process groups), and every process of
this user whose command line names ``ROOT`` (the actor's private temporary
directory, where channel FIFOs and outputs live), and removes ``ROOT``.
Without it a compiler blocked on its channel would be orphaned, waiting or
spinning forever.

It imports nothing but the standard library and :mod:`mlgo_host.procs`: no
Ray, no numpy, no TensorFlow (it starts in milliseconds, one per actor).
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import sys

from mlgo_host import procs

POLL_S = 0.05


def detach() -> None:
    """Continue in a grandchild the actor's death does not take along: the
    launcher (the actor's child) exits at once and is reaped by the actor."""
    if os.fork() > 0:
        os._exit(0)


def watch(actor: int, stdin_fd: int = 0) -> dict[int, procs.ProcStat]:
    """Record ``actor``'s children until ``stdin_fd`` reaches end-of-file.
    Returns the children recorded last (pid -> stat), each still the same
    process when it was last looked at."""
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
    """Kill what the actor left: its recorded children still alive, and any
    process naming ``root`` on its command line; then remove ``root``."""
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
    detach()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C of the driver's terminal is not for us
    clean_up(watch(actor), root)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
