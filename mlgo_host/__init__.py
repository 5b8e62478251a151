"""mlgo_host: a Python host for LLVM's machine-learned optimization advisors.

Floors, each importing only from the floors below it (tests/test_layers.py
keeps it so): errors, formats, fsutil, procs, progress, shipped ->
``channel`` -> episode, collected -> ``policies`` (run time, numpy only) ->
``corpus`` -> ``workers`` -> ``evaluation`` -> ``search`` -> ``learning``
(the first floor that imports TensorFlow) -> ``training`` (the loops) ->
``serve`` -> ``commands``, cli, demo.  The README's "Layout" section has one
line per floor.
"""

__version__ = "0.1.0"
