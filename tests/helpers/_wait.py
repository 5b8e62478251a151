"""Polling for a condition in tests (never an assertion on wall time)."""

from __future__ import annotations

import time
from typing import Callable


def wait_until(cond: Callable[[], bool], timeout: float = 20.0, step: float = 0.02) -> bool:
    """Poll ``cond`` until it holds or ``timeout`` s passed; its last value."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()
