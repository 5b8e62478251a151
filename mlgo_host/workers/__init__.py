"""Running work on processes or Ray: one pool abstraction (:mod:`.pool`,
:mod:`.ray_pool`) and the TF-free worker that compiles corpus modules with a
numpy policy (:mod:`.worker`).  Nothing here imports TensorFlow."""
