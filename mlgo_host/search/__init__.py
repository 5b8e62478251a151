"""The search engine, TF-free: call-site keys (:mod:`.sites`), the batched search (:mod:`.driver`), :mod:`.tune`."""
