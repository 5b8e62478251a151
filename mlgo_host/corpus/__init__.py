"""The corpus floor: the corpus format, building corpora (compile databases,
the benchmark corpus, Debian source packages, combined corpora; below the
workers, above the policies; measuring a module is :mod:`mlgo_host.measure`'s)."""
