"""A small C project built by make, its compile database and corpus (with
the module identities a served build is matched by), for the tune tests.

``k.c`` has a known winning flip (a static helper called with constant
arguments, which the default inliner refuses at -Oz); ``t.c`` a tiny callee
with two users; ``g.c`` a generated module with a few dozen decisions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HELPER_C = r"""
static int helper(int x, int mode) {
  if (mode == 0) return x + 1;
  if (mode == 1) { int s = 0; for (int i = 0; i < x; i++) s += i * x ^ (s >> 3); return s; }
  if (mode == 2) { int p = 1; for (int i = 1; i < x; i++) p = p * i % 1000003; return p; }
  return x * 7;
}
int ka(int x) { return helper(x, 0); }
int kb(int x) { return helper(x, 0) * 2; }
int kc(int x) { return helper(x, 3) - 1; }
"""

TINY_C = r"""
static int tiny(int x) { return x * 3 + 1; }
int ta(int x) { return tiny(x) + tiny(x + 1); }
int tb(int x) { return tiny(x) ^ tiny(x - 1); }
"""

MAKEFILE = """\
OBJS = obj/k.o obj/t.o obj/g.o
all: $(OBJS)
obj/%.o: src/%.c
\t@mkdir -p obj
\t$(CC) -Oz -Isrc -c $< -o $@
clean:
\trm -rf obj
"""

FLAGS = ["-Oz", "-Isrc"]


def write_project(root: Path) -> Path:
    """Sources, Makefile and the compile database of the commands make runs."""
    from mlgo_host.corpus.synth import caller_module

    (root / "src").mkdir(parents=True, exist_ok=True)
    (root / "src" / "k.c").write_text(HELPER_C)
    (root / "src" / "t.c").write_text(TINY_C)
    (root / "src" / "g.c").write_text(caller_module(8, 3))
    (root / "Makefile").write_text(MAKEFILE)
    db = [{"directory": str(root), "file": f"src/{n}.c",
           "arguments": ["cc", *FLAGS, "-c", f"src/{n}.c", "-o", f"obj/{n}.o"]} for n in ("k", "t", "g")]
    (root / "compile_commands.json").write_text(json.dumps(db, indent=1))
    return root / "compile_commands.json"


def build_project_corpus(root: Path) -> Path:
    from mlgo_host.corpus.build import build_corpus, load_compile_commands

    db = write_project(root / "project")
    rep = build_corpus(load_compile_commands(db), root / "corpus", clang="clang-19", jobs=2, progress=False)
    assert not rep.failures, rep.failures
    return root / "corpus"


def mlgo_host(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlgo_host", *args], capture_output=True, text=True,
                          timeout=kw.pop("timeout", 600), **kw)


def read_manifest(t: Path) -> dict:
    return json.loads((t / "tune.json").read_text())


def env_without_mlgo() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("MLGO_")}


def json_replay_tune(corpus: Path, t: Path, clang: str = "clang-19") -> None:
    """A tune directory of fingerprinted JSON replays (forced decision
    indices over the default), the layout `serve --replay T` and `eval
    --replay T` read besides the compiler's replay files: per module, the
    best of a greedy pass of single flips from the default."""
    from mlgo_host.corpus.corpus import load_corpus
    from mlgo_host.corpus.identity import project_root, read_sources, relative_identity
    from mlgo_host.search.tunedir import FORMAT, MANIFEST, REPLAYS, module_file
    from mlgo_host.measure.compile import baseline_size, compile_module
    from mlgo_host.policies import load_policy
    from mlgo_host.policies.replay import Replay, ReplayPolicy, stream_fingerprint, write_replay

    default = load_policy("default")
    idents = read_sources(corpus)
    root = project_root(idents.values())
    modules = {}
    for m in load_corpus(corpus).modules:
        best = compile_module(m, default, clang=clang, record=True)
        forced: dict[int, int] = {}
        for i in range(best.episode.n):
            flipped = {**forced, i: 1 - int(best.episode.actions[i])}
            got = compile_module(m, ReplayPolicy(Replay(forced=flipped), default), clang=clang, record=True)
            if got.status == "ok" and got.text_size < best.text_size:
                best, forced = got, flipped
        ep = best.episode
        rel = f"{REPLAYS}/{module_file(m.name, '.json')}"
        write_replay(t / rel, Replay(forced=forced, base="default", module=m.name, observations=ep.n,
                                     fingerprint=stream_fingerprint(ep.raw, ep.header.observation_nbytes, forced)))
        modules[m.name] = {"replay": rel, "identity": relative_identity(idents[m.name], root), "status": "ok",
                           "default_size": baseline_size(m, clang=clang), "best_size": int(best.text_size)}
    (t / MANIFEST).write_text(json.dumps({"format": FORMAT, "corpus": str(corpus), "root": root, "base": "default",
                                          "policy_source": "default", "clang": clang, "modules": modules}))
