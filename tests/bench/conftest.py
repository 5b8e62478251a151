"""The research tools of bench/research/ are scripts, not a package: their
directory goes on ``sys.path`` (as for a script run from it), so the tests
import them, and their pool worker is found, by module name."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "bench", "research"))
