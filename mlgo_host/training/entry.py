"""The gin side of ``mlgo-host train``: parsing the configuration, then the trainer it selects."""

from __future__ import annotations

import difflib
import inspect
import logging
import os
import re
from pathlib import Path

import gin

from mlgo_host.errors import ConfigError
from mlgo_host.fsutil import atomic_write_bytes
from mlgo_host.training import online
from mlgo_host.training.bc_loop import train_bc_from_corpus
from mlgo_host.training.train_loop import train


@gin.configurable(module="run")
def run(root_dir: str, corpus_dir: str, algorithm: str | None = None, progress: bool = True):
    # each trainer makes root_dir after checking its parameters
    if algorithm is None:  # no default: a configuration that names no trainer is not one (an empty file)
        raise ConfigError("the gin configuration sets no run.algorithm ('ppo', 'bc' or 'search'); "
                          "start from configs/inlining/ppo.gin, bc.gin or search.gin")
    if algorithm == "ppo":
        result = train(root_dir, corpus_dir, progress=progress)
    elif algorithm == "bc":
        result = train_bc_from_corpus(root_dir, corpus_dir, progress=progress)
    elif algorithm == "search":
        from mlgo_host.training.search_loop import train_search

        result = train_search(root_dir, corpus_dir, progress=progress)
    else:
        raise ConfigError(f"unknown run.algorithm {algorithm!r} (ppo, bc or search)")
    _write_operative_config(root_dir)
    return result


def run_online(root_dir: str, collected_dir: str, baseline_stats: str, progress: bool = True):
    """One iteration on collected episodes (``train --collected``), configured by the macros of corpus
    training unless ``online.train_from_collected.*`` binds them."""
    try:
        algorithm = gin.query_parameter("run.algorithm")
    except ValueError:
        algorithm = "ppo"
    if algorithm != "ppo":
        raise ConfigError(f"--collected trains PPO, this configuration selects run.algorithm {algorithm!r} "
                          f"(use configs/inlining/ppo.gin)")
    online.bind_common_macros()
    result = online.train_from_collected(root_dir, collected_dir, baseline_stats, progress=progress)
    _write_operative_config(root_dir)
    return result


def _write_operative_config(root_dir: str) -> None:
    atomic_write_bytes(os.path.join(root_dir, "operative_config.gin"), gin.operative_config_str().encode())


_NO_PARAMETER = re.compile(r"Configurable '([\w./]+)' doesn't have a parameter named '(\w+)'")
_MACRO_REF = re.compile(r"%([\w./]+)")
_BOUND_PARAM = re.compile(r"^([\w./]+)\.(\w+) = ", re.MULTILINE)


def parse_gin(gin_files: list[str], gin_bindings: list[str]) -> None:
    """Parse the gin files, then the bindings.  A mistake is a :class:`ConfigError`, and so is a macro binding
    nothing reads (a typo), naming the closest known name."""
    for f in gin_files:
        if not os.path.exists(f):
            raise ConfigError(f"gin file not found: {f}")
    # includes are spelled 'configs/...' (as in ml-compiler-opt): search from the directory holding configs/
    gin_files = [os.path.abspath(f) for f in gin_files]
    roots = [r for r in dict.fromkeys(_configs_root(f) for f in gin_files) if r is not None]
    for root in roots:
        gin.add_config_file_search_path(root)
    root_logger = logging.getLogger()
    level = root_logger.level
    root_logger.setLevel(logging.CRITICAL)  # gin logs an ERROR for every search-path miss
    cwd = os.getcwd()
    try:
        # from the configs' root: gin's fallback, an include as a package path, crashes
        # (TypeError) when the repository root is on sys.path (configs/: a namespace package)
        if roots:
            os.chdir(roots[0])
        gin.parse_config_files_and_bindings(gin_files, gin_bindings)
    except Exception as e:  # gin raises ValueError, SyntaxError, ImportError, ...
        first, *where = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        where_text = f" [{': '.join(where)}]" if where else ""  # gin's "In file ..., line N" and the line
        raise ConfigError(f"bad gin configuration: {first}{_parameter_hint(first)}{where_text}") from None
    finally:
        os.chdir(cwd)
        root_logger.setLevel(level)
    _refuse_unread_macros(gin_bindings)


def _configs_root(path: str) -> str | None:
    """The directory holding the ``configs/`` tree ``path`` lives in."""
    return next((str(d.parent) for d in Path(os.path.abspath(path)).parents if d.name == "configs"), None)


def _parameters(selector: str) -> list[str]:
    try:
        return list(inspect.signature(gin.get_configurable(selector)).parameters)
    except (KeyError, ValueError, TypeError):
        return []


def _parameter_hint(message: str) -> str:
    m = _NO_PARAMETER.search(message)
    if not m:
        return ""
    close = difflib.get_close_matches(m.group(2), _parameters(m.group(1)), n=1)
    return f" Did you mean {m.group(1)}.{close[0]}?" if close else ""


def _refuse_unread_macros(gin_bindings: list[str]) -> None:
    config = gin.config_str()
    read = set(_MACRO_REF.findall(config))
    params = {f"{sel}.{p}" for sel in {m[0] for m in _BOUND_PARAM.findall(config)} for p in _parameters(sel)}
    for binding in gin_bindings:
        for line in binding.splitlines():
            key = line.split("=", 1)[0].strip()
            if "=" not in line or not key or "." in key.rsplit("/", 1)[-1]:
                continue  # not a macro binding (gin checked selector.parameter itself)
            if key not in read:
                raise ConfigError(f"--gin_bindings {line.strip()}: nothing reads the macro {key!r}"
                                  f"{_closest(key, read, params)}")


def _closest(name: str, macros: set[str], params: set[str]) -> str:
    by_param = {p.rsplit(".", 1)[1]: p for p in sorted(params)}
    if name in by_param:  # a parameter without its configurable
        return f"; did you mean {by_param[name]}?"
    close = difflib.get_close_matches(name, sorted(macros) + sorted(by_param), n=1)
    if not close:
        return f" (known macros: {', '.join(sorted(macros))})" if macros else ""
    return f"; did you mean {close[0] if close[0] in macros else by_param[close[0]]}?"
