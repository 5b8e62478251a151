"""Policies that ship in the package (``--policy pretrained-oz``), by name; apart from
:mod:`mlgo_host.policies` so that resolving a name imports nothing heavy (no numpy)."""

from __future__ import annotations

import os

from mlgo_host.errors import ConfigError

#: name -> its directory under mlgo_host/data/ (``make pretrain`` rebuilds it)
SHIPPED = {"pretrained-oz": os.path.join("policies", "pretrained-oz")}


def shipped_policy_dir(name: str) -> str:
    """The directory of a shipped policy; ConfigError when this installation lacks it."""
    d = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", SHIPPED[name])
    if not os.path.isfile(os.path.join(d, "metadata.json")):
        raise ConfigError(f"policy {name!r} is not in this installation ({d}); build it with make pretrain")
    return d


def resolve_policy(name_or_path: str | None) -> str | None:
    """A shipped policy's name as its directory; anything else unchanged."""
    return shipped_policy_dir(name_or_path) if name_or_path in SHIPPED else name_or_path
