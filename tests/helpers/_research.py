"""bench/research/ on ``sys.path``: its tools are scripts, not a package, so
the tests import them (and their pool finds its worker) by module name, as
a script run from that directory does.  Import this before them."""

import os
import sys

RESEARCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench",
                        "research")
if RESEARCH not in sys.path:
    sys.path.insert(0, RESEARCH)
