"""The bridge to CEL (the `common-expression-language` package).

`compile_expression` turns source into a `CelProgram` or raises `CelSyntaxError` with the
position CEL reported; `CelProgram.evaluate` runs it on a mapping of variables.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["CelError", "CelProgram", "CelSyntaxError", "compile_expression"]

_POSITION = re.compile(r"<input>:(\d+):(\d+):\s*(.*)")
_module: ModuleType | None = None


class CelError(Exception):
    """An expression failed to evaluate (unknown key, type mismatch)."""


class CelSyntaxError(Exception):
    """An expression does not compile; `.line` and `.column` are 1-based positions in it."""

    def __init__(self, expression: str, message: str, line: int | None, column: int | None):
        self.expression = expression
        self.line = line
        self.column = column
        self.message = message
        where = f" at column {column}" if column is not None else ""
        super().__init__(f"CEL syntax error{where}: {message} in {expression!r}")


@dataclass(frozen=True, slots=True)
class CelProgram:
    """A compiled CEL expression."""

    source: str
    program: Any
    variables: frozenset[str]

    def evaluate(self, variables: Mapping[str, Any]) -> Any:
        """Run the expression; raise `CelError` naming the expression when it cannot."""
        try:
            return self.program.execute(dict(variables))
        except (KeyError, TypeError, RuntimeError, ValueError) as exc:
            raise CelError(f"{self.source!r}: {type(exc).__name__}: {exc}") from None


def compile_expression(source: str) -> CelProgram:
    """Compile `source`; raise `CelSyntaxError` (with the CEL position) when it is not valid."""
    cel = _cel()
    try:
        program = cel.compile(source)
    except ValueError as exc:
        text = str(exc)
        match = _POSITION.search(text)
        if match:
            detail = match.group(3).split("\n")[0].strip()
            raise CelSyntaxError(source, detail, int(match.group(1)), int(match.group(2))) from None
        raise CelSyntaxError(source, text.split("\n")[0], None, None) from None
    try:
        names = frozenset(str(v).split(".")[0] for v in program.variables())
    except Exception:  # older bindings without introspection: nothing to check against
        names = frozenset()
    return CelProgram(source=source, program=program, variables=names)


def _cel() -> ModuleType:
    """The compiled CEL extension module.

    The `cel` package's `__init__` also imports its command-line interface (typer and rich,
    about 200 ms). Loading the compiled extension alone keeps that off every process that
    merely evaluates rules, such as a worker answering one approval; if the package is laid
    out differently, the ordinary import is used.
    """
    global _module
    if _module is not None:
        return _module
    module = sys.modules.get("cel.cel")
    if module is None:
        module = _load_extension_alone()
    if module is None:
        import cel

        module = cel
    _module = module
    return module


def _load_extension_alone() -> ModuleType | None:
    spec = importlib.util.find_spec("cel")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    candidates = [
        p
        for p in folder.iterdir()
        if p.name.startswith("cel.")
        and any(p.name.endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES)
    ]
    if len(candidates) != 1:
        return None
    loader = importlib.machinery.ExtensionFileLoader("cel.cel", str(candidates[0]))
    ext_spec = importlib.util.spec_from_file_location("cel.cel", candidates[0], loader=loader)
    if ext_spec is None:
        return None
    module = importlib.util.module_from_spec(ext_spec)
    loader.exec_module(module)
    if not hasattr(module, "compile"):
        return None
    # A later `import cel` finds its extension here instead of initialising it a second time.
    sys.modules["cel.cel"] = module
    return module
