"""The measuring floor, beside the corpus: compiling one module with a policy
or without the channel, object sizes (llvm-size's text column, per function),
baselines and rewards."""
