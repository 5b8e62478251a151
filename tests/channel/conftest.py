"""Fixtures of the channel tests: generated C modules and a fake compiler for fault injection
(the other helpers: ``tests/helpers/_channel_helpers.py``)."""

from __future__ import annotations

import stat
import sys
import textwrap

import pytest

from mlgo_host.corpus import synth


@pytest.fixture(scope="session")
def cdir(tmp_path_factory):
    """Generated C modules, written once per test session."""
    d = tmp_path_factory.mktemp("csrc")
    files = {
        "tiny.c": synth.inline_module(8, seed=1),
        "mid.c": synth.inline_module(330, seed=2),
        "big.c": synth.inline_module(1380, seed=3),
        "pressure.c": synth.pressure_module(n_funcs=2, live=36, seed=4),
        "nobody.c": synth.no_body_module(),
    }
    for name, text in files.items():
        (d / name).write_text(text)
    return d


# --------------------------------------------------------------------------
# The fake compiler: opens the FIFOs like clang (.in for read, then .out for
# write), writes its pid (and a grandchild's) to $FAKE_PIDS, then misbehaves
# as $FAKE_MODE says.
FAKE = r'''
import json, os, struct, subprocess, sys, time
mode = os.environ["FAKE_MODE"]
base = None
for a in sys.argv[1:]:
    if a.startswith("-inliner-interactive-channel-base="):
        base = a.split("=", 1)[1]
kid = subprocess.Popen(["sleep", "1000"])  # a grandchild in the same group
with open(os.environ["FAKE_PIDS"], "w") as f:
    f.write(f"{os.getpid()} {kid.pid}\n")
if mode == "hang_before_open":
    time.sleep(1000)
feats = [{"name": "callee_users", "port": 0, "type": "int64_t", "shape": [1]},
         {"name": "callee_basic_block_count", "port": 0, "type": "int64_t", "shape": [1]},
         {"name": "inlining_default", "port": 0, "type": "int64_t", "shape": [1]},
         {"name": "weights", "port": 0, "type": "float", "shape": [2, 3]}]
if mode == "unknown_type":
    feats[3]["type"] = "bfloat16"
header = {"features": feats,
          "advice": {"name": "inlining_decision", "port": 0, "type": "int64_t", "shape": [1]}}
inp = open(base + ".in", "rb", buffering=0)
out = open(base + ".out", "wb", buffering=0)
def obs(i, default):
    return struct.pack("<qqq6f", 3 + i, default, 0, *([0.5] * 6))
if mode == "garbage_header":
    out.write(b"\x89PNG this is not a header\n")
else:
    out.write(json.dumps(header, separators=(",", ":")).encode() + b"\n")
if mode in ("hang_after_header", "garbage_header", "unknown_type"):
    time.sleep(1000)
out.write(b'{"context":""}\n')
if mode == "flood":  # never reads the advice: the host's writes to .in fill up and block
    for i in range(20000):
        out.write(b'{"observation":%d}\n' % i + obs(i, 0) + b"\n")
    time.sleep(1000)
n = int(os.environ.get("FAKE_N", "3"))
for i in range(n):
    t = obs(i, i % 2)
    if mode == "truncated" and i == 1:
        out.write(b'{"observation":1}\n' + t[:10])
        time.sleep(1000)
    if mode == "death" and i == 1:
        out.write(b'{"observation":1}\n' + t[:10])
        os._exit(3)
    if mode == "missing_newline" and i == 1:
        out.write(b'{"observation":1}\n' + t + b"X")
        time.sleep(1000)
    out.write(b'{"observation":%d}\n' % i + t + b"\n")
    adv = inp.read(8)
    if len(adv) != 8 or struct.unpack("<q", adv)[0] != i % 2:
        sys.stderr.write(f"fake: bad advice {adv!r} for observation {i}\n")
        os._exit(5)
out.close()
kid.kill()
sys.exit(0)
'''


@pytest.fixture
def fake_clang(tmp_path):
    """Path of an executable fake compiler named like clang (so it gets -mllvm flags)."""
    p = tmp_path / "bin" / "fake-clang"
    p.parent.mkdir()
    p.write_text(f"#!{sys.executable}\n" + textwrap.dedent(FAKE))
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return p
