"""Progress bars that draw only on a terminal.

On a terminal a tqdm bar redraws in place; in a log file or CI it would
write thousands of ``\\r`` updates, so there the bar stays silent and the
callers' one-line summaries are the record (tqdm's ``disable=None`` means
"disable unless the output is a TTY").
"""

from __future__ import annotations

import sys
from typing import Iterable

from tqdm import tqdm


def progress_bar(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "module", enabled: bool = True, leave: bool = True):
    """A tqdm bar on stderr; ``enabled=False`` (``--no-progress``) turns it
    off even on a terminal."""
    return tqdm(iterable, total=total, desc=desc, unit=unit, leave=leave, file=sys.stderr,
                disable=None if enabled else True)
