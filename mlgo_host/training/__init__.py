"""Training: the loops behind ``mlgo-host train``, selected by gin (``entry``): PPO over a corpus, behavioural
cloning, search then imitate, or one PPO iteration on episodes collected in real builds (``online``).
"""
