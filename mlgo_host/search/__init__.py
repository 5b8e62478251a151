"""The search engine, TF-free: call-site keys (:mod:`.sites`), batched search
(:mod:`.driver` and its parts), ``tune`` and its directory (:mod:`.tunedir`)."""
