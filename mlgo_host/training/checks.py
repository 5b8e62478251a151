"""What a trainer checks before any work: its gin parameters' ranges (a count of 0 would run nothing and
still publish a policy, a negative seed fails every module)."""

from __future__ import annotations

from mlgo_host.errors import ConfigError


def check_counts(configurable: str, minimum: int, **values) -> None:
    """Each of ``values`` (``configurable``'s parameters) a whole number of at least ``minimum``;
    a parameter bound to None is left to the trainer's own meaning of None."""
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(f"{configurable}.{name} = {value!r}: must be a whole number >= {minimum}")


def check_positive(configurable: str, **values) -> None:
    """Each of ``values`` a number above 0 (None left to the trainer)."""
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:  # NaN too
            raise ConfigError(f"{configurable}.{name} = {value!r}: must be a number > 0")

