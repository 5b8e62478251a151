"""Call-site identity from the optimization record: the cases a remark alone
cannot settle (the real-compiler cases are in test_batched's byte-for-byte
replays)."""

from __future__ import annotations

import pytest

from mlgo_host.search.sites import AmbiguousSites, DebugInfo, FunctionInfo, Remark, identify, read_debug_info

INLINED, NOT = "InliningSuccess", "InliningNotAttempted"


def _debug() -> DebugInfo:
    fns = {"print_field": FunctionInfo("print_field", 140, "a.c"), "print_message": FunctionInfo("print_message", 200, "a.c")}
    return DebugInfo(fns, {"a.c": sorted(fns.values(), key=lambda f: f.line)})


def test_a_call_with_line_0_in_an_inlined_body_takes_the_key_the_compiler_inlined():
    # the optimizer merged two calls of print_field into one with line 0;
    # print_field's body was inlined into print_message: the compiler counts
    # the line from print_field's first line, wrapping below 0
    remarks = [Remark(INLINED, "print_message", "print_field", 243, 5, "a.c"),
               Remark(INLINED, "print_message", "get_id", 0, 0, "a.c")]
    known = {"print_field at print_message:43:5",
             f"get_id at print_field:{(0 - 140) & 0xFFFFFFFF}:0 @ print_message:43:5"}
    got = [d.site.key for d in identify(remarks, _debug(), known=known)]
    assert got == sorted(known, key=len)
    # without the hint the call is counted in its caller (the compiler's
    # line for a call it made there)
    got = [d.site.key for d in identify(remarks, _debug())]
    assert got[1] == f"get_id at print_message:{(0 - 200) & 0xFFFFFFFF}:0"


def test_a_function_without_a_line_counts_its_sites_from_0():
    # llvm-dis leaves "line: 0" out (a C++ global initializer's DISubprogram)
    ir = ['define internal void @__cxx_global_var_init.2() section ".text.startup" !dbg !32 {',
          '!1 = !DIFile(filename: "a.cc", directory: "/src")',
          '!32 = distinct !DISubprogram(name: "__cxx_global_var_init.2", scope: !1, file: !1, type: !9, '
          'flags: DIFlagArtificial, spFlags: DISPFlagLocalToUnit | DISPFlagDefinition, unit: !0)']
    debug = read_debug_info(ir)
    assert debug.functions["__cxx_global_var_init.2"].line == 0
    assert debug.by_file == {}  # no extent: never the function a line of the file is written in
    d = identify([Remark(INLINED, "__cxx_global_var_init.2", "_ZNSaIcEC2Ev", 23, 34, "a.cc")], debug)
    assert d[0].site.key == "_ZNSaIcEC2Ev at __cxx_global_var_init.2:23:34"


def test_the_debug_info_lists_each_functions_direct_callees_by_ir_name():
    # what tells a lambda's lines from its function's, and macro copies of a
    # header apart (the real-compiler cases: test_batched's byte-for-byte replays)
    ir = ['define dso_local noundef double @_Z9at_recallid(i32 noundef %0) !dbg !10 {',
          '  %3 = call noundef double @"_ZZ9at_recallidENK3$_0clERKSt4pairIddE"(ptr %2), !dbg !12',
          '  %4 = invoke i32 (ptr, ...) @printf(ptr @.str) to label %5 unwind label %6, !dbg !12',
          '  call void %fp(ptr @not_a_callee), !dbg !12',
          '}',
          '!1 = !DIFile(filename: "a.cc", directory: "/src")',
          '!10 = distinct !DISubprogram(name: "at_recall", scope: !1, file: !1, line: 5, type: !9, '
          'spFlags: DISPFlagDefinition, unit: !0)']
    debug = read_debug_info(ir)
    assert debug.functions["_Z9at_recallid"].ir == "_Z9at_recallid"
    assert debug.calls["_Z9at_recallid"] == {"_ZZ9at_recallidENK3$_0clERKSt4pairIddE", "printf"}


def test_exact_identification_refuses_to_guess_between_copies():
    # the line-0 call of the first test fits print_field's copy and print_message's own code:
    # without a compile's keys, exact identification says so rather than take the first
    remarks = [Remark(INLINED, "print_message", "print_field", 243, 5, "a.c"),
               Remark(INLINED, "print_message", "get_id", 0, 0, "a.c")]
    with pytest.raises(AmbiguousSites):
        identify(remarks, _debug(), exact=True)
    assert len(identify(remarks, _debug())) == 2
