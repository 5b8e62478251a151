"""Copies of a function tree in a module's text (mlgo_host.search.copytext),
checked by the real llvm-as-19."""

from __future__ import annotations

import subprocess

from mlgo_host.search.copytext import ModuleText, copy_name

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
    out = mt.with_copies({0: (lam, [lam]), 1: (lam, [lam])})
    for k in (0, 1):
        assert f'@"{copy_name(lam, k)}"(' in out
    # the module with its copies is valid IR: no function defined twice
    r = subprocess.run(["llvm-as-19", "-o", "/dev/null", "-"], input=out, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_static_function_is_told_from_an_inline_one_and_every_copy_is_static(tmp_path):
    src = tmp_path / "link.cc"
    src.write_text("static int twice(int x) { return 2 * x; }\n"
                   "inline int thrice(int x) { return 3 * x; }\n"
                   "int both(int x) { return twice(x) + thrice(x); }\n")
    ll = subprocess.run(["clang-19", "-O0", "-g", "-S", "-emit-llvm", "-x", "c++", str(src), "-o", "-"],
                        capture_output=True, text=True, check=True).stdout
    mt = ModuleText(ll)
    twice, thrice, both = (next(n for n in mt.functions if w in n) for w in ("twice", "thrice", "both"))
    assert mt.is_local(twice) and not mt.is_local(thrice) and not mt.is_local(both)
    # a copy is static whatever its function: one brought back is only measured where its function is too
    copied = ModuleText(mt.with_copies({0: (thrice, [thrice])}))
    assert copied.is_local(copy_name(thrice, 0)) and not copied.is_local(thrice)
