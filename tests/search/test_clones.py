"""Copies of a function tree in a module's text (mlgo_host.search.clones),
checked by the real llvm-as-19."""

from __future__ import annotations

import subprocess

from mlgo_host.search.clones import CALLEES_SECTION, COPIES_SECTION, ModuleText, world_name

# a lambda's operator() is named with '$' (llvm-dis quotes such names)
CPP = r"""
#include <algorithm>
#include <vector>
int count_big(const std::vector<int> &v, int t) {
  return (int)std::count_if(v.begin(), v.end(), [t](int x) { return x > t; });
}
"""


def test_a_function_with_a_quoted_name_is_copied_under_a_new_name(tmp_path):
    src = tmp_path / "lam.cc"
    src.write_text(CPP)
    ll = subprocess.run(["clang-19", "-O0", "-g", "-S", "-emit-llvm", "-x", "c++", str(src), "-o", "-"],
                        capture_output=True, text=True, check=True).stdout
    mt = ModuleText(ll)
    lam = next(n for n in mt.functions if "$_0" in n)
    assert f'@"{lam}"(' in ll  # quoted in the text
    out = mt.with_worlds({0: (lam, [lam]), 1: (lam, [lam])})
    for k in (0, 1):
        assert f'@"{world_name(lam, k)}"(' in out
    # the module with its copies is valid IR: no function defined twice
    r = subprocess.run(["llvm-as-19", "-o", "/dev/null", "-"], input=out, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_callee_a_world_brings_back_keeps_its_linkage_in_a_section_of_its_own(tmp_path):
    # (an internal copy of a linkonce_odr function gave the compiler leave to change it and its
    # callers: on test-dtoa a copy of CheckEqualsHelper came out 50 bytes against the original's 25)
    src = tmp_path / "lam.cc"
    src.write_text(CPP)
    ll = subprocess.run(["clang-19", "-O0", "-g", "-S", "-emit-llvm", "-x", "c++", str(src), "-o", "-"],
                        capture_output=True, text=True, check=True).stdout
    mt = ModuleText(ll)
    callee = next(n for n in mt.functions if "linkonce_odr" in mt.lines[mt.functions[n].start])  # (a std::vector method)
    root = next(n for n in mt.functions if "count_big" in n)
    out = mt.with_worlds({0: (root, [root]), 1: (root, [root])}, {1: {callee}})
    head = next(ln for ln in out.split("\n") if ln.startswith("define") and world_name(callee, 1) in ln)
    assert "linkonce_odr" in head and f'section "{CALLEES_SECTION}"' in head and "comdat" not in head
    assert world_name(callee, 0) not in out  # (only the world that brings it back copies it)
    root_copy = next(ln for ln in out.split("\n") if ln.startswith("define") and world_name(root, 1) in ln)
    assert "internal" in root_copy and f'section "{COPIES_SECTION}"' in root_copy
    r = subprocess.run(["llvm-as-19", "-o", "/dev/null", "-"], input=out, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
