"""No import cycles in the package, counting imports inside functions (the deferred ones).

Imports flow one way (errors/spec → models/tools/store → runtime → recording/replay →
plugin/CLI); a function-level import that points back up is still a cycle, only hidden until
the function runs. The graph is read with `ast`, not by importing: `from a import b` depends on
`a` and, when `b` is a module, on `a.b`; `import a.b` depends on `a.b`. Imports under
`if TYPE_CHECKING:` are left out (they never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pytest_harness

PACKAGE = Path(pytest_harness.__file__).parent


def module_names(root: Path) -> dict[str, Path]:
    """Every module of the package under `root`, by dotted name (a package by its own name)."""
    names: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return any(
        isinstance(node, ast.Name | ast.Attribute)
        and (node.id if isinstance(node, ast.Name) else node.attr) == "TYPE_CHECKING"
        for node in ast.walk(test)
    )


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """The package modules `name` imports anywhere (functions included), TYPE_CHECKING aside."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        base = node.module or ""
        if node.level:
            package = name.split(".") if is_package else name.split(".")[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join([*package, base] if base else package)
        return [base, *(f"{base}.{alias.name}" for alias in node.names)]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.update(t for t in targets(node) if t in modules)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    found.discard(name)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = module_names(root)
    return {name: imports_of(name, path, set(modules)) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@pytest.fixture(scope="module")
def package_graph() -> dict[str, set[str]]:
    return import_graph(PACKAGE)


def test_the_package_has_no_import_cycle(package_graph: dict[str, set[str]]) -> None:
    assert cycles(package_graph) == []


LAYERS = (
    ("errors", "spec", "eager", "importing", "principal"),
    ("models", "tools", "store"),
    ("runtime",),
    ("recording", "replay", "temporal"),
    ("plugin", "cli", "pytest_plugin"),
)
"""The package's layers, lowest first (errors/spec → models/tools/store → runtime →
recording/replay → plugin/CLI), by the first name under `pytest_harness`."""


def layer_of(module: str) -> int | None:
    """The layer of `pytest_harness.<top>…`, or None for a module outside `LAYERS`."""
    top = module.split(".")[1] if module.count(".") else ""
    return next((i for i, names in enumerate(LAYERS) if top in names), None)


ABOVE_ALLOWED = {
    "pytest_harness.runtime.harness": {
        "pytest_harness.recording.model",
        "pytest_harness.replay.replayer",
    },
}
"""Known imports above a module's layer, each in a function: `Harness.recording`/`replay`,
the façade's doors to recording and replay. Nothing else may point up."""


def test_no_module_imports_above_its_layer(package_graph: dict[str, set[str]]) -> None:
    """Every module in `LAYERS` (the ones split along their seams, #13, and `tools/context.py`,
    which once imported the run loop's principal, among them) imports, even in a function,
    only its layer and the ones below it."""
    above = {
        module: sorted(
            m for m in imports - ABOVE_ALLOWED.get(module, set()) if (layer_of(m) or 0) > own
        )
        for module, imports in package_graph.items()
        if (own := layer_of(module)) is not None
    }
    assert {module: found for module, found in above.items() if found} == {}


def test_the_layer_check_reaches_the_split_modules(package_graph: dict[str, set[str]]) -> None:
    split = (
        "pytest_harness.principal",
        "pytest_harness.store.base",
        "pytest_harness.store.records",
        "pytest_harness.temporal.dispatch",
        "pytest_harness.temporal.workflow",
        "pytest_harness.tools.context",
        "pytest_harness.tools.problems",
        "pytest_harness.tools.registry",
        "pytest_harness.tools.schema",
    )
    assert [m for m in split if m not in package_graph or layer_of(m) is None] == []


def write(root: Path, files: dict[str, str]) -> Path:
    package = root / "pkg"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return package


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {"__init__.py": "", "a.py": "from pkg import b\n", "b.py": "import pkg.a\n"},
            [["pkg.a", "pkg.b"]],
            id="top-level",
        ),
        pytest.param(
            {
                "__init__.py": "",
                "a.py": "from pkg.b import f\n",
                "b.py": "def f():\n    from pkg.c import g\n",
                "c.py": "def g():\n    from . import a\n",
            },
            [["pkg.a", "pkg.b", "pkg.c"]],
            id="deferred-and-relative",
        ),
        pytest.param(
            {
                "__init__.py": "",
                "a.py": (
                    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n"
                ),
                "b.py": "from pkg.a import A\n",
            },
            [],
            id="type-checking-only",
        ),
        pytest.param(
            {
                "__init__.py": "from pkg.sub import thing\n",
                "sub/__init__.py": "",
                "sub/thing.py": "def f():\n    import pkg\n",
            },
            [["pkg", "pkg.sub.thing"]],
            id="package-init",
        ),
    ],
)
def test_the_checker_finds_cycles(
    tmp_path: Path, files: dict[str, str], expected: list[list[str]]
) -> None:
    assert cycles(import_graph(write(tmp_path, files))) == expected
