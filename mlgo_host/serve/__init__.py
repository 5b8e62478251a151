"""``mlgo-host serve`` and ``mlgo-clang``: a long-running host answering the decisions of compilers
that build systems launch (stats records and episodes: :mod:`mlgo_host.collected`, which training reads)."""
