"""Training: the loops behind ``mlgo-host train``, selected by gin.

``entry`` parses the gin configuration and runs the loop ``run.algorithm``
names: ``train_loop`` (PPO over a corpus), ``bc_loop`` (trace the default,
then behavioural cloning), ``search_loop`` (search, then imitate); or
``online`` (one PPO iteration on episodes collected in real builds,
``train --collected``).  ``iteration`` holds the per-iteration steps the PPO
loops share (open the learner, train and save, commit ``state.json``).  The
loops hand work to :mod:`mlgo_host.workers` and learn with
:mod:`mlgo_host.learning`.
"""
