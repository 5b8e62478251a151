"""Evaluation: what a policy does over a corpus, without TensorFlow.

``evaluate`` compiles each module with the policy and with the compiler's
default and reports the size change (``mlgo-host eval``, the held-out
evaluations of training, the guard); ``traces`` records a policy's
observations and decisions (``mlgo-host trace``, the vocab, behavioural
cloning); ``plots`` draws a run's curves from its ``state.json``.  Both run
on :mod:`mlgo_host.workers`' pools with the numpy policies; the learner
(:mod:`mlgo_host.learning`, TensorFlow) sits above and reads their output.
"""
