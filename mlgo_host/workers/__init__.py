"""Worker pools on processes or Ray, and the TF-free worker that compiles corpus modules with a numpy policy."""
