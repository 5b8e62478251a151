"""mlgo_host: a Python host for LLVM's machine-learned optimization advisors.

Floors, each importing only from the floors below it (tests/test_layers.py
keeps it so): errors, fsutil -> ``channel`` -> episode, collected ->
``policies`` (run time, numpy only) -> ``corpus`` -> ``trainers`` (the only
floor that imports TensorFlow, and not in its workers) -> ``serve`` ->
``commands``, cli, demo.
"""

__version__ = "0.1.0"
