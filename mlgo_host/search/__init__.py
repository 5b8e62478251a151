"""The search engine, TF-free: decision identity (call-site keys from the
compiler's inline remarks), batched evaluation of decision sets, the flip
search and ``tune``.  Below ``learning/`` and ``training/``, which learn from what it finds."""
