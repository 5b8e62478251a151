"""The reader of the package's versioned JSON files (policy metadata, replays, tune manifests, ...):
objects whose ``"format"`` is ``"mlgo_host.KIND/N"``, and of its plain JSON object files (a training
root's state, header and run record). Every fault is a :class:`ConfigError` naming the file, in the
same words whatever the kind (``what``: "saved policy", "replay file", ...)."""

from __future__ import annotations

import json
import os
from typing import Any

from mlgo_host.errors import ConfigError


def _version(fmt: Any) -> tuple[str, int] | None:
    """``"mlgo_host.KIND/N"`` -> (``"mlgo_host.KIND"``, N); None otherwise."""
    if not isinstance(fmt, str):
        return None
    kind, _, n = fmt.rpartition("/")
    return (kind, int(n)) if kind and n.isdigit() else None


def check_format(doc: Any, fmt: str, what: str, where: str) -> dict:
    """``doc`` (JSON read from ``where``) when it is an object of format ``fmt``, else ConfigError."""
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: not a {what} (a JSON {_json_type(doc)}, not an object)")
    got = doc.get("format")
    if got == fmt:
        return doc
    have, want = _version(got), _version(fmt)
    if have is not None and want is not None and have[0] == want[0] and have[1] > want[1]:
        raise ConfigError(f"{where}: a {what} from a newer mlgo_host (format {got!r}, this one reads "
                          f"{want[1]}); upgrade mlgo_host")
    raise ConfigError(f"{where}: not a {what} (format {got!r}, expected {fmt!r})")


def read_json_object(path: str | os.PathLike, what: str, hint: str = "") -> dict:
    """The JSON object in ``path``; ConfigError naming it and ``what`` it is when it cannot be read or is not
    an object (``hint``: what the user can do)."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: unreadable {what} ({e}){hint}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: unreadable {what} (a JSON {type(doc).__name__}, not an object){hint}")
    return doc


def read_format_json(path: str | os.PathLike, fmt: str, what: str, hint: str = "") -> dict:
    """The JSON object of format ``fmt`` in ``path`` (``hint``: what to do when it is missing)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise ConfigError(f"{path}: not a {what} (no such file)" + (f"; {hint}" if hint else "")) from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: not a {what} (a directory)") from None
    except OSError as e:
        raise ConfigError(f"{path}: unreadable {what}: {e.strerror}") from None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: unreadable {what}: not UTF-8 text") from None
    except ValueError as e:
        raise ConfigError(f"{path}: unreadable {what}: not JSON ({e})") from None
    return check_format(doc, fmt, what, path)


def _json_type(doc: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}.get(type(doc), "null")
