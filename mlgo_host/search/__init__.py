"""The search engine, TF-free: call-site keys from the compiler's inline remarks
(:mod:`.sites`), batched evaluation of decision sets (:mod:`.driver` and its
parts), ``tune`` and its directory (:mod:`.tunedir`).
"""
