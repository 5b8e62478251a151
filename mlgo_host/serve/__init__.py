"""``mlgo-host serve`` and ``mlgo-clang``: a long-running host answering the decisions of compilers
that build systems launch. The stats records and collected episodes are :mod:`mlgo_host.collected`'s,
a floor below, which training reads too.
"""
