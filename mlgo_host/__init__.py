"""mlgo_host: a Python host for LLVM's machine-learned optimization advisors.

Data flows one way: compiler -> ``channel`` -> ``policies`` -> episode ->
``trainers``.  Nothing under ``channel`` or ``policies`` (except
``policies.tf_agent`` / ``policies.saved`` export) imports TensorFlow.
"""

__version__ = "0.1.0"
