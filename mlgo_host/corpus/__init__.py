"""The corpus floor: the corpus format, building corpora (compile databases,
the benchmark corpus, Debian source packages) and tune directories (below the
workers, above the policies; measuring a module is :mod:`mlgo_host.measure`'s)."""
