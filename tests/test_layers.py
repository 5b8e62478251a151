"""The package's floors import one way: each module only from its own floor
or the floors below it (see the README's layout section).

Reads every module of mlgo_host with ``ast``: imports at the top level and
inside functions and classes count, and so do worker factory strings
(``"mlgo_host.workers.worker:CollectWorker"``, imported by the pool); imports
under ``if TYPE_CHECKING:`` do not (they never run).  A failure names the file, the line and both floors.
"""

from __future__ import annotations

import ast
import os
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "mlgo_host"

# floor -> the top-level modules / sub-packages of mlgo_host on it
FLOORS: dict[int, tuple[str, ...]] = {
    1: ("errors", "formats", "fsutil", "languages", "procs", "progress", "shipped"),
    2: ("channel",),
    3: ("episode", "collected"),
    4: ("policies",),
    5: ("corpus", "measure"),
    6: ("workers",),
    7: ("search",),
    8: ("evaluation",),
    9: ("learning",),
    10: ("training",),
    11: ("serve",),
    12: ("commands", "cli", "demo", "__main__"),
}
FLOOR_OF = {name: floor for floor, names in FLOORS.items() for name in names}
FACTORY = re.compile(r"(mlgo_host(?:\.\w+)+):\w+")  # "module:attribute", as make_pool takes


def _unit(dotted: str) -> str | None:
    """``mlgo_host.workers.pool`` -> ``workers``; None outside the package."""
    parts = dotted.split(".")
    if parts[0] != "mlgo_host":
        return None
    return parts[1] if len(parts) > 1 else ""  # "" = the package itself


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_package: bool):
    """(line, imported dotted name) of every import that can run."""
    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.orelse:  # the else branch still runs
                    yield from visit_one(sub)
                continue
            yield from visit_one(child)

    def visit_one(node):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from mlgo_host import learning` imports the sub-package learning
            if target == "mlgo_host":
                for a in node.names:
                    yield node.lineno, f"mlgo_host.{a.name}"
            else:
                yield node.lineno, target
                # `from mlgo_host.policies import replay` may import a module (the circle check
                # keeps the names that are modules; the floor of each is the target's)
                for a in node.names:
                    yield node.lineno, f"{target}.{a.name}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and FACTORY.fullmatch(node.value):
            yield node.lineno, FACTORY.fullmatch(node.value).group(1)
        else:
            yield from visit(node)

    yield from visit(tree)


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def back_edges() -> list[str]:
    problems = []
    for path in _modules():
        module = _module_name(path)
        unit = _unit(module)
        if unit == "":  # mlgo_host/__init__.py: the version only, checked below
            continue
        here = FLOOR_OF.get(unit)
        if here is None:
            problems.append(f"{path.relative_to(PACKAGE.parent)}: {unit!r} is on no floor (add it to FLOORS)")
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, target in _imports(tree, module, path.name == "__init__.py"):
            dep = _unit(target)
            if dep is None or dep == "":
                continue
            there = FLOOR_OF.get(dep)
            if there is None or there > here:
                problems.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {unit} (floor {here}) imports "
                                f"{target} (floor {there if there is not None else '?'})")
    return problems


def test_every_module_is_on_a_floor_and_imports_only_from_below():
    problems = back_edges()
    assert not problems, "imports from a higher floor:\n" + "\n".join(problems)


def test_the_package_root_imports_nothing_of_its_own():
    # `import mlgo_host` runs __init__.py before any floor: it must not pull one in.
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    own = [t for _, t in _imports(tree, "mlgo_host", True) if _unit(t) not in (None, "")]
    assert not own


def _check_source(tmp_path, relpath: str, source: str) -> list[str]:
    """back_edges() over a one-module copy of the package layout."""
    global PACKAGE
    root = tmp_path / "mlgo_host"
    f = root / relpath
    f.parent.mkdir(parents=True, exist_ok=True)
    (root / "__init__.py").write_text("")
    f.write_text(source)
    saved, PACKAGE = PACKAGE, root
    try:
        return back_edges()
    finally:
        PACKAGE = saved


@pytest.mark.parametrize("source, bad", [
    ("from mlgo_host.workers.pool import make_pool\n", True),  # top level, upward
    ("def f():\n    import mlgo_host.serve.server\n", True),  # inside a function
    ("from ..serve import server\n", True),  # relative
    ("from mlgo_host import commands\n", True),
    ("FACTORY = 'mlgo_host.serve.server:Server'\n", True),  # a worker factory string
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mlgo_host.serve import server\n", False),
    ("from mlgo_host.channel.codec import Header\nfrom . import actor\n", False),  # below, same floor
])
def test_the_checker_finds_upward_imports(tmp_path, source, bad):
    problems = _check_source(tmp_path, os.path.join("policies", "x.py"), source)
    assert bool(problems) == bad, problems
    if bad:
        assert problems[0].startswith(os.path.join("mlgo_host", "policies", "x.py") + ":")


#: third-party packages only the learning floor (and above) may import: workers,
#: the search engine and everything below them answer decisions with numpy
TENSORFLOW = ("tensorflow", "tf_agents", "tensorflow_probability", "tf_keras")


def tensorflow_below_learning() -> list[str]:
    problems = []
    for path in _modules():
        module = _module_name(path)
        floor = FLOOR_OF.get(_unit(module) or "", 0)
        if floor >= FLOOR_OF["learning"]:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, target in _imports(tree, module, path.name == "__init__.py"):
            if target.split(".")[0] in TENSORFLOW:
                problems.append(f"{path.relative_to(PACKAGE.parent)}:{line}: imports {target} below learning/")
    return problems


def test_no_tensorflow_below_the_learning_floor():
    problems = tensorflow_below_learning()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("unit, bad", [("workers", True), ("evaluation", True), ("search", True),
                                       ("learning", False), ("training", False)])
def test_the_tensorflow_check_finds_an_import_below_learning(tmp_path, unit, bad):
    global PACKAGE
    root = tmp_path / "mlgo_host"
    (root / unit).mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / unit / "w.py").write_text("def f():\n    import tensorflow as tf\n")
    saved, PACKAGE = PACKAGE, root
    try:
        want = [f"mlgo_host/{unit}/w.py:2: imports tensorflow below learning/"] if bad else []
        assert tensorflow_below_learning() == want
    finally:
        PACKAGE = saved


# -- circles inside one folder -------------------------------------------------
def _folder_edges() -> dict[str, list[tuple[str, int]]]:
    """module -> [(module it imports, line)], both in one folder (``__init__``
    counts as its folder's module; the implicit import of a package by its
    submodules does not)."""
    paths = {_module_name(p): p for p in _modules()}

    def folder(module: str) -> str:
        return module if paths[module].name == "__init__.py" else module.rpartition(".")[0]

    edges: dict[str, list[tuple[str, int]]] = {m: [] for m in paths}
    for module, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, target in _imports(tree, module, path.name == "__init__.py"):
            if target in paths and target != module and folder(target) == folder(module):
                edges[module].append((target, line))
    return edges


def import_circles() -> list[str]:
    """Each circle of imports inside one folder, once: ``a.py:3 -> b.py:7 -> a``."""
    edges = _folder_edges()
    seen_cycles, problems = set(), []

    def where(m: str) -> str:
        return m.replace(".", "/") + ("/__init__.py" if (PACKAGE.parent / m.replace(".", "/")).is_dir() else ".py")

    def walk(start: str, node: str, trail: list[tuple[str, int]]):
        for target, line in edges[node]:
            if target == start:
                cycle = trail + [(node, line)]
                key = frozenset(m for m, _ in cycle)
                if key not in seen_cycles:
                    seen_cycles.add(key)
                    problems.append(" -> ".join(f"{where(m)}:{ln}" for m, ln in cycle) + f" -> {where(start)}")
            elif target > start and target not in {m for m, _ in trail} and target != node:
                walk(start, target, trail + [(node, line)])

    for start in sorted(edges):
        walk(start, start, [])
    return problems


def test_no_import_circle_inside_a_folder():
    # an import inside a function hides a circle from Python, not from the reader:
    # each folder's modules import one way
    problems = import_circles()
    assert not problems, "import circles:\n" + "\n".join(problems)


@pytest.mark.parametrize("files, circle", [
    ({"a.py": "from mlgo_host.policies import b\n", "b.py": "def f():\n    from mlgo_host.policies.a import x\n"},
     "mlgo_host/policies/a.py:1 -> mlgo_host/policies/b.py:2 -> mlgo_host/policies/a.py"),
    ({"__init__.py": "def load():\n    from mlgo_host.policies.b import x\n", "b.py": "from mlgo_host.policies import load\n"},
     "mlgo_host/policies/__init__.py:2 -> mlgo_host/policies/b.py:1 -> mlgo_host/policies/__init__.py"),
    ({"a.py": "from . import b\n", "b.py": "from . import c\n", "c.py": "import mlgo_host.policies.a\n"},
     "mlgo_host/policies/a.py:1 -> mlgo_host/policies/b.py:1 -> mlgo_host/policies/c.py:1 -> mlgo_host/policies/a.py"),
    ({"a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mlgo_host.policies import b\n",
      "b.py": "from mlgo_host.policies import a\n"}, None),
    ({"__init__.py": "from mlgo_host.policies.b import x\n", "b.py": "import os\n"}, None),  # a package and its module
])
def test_the_circle_check_finds_a_planted_circle(tmp_path, files, circle):
    global PACKAGE
    root = tmp_path / "mlgo_host"
    (root / "policies").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "policies" / "__init__.py").write_text("")
    for name, source in files.items():
        (root / "policies" / name).write_text(source)
    saved, PACKAGE = PACKAGE, root
    try:
        assert import_circles() == ([circle] if circle else [])
    finally:
        PACKAGE = saved
