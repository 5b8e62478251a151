"""The policy that ships in the package (``--policy pretrained-oz``, rebuilt
by ``make pretrain``): it loads by name with numpy only, says what it was
trained with, runs on every installed clang, and with its gate closed its
network is exactly clang's own -Oz."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from mlgo_host.corpus import synth
from mlgo_host.policies import load_policy
from mlgo_host.shipped import SHIPPED, shipped_policy_dir
from mlgo_host.policies.saved import VOCAB_DIR, WEIGHTS, read_metadata, set_gate


def _run(args, tmp_path) -> dict:
    r = subprocess.run([sys.executable, "-m", "mlgo_host", "run", *args], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_shipped_policy_loads_by_name_with_its_metadata():
    assert list(SHIPPED) == ["pretrained-oz"]
    d = shipped_policy_dir("pretrained-oz")
    md = json.load(open(os.path.join(d, "metadata.json")))
    assert md["compiler"].startswith("Debian clang version 19")
    assert md["default_slot"] and md["feature_meanings"] and "threshold" in md["gate"]
    assert md["gate"]["chosen_on"] == "validation"
    recipe = json.load(open(os.path.join(d, "recipe.json")))
    assert recipe["config"] == "configs/inlining/search.gin" and "heldout" in recipe and "external" in recipe
    assert not os.path.exists(os.path.join(d, "saved_model"))  # numpy weights only
    pol = load_policy("pretrained-oz")
    assert pol.name and not pol.stochastic


def test_every_file_a_shipped_policys_metadata_names_is_shipped():
    for name in SHIPPED:
        d = shipped_policy_dir(name)
        md = read_metadata(d)
        assert md.get("saved_model") is None  # numpy weights only: the metadata says so
        for rel in (WEIGHTS, VOCAB_DIR, *(md.get("by_language") or {}).values()):
            assert os.path.exists(os.path.join(d, rel)), f"{name}: {rel}"


def test_it_runs_on_every_clang_and_with_its_gate_closed_is_exactly_oz(toolchain, tmp_path):
    # (a C++ file: the network answers C++; C has its own part, tests/policies/test_outline.py)
    src = tmp_path / "m.cc"
    src.write_text(synth.inline_module(200, seed=5))
    plain = tmp_path / "plain.o"
    subprocess.run([toolchain.clang, "-Oz", "-c", str(src), "-o", str(plain)], check=True)
    out = _run(["--policy", "pretrained-oz", "--", toolchain.clang, "-Oz", "-c", str(src), "-o",
                str(tmp_path / "p.o")], tmp_path)
    assert out["observations"] > 100 and out["text_size"] > 0
    closed = tmp_path / "closed"
    shutil.copytree(shipped_policy_dir("pretrained-oz"), closed)
    set_gate(str(closed), 1.0, chosen_on="test")  # always the compiler's own decision
    _run(["--policy", str(closed), "--", toolchain.clang, "-Oz", "-c", str(src), "-o", str(tmp_path / "c.o")],
         tmp_path)
    assert (tmp_path / "c.o").read_bytes() == plain.read_bytes()
