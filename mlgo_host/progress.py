"""Progress bars that draw only on a terminal: in a log file they would write thousands of ``\\r``
updates, so there the callers' one-line summaries are the record."""

from __future__ import annotations

import sys
from typing import Iterable

from tqdm import tqdm


def progress_bar(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "module", enabled: bool = True, leave: bool = True):
    """A tqdm bar on stderr (``disable=None``: off unless a TTY); ``enabled=False`` turns it off."""
    return tqdm(iterable, total=total, desc=desc, unit=unit, leave=leave, file=sys.stderr,
                disable=None if enabled else True)
