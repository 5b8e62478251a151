"""The corpus format and building corpora (compile databases, the benchmark corpus, Debian source
packages, combined corpora)."""
