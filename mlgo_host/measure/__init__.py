"""Compiling one module with a policy or without the channel, object sizes, baselines and rewards."""
