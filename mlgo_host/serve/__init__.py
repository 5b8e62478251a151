"""``mlgo-host serve`` and ``mlgo-clang``: a long-running host answering the
decisions of compilers launched by build systems (make, CMake, Ninja).

``slots`` (directory layout, locks, liveness), ``server`` (one thread per
slot), ``client`` (the ``mlgo-clang`` drop-in compiler), ``stats`` (per-build
aggregation of the JSON lines) and ``collect`` (episodes kept for training).
"""
