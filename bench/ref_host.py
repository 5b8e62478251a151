"""A minimal reference host for clang's interactive inliner channel.

Decodes the stream and answers every decision with the compiler's default
(clang-19 puts it in the ``callee_basic_block_count`` slot, see
docs/channel.md), nothing else: no validation, no deadline, no supervision, no
cleanup on errors. It exists only as the yardstick of ``bench/channel.py``.

usage: python bench/ref_host.py [--pin CPU] [--slot NAME] -- COMPILER ARGS...
prints one JSON line: observations, returncode, compiler CPU seconds (from
wait4), host CPU seconds (getrusage of this process) and the CPU seconds of
its decode-and-answer loop (serve_cpu_s, like `mlgo-host run`'s).
"""

import json
import os
import resource
import shutil
import sys
import tempfile
import time

SIZES = {"float": 4, "double": 8, "int8_t": 1, "uint8_t": 1, "int16_t": 2, "uint16_t": 2,
         "int32_t": 4, "uint32_t": 4, "int64_t": 8, "uint64_t": 8}


def main(argv):
    pin, slot = None, "callee_basic_block_count"
    while argv and argv[0] != "--":
        opt = argv.pop(0)
        if opt == "--pin":
            pin = int(argv.pop(0))
        elif opt == "--slot":
            slot = argv.pop(0)
        else:
            raise SystemExit(f"unknown option {opt}")
    cmd = argv[1:]
    if pin is not None:
        os.sched_setaffinity(0, {pin})  # the compiler inherits it
    d = tempfile.mkdtemp(prefix="ref-host-")
    base = os.path.join(d, "ch")
    os.mkfifo(base + ".in")
    os.mkfifo(base + ".out")
    cmd += ["-mllvm", "-enable-ml-inliner=release", "-mllvm", "-inliner-interactive-include-default",
            "-mllvm", f"-inliner-interactive-channel-base={base}"]
    pid = os.posix_spawnp(cmd[0], cmd, os.environ)
    wfd = os.open(base + ".in", os.O_WRONLY)
    rfd = os.open(base + ".out", os.O_RDONLY)
    read, write = os.read, os.write
    buf = b""
    while b"\n" not in buf:
        chunk = read(rfd, 65536)
        if not chunk:
            break
        buf += chunk
    nl = buf.find(b"\n")
    header = json.loads(buf[:nl])
    buf = buf[nl + 1:]
    nbytes, off = 0, None
    for f in header["features"]:
        if f["name"] == slot:
            off = nbytes
        n = SIZES[f["type"]]
        for s in f["shape"]:
            n *= s
        nbytes += n
    yes, no = (1).to_bytes(8, "little"), bytes(8)
    n_obs = 0
    cpu0 = time.thread_time()
    while True:
        nl = buf.find(b"\n")
        if nl < 0 or (buf.startswith(b'{"o') and len(buf) < nl + 2 + nbytes):
            chunk = read(rfd, 65536)
            if not chunk:
                break
            buf += chunk
            continue
        if buf.startswith(b'{"o'):  # observation: line, tensors, '\n'
            p = nl + 1
            write(wfd, yes if buf[p + off:p + off + 8] != no else no)
            n_obs += 1
            buf = buf[p + nbytes + 1:]
        else:  # context
            buf = buf[nl + 1:]
    loop_cpu = time.thread_time() - cpu0
    os.close(wfd)
    os.close(rfd)
    _, status, ru = os.wait4(pid, 0)
    shutil.rmtree(d)
    me = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"observations": n_obs, "returncode": os.waitstatus_to_exitcode(status),
                      "compiler_cpu_s": ru.ru_utime + ru.ru_stime, "host_self_cpu_s": me.ru_utime + me.ru_stime,
                      "serve_cpu_s": loop_cpu}))
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
