"""mlgo_host: a Python host for LLVM's machine-learned optimization advisors.

Floors, each importing only from those below it (tests/test_layers.py): errors, formats, fsutil, procs,
progress, shipped -> channel -> episode, collected -> policies -> corpus -> workers -> evaluation -> search
-> learning (the first with TensorFlow) -> training -> serve -> commands, cli, demo.
"""

__version__ = "0.1.0"
