"""What a trainer checks before any work: its gin parameters' ranges (a count of 0 would run nothing and
still publish a policy, a negative seed fails every module), and that its root directory is its own run's
(``run.json``: resuming a root with another algorithm or corpus would replace what it holds)."""

from __future__ import annotations

import os

from mlgo_host.errors import ConfigError
from mlgo_host.formats import read_json_object
from mlgo_host.fsutil import atomic_write_json

RUN_RECORD = "run.json"


def check_counts(configurable: str, minimum: int, **values) -> None:
    """Each of ``values`` (``configurable``'s parameters) a whole number >= ``minimum`` (None: left to the trainer)."""
    _check_numbers(configurable, lambda v: isinstance(v, int) and v >= minimum, f"a whole number >= {minimum}",
                   values)


def check_positive(configurable: str, **values) -> None:
    _check_numbers(configurable, lambda v: v > 0, "a number > 0", values)


def check_at_least_zero(configurable: str, **values) -> None:
    _check_numbers(configurable, lambda v: v >= 0, "a number >= 0", values)


def check_fraction(configurable: str, low_open: bool, high_open: bool, **values) -> None:
    """Each of ``values`` a number between 0 and 1, each end excluded where ``low_open`` / ``high_open``."""
    ends = f"{'(' if low_open else '['}0, 1{')' if high_open else ']'}"
    _check_numbers(configurable, lambda v: (0 < v if low_open else 0 <= v) and (v < 1 if high_open else v <= 1),
                   f"a number in {ends}", values, none_ok=False)


def _check_numbers(configurable: str, ok, words: str, values: dict, none_ok: bool = True) -> None:
    for name, value in values.items():
        if value is None and none_ok:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):  # NaN fails too
            raise ConfigError(f"{configurable}.{name} = {value!r}: must be {words}")


def make_root(root_dir: str) -> None:
    try:
        os.makedirs(root_dir, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--root_dir {root_dir}: cannot make the directory: {e.strerror}") from None


def claim_root(root_dir: str, algorithm: str, corpus_dir: str, split: dict | None = None) -> None:
    """Refuse ``root_dir`` when its ``run.json`` says it was started with another algorithm, corpus or
    ``split`` (another split would train on modules held out before); record them when it holds nothing
    yet.  A root without the record, or recorded without a split, resumes unchecked (a guess could be wrong)."""
    path = os.path.join(root_dir, RUN_RECORD)
    this = {"algorithm": algorithm, "corpus": os.path.abspath(corpus_dir)}
    if split is not None:
        this["split"] = split
    if not set(os.listdir(root_dir)) - {RUN_RECORD}:  # new, or stopped before any output: nothing to keep
        atomic_write_json(path, this)
        return
    if not os.path.exists(path):
        return
    was = read_json_object(path, "run record")
    differs = []
    if was.get("algorithm") != algorithm:
        differs.append(f"run.algorithm {was.get('algorithm')!r}, not {algorithm!r}")
    corpus = was.get("corpus")
    # the same directory, however spelt (a symlink, a trailing slash)
    if not (isinstance(corpus, str) and os.path.realpath(corpus) == os.path.realpath(this["corpus"])):
        differs.append(f"--corpus {corpus}, not {this['corpus']}")
    if split is not None and "split" in was and was["split"] != split:
        differs.append(f"the split {_settings(was['split'])}, not {_settings(split)}")
    if differs:
        raise ConfigError(f"--root_dir {root_dir} holds a run started with {' and '.join(differs)} ({path}); "
                          f"resume it with its own configuration, or give another --root_dir")


def _settings(split) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in sorted(split.items())) if isinstance(split, dict) else repr(split)
