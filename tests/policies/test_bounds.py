"""The bounds on the inlinings a policy adds to -Oz's (a callee of many uses, or any callee in a module
of few functions, is not inlined where -Oz does not), on real compiles, and how a saved policy carries
them."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from mlgo_host.channel.problems import ready_and_run
from mlgo_host.errors import ConfigError
from mlgo_host.policies import load_policy
from mlgo_host.policies.bounds import MAX_USERS_KEY, MIN_FUNCTIONS_KEY, BoundedInlining, InliningBound
from mlgo_host.policies.heuristic import make_heuristic
from mlgo_host.shipped import shipped_policy_dir

# `busy` has more uses than the bound allows, `pair` two; -Oz inlines neither (too big for -Oz)
SOURCE = """
extern int sink(int);
static int busy(int x) {
    int s = 0;
    for (int i = 0; i < x; i++) s += sink(i * x) ^ sink(s + i);
    return s + sink(x);
}
static int pair(int x) {
    int s = 1;
    for (int i = 0; i < x; i++) s = s * 3 + sink(s ^ i);
    return s;
}
int a(int x) { return busy(x) + 1; }
int b(int x) { return busy(x + 1) * 2; }
int c(int x) { return busy(x + 2) - 3; }
int d(int x) { return busy(x + 3) ^ 4; }
int e(int x) { return busy(x + 4) | 5; }
int f(int x) { return pair(x) + pair(x + 1); }
"""


class _Tally(BoundedInlining):
    """The bounded policy, keeping (-Oz's answer, the callee's uses, its own answer) per decision, and the
    module's functions."""

    def bind(self, header, advisor):
        super().bind(header, advisor)
        self.rows, self.functions = [], []

    def act(self, obs):
        a = super().act(obs)
        users, functions = self._users_functions(obs.raw)
        self.rows.append((int(self._default(obs)), int(users), int(a)))
        self.functions.append(int(functions))
        return a


def _compile(toolchain, src, out, policy):
    res = ready_and_run([toolchain.clang, "-Oz", "-c", str(src), "-o", str(out)], "inline", policy)
    assert res.returncode == 0
    return out.stat().st_size


def test_it_refuses_added_inlinings_of_a_callee_of_many_uses_and_keeps_the_rest(toolchain, tmp_path):
    src = tmp_path / "m.c"
    src.write_text(SOURCE)
    bounded = _Tally(make_heuristic("always"), InliningBound(max_users=3))
    _compile(toolchain, src, tmp_path / "b.o", bounded)
    rows = bounded.rows
    refused = [r for r in rows if r[0] == 0 and r[1] > 3]
    assert refused and all(a == 0 for _, _, a in refused)
    assert all(a == 1 for d, u, a in rows if d == 1 or u <= 3)  # the base's answer elsewhere
    assert any(d == 0 and u <= 3 and a == 1 for d, u, a in rows)  # `pair`: an added inlining kept
    # the bound is the base policy's own answer when nothing has more uses than it allows
    loose = _Tally(make_heuristic("always"), InliningBound(max_users=1000, min_functions=1))
    _compile(toolchain, src, tmp_path / "l.o", loose)
    assert all(a == 1 for _, _, a in loose.rows)
    plain = tmp_path / "p.o"
    subprocess.run([toolchain.clang, "-Oz", "-c", str(src), "-o", str(plain)], check=True)
    always = tmp_path / "always.o"
    _compile(toolchain, src, always, make_heuristic("always"))
    assert (tmp_path / "b.o").read_bytes() != always.read_bytes()


def test_in_a_module_of_few_functions_it_adds_no_inlining(toolchain, tmp_path):
    src = tmp_path / "m.c"
    src.write_text(SOURCE)
    small = _Tally(make_heuristic("always"), InliningBound(min_functions=1000))
    _compile(toolchain, src, tmp_path / "s.o", small)
    assert 0 < max(small.functions) < 1000
    assert [a for _, _, a in small.rows] == [d for d, _, _ in small.rows]  # -Oz's answers, every one
    plain = tmp_path / "p.o"
    subprocess.run([toolchain.clang, "-Oz", "-c", str(src), "-o", str(plain)], check=True)
    assert (tmp_path / "s.o").stat().st_size == plain.stat().st_size
    # a module of at least that many functions keeps the base's added inlinings
    big = _Tally(make_heuristic("always"), InliningBound(min_functions=min(small.functions)))
    _compile(toolchain, src, tmp_path / "g.o", big)
    assert any(d == 0 and a == 1 for d, _, a in big.rows)


def _with_bound(tmp_path, value, key=MAX_USERS_KEY):
    d = tmp_path / "pol"
    shutil.copytree(shipped_policy_dir("pretrained-oz"), d, dirs_exist_ok=True)
    md = json.loads((d / "metadata.json").read_text())
    md[MAX_USERS_KEY] = md[MIN_FUNCTIONS_KEY] = None
    md[key] = value
    (d / "metadata.json").write_text(json.dumps(md))
    return str(d)


def test_a_saved_policy_carries_its_bound_for_greedy_answers_only(tmp_path):
    pol = load_policy(_with_bound(tmp_path, 5))
    cxx = pol.for_language("C++")
    assert isinstance(cxx, BoundedInlining) and cxx.bound == InliningBound(max_users=5)
    cxx = load_policy(_with_bound(tmp_path, 40, MIN_FUNCTIONS_KEY)).for_language("C++")
    assert isinstance(cxx, BoundedInlining) and cxx.bound == InliningBound(min_functions=40)
    assert type(cxx.base).__name__ == "NumpyPolicy"
    sampling = load_policy(_with_bound(tmp_path, 5), greedy=False)  # training samples the network
    assert type(sampling.for_language("C++")).__name__ == "NumpyPolicy"
    assert type(load_policy(_with_bound(tmp_path, None)).for_language("C++")).__name__ == "NumpyPolicy"
    for key in (MAX_USERS_KEY, MIN_FUNCTIONS_KEY):
        for bad in (0, "3", True):
            with pytest.raises(ConfigError, match=f"metadata.json: bad {key}"):
                load_policy(_with_bound(tmp_path, bad, key))


def test_the_shipped_policy_bounds_its_network():
    cxx = load_policy("pretrained-oz").for_language("C++")
    assert isinstance(cxx, BoundedInlining) and cxx.bound == InliningBound(max_users=3, min_functions=150)
