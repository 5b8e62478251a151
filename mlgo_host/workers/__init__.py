"""Worker pools on processes or Ray (:mod:`.pool`, :mod:`.ray_pool`) and the TF-free worker that
compiles corpus modules with a numpy policy (:mod:`.worker`)."""
