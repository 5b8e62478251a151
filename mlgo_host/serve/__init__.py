"""``mlgo-host serve`` and ``mlgo-clang``: a long-running host answering the
decisions of compilers launched by build systems (make, CMake, Ninja).

``slots`` (directory layout, locks, liveness), ``trust`` (whether a
directory that steers compiles is the user's own), ``server`` (one thread
per slot), ``client`` (the ``mlgo-clang`` drop-in compiler) and ``stats``
(per-build aggregation of the JSON lines).  The stats records and the
episodes kept for training (``--collect``) are read and written by
:mod:`mlgo_host.collected`, a floor below, which training reads too.
"""
