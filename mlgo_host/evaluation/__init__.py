"""Evaluation: what a policy does over a corpus (size change against the default, traces of its
decisions, a run's curves), on the workers' pools with the numpy policies: no TensorFlow."""
