"""The bridge to CEL (the `common-expression-language` package).

`compile_expression` turns source into a `CelProgram` or raises `CelSyntaxError` with the
position CEL reported; `CelProgram.evaluate` runs it on a mapping of variables.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "ArgumentReads",
    "CelError",
    "CelProgram",
    "CelSyntaxError",
    "argument_reads",
    "compile_expression",
    "tool_conjunct",
]

_POSITION = re.compile(r"<input>:(\d+):(\d+):\s*(.*)")
_module: ModuleType | None = None
_loading = threading.Lock()
"""Held while the extension loads: two threads compiling a process's first expressions at
once (a worker's workflow tasks) must not run its initialisation twice (see `_cel`)."""


class CelError(Exception):
    """An expression failed to evaluate (unknown key, type mismatch).

    `.message` is CEL's own message (`no such key: 'amout'`), whole; `str()` adds the
    expression it came from.
    """

    def __init__(self, expression: str, message: str) -> None:
        self.expression = expression
        self.message = message
        super().__init__(f"{message} in {expression!r}")


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
    tool: str | None = None
    """The tool an expression `tool == "…" && …` is about (see `tool_conjunct`): for any other
    tool it is false whatever the rest says (CEL's `&&` is false when either side is, even when
    the other side is an error), so it is not run."""

    def evaluate(self, variables: Mapping[str, Any]) -> Any:
        """Run the expression; raise `CelError` naming the expression when it cannot.

        Only the variables the expression names are handed to CEL (when the bindings say which
        it names): converting the others would cost time and change nothing.
        """
        tool = self.tool
        if tool is not None:
            given_tool = variables.get("tool")
            if type(given_tool) is str and given_tool != tool:
                return False
        names = self.variables
        if names:
            given = {name: variables[name] for name in names if name in variables}
        else:
            given = dict(variables)
        try:
            return self.program.execute(given)
        except KeyError as exc:
            key = exc.args[0] if exc.args else ""
            raise CelError(self.source, f"no such key: {key!r}") from None
        except (TypeError, RuntimeError, ValueError) as exc:
            raise CelError(self.source, f"{type(exc).__name__}: {exc}") from None


@dataclass(frozen=True, slots=True)
class ArgumentReads:
    """What a rule condition reads of its call: `args` keys, and tools it names.

    `names` are the keys read as `args.x` or `args["x"]`, each once, in order, without those
    the condition also tests with `has(args.x)` or `"x" in args` (how it reads an optional
    parameter). `tools` are the tools named by `tool == "…"` or `tool in [...]` (empty: any).
    """

    names: tuple[str, ...]
    tools: tuple[str, ...]


_TOKEN = re.compile(
    r"""
    (?P<space>\s+|//[^\n]*)
  | (?P<string>(?:[rR][bB]?|[bB][rR]?)?
        (?:'''[\s\S]*?'''|\"\"\"[\s\S]*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>==|!=|<=|>=|&&|\|\||.)
    """,
    re.VERBOSE,
)
_Token = tuple[str, str]


def argument_reads(source: str) -> ArgumentReads:
    """Scan a condition for the `args` keys it reads and the tools it names (no evaluation)."""
    tokens = _tokens(source)

    def at(i: int) -> _Token:
        return tokens[i] if 0 <= i < len(tokens) else ("", "")

    reads: list[str] = []
    guarded: set[str] = set()
    tools: list[str] = []
    for i, (kind, text) in enumerate(tokens):
        if kind == "name" and text == "args" and at(i - 1) != ("op", "."):
            key = _key_after(at, i)
            if key is None:
                continue
            reads.append(key)
            if at(i - 2) == ("name", "has") and at(i - 1) == ("op", "("):
                guarded.add(key)
        elif kind == "string" and at(i + 1) == ("name", "in") and at(i + 2) == ("name", "args"):
            guarded.add(_literal(text))
        elif kind == "name" and text == "tool" and at(i - 1) != ("op", "."):
            if at(i + 1) == ("op", "==") and at(i + 2)[0] == "string":
                tools.append(_literal(at(i + 2)[1]))
            elif at(i + 1) == ("name", "in") and at(i + 2) == ("op", "["):
                j = i + 3
                while at(j)[0] == "string":
                    tools.append(_literal(at(j)[1]))
                    j += 2 if at(j + 1) == ("op", ",") else 1
        elif kind == "string" and at(i + 1) == ("op", "==") and at(i + 2) == ("name", "tool"):
            tools.append(_literal(text))
    names = tuple(dict.fromkeys(n for n in reads if n not in guarded))
    return ArgumentReads(names=names, tools=tuple(dict.fromkeys(tools)))


def _tokens(source: str) -> list[_Token]:
    tokens: list[_Token] = []
    for match in _TOKEN.finditer(source):
        kind = match.lastgroup or "op"
        if kind != "space":
            tokens.append((kind, match.group()))
    return tokens


def tool_conjunct(source: str) -> str | None:
    """The tool `T` of an expression `tool == "T" && …` that is a chain of `&&` only, else None.

    Without `||` and `?:` anywhere in it (`&&` binds less tightly than anything else CEL has),
    such an expression is `(tool == "T") && …`: false for any other tool.
    """
    tokens = _tokens(source)
    if len(tokens) < 5 or tokens[:2] != [("name", "tool"), ("op", "==")]:
        return None
    kind, literal = tokens[2]
    if kind != "string" or tokens[3] != ("op", "&&") or "\\" in literal:
        return None
    if literal[:1] not in ("'", '"') or literal[:3] in ("'''", '"""') or len(literal) < 2:
        return None
    if any(token in (("op", "||"), ("op", "?")) for token in tokens):
        return None
    return literal[1:-1]


def _key_after(at: Callable[[int], _Token], i: int) -> str | None:
    """The key read right after `args` at `i`: `args.x` or `args["x"]`, else None.

    `args.size()`, `args.exists(k, …)`: a name followed by `(` is a method called on the map,
    not a key read.
    """
    if at(i + 1) == ("op", ".") and at(i + 2)[0] == "name":
        return None if at(i + 3) == ("op", "(") else at(i + 2)[1]
    if at(i + 1) == ("op", "[") and at(i + 2)[0] == "string" and at(i + 3) == ("op", "]"):
        return _literal(at(i + 2)[1])
    return None


def _literal(token: str) -> str:
    """The text of a CEL string literal (prefix and quotes dropped, simple escapes undone)."""
    prefix = len(token) - len(token.lstrip("rRbB"))
    raw = "r" in token[:prefix].lower()
    body = token[prefix:]
    quote = body[:3] if body[:3] in ("'''", '"""') else body[0]
    body = body[len(quote) : -len(quote)]
    return body if raw else re.sub(r"\\(.)", r"\1", body)


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
    tool = tool_conjunct(source) if "tool" in names or not names else None
    return CelProgram(source=source, program=program, variables=names, tool=tool)


def _cel() -> ModuleType:
    """The compiled CEL extension module.

    The `cel` package's `__init__` also imports its command-line interface (typer and rich,
    about 200 ms). Loading the compiled extension alone keeps that off every process that
    merely evaluates rules, such as a worker answering one approval; if the package is laid
    out differently, the ordinary import is used.

    Loaded once per process, under a lock: initialising the extension a second time panics
    (its logger can be set once), and a Rust panic is a `BaseException`, which a Temporal
    workflow task does not catch: the task then ends with no command at all, a
    nondeterminism error for the run.
    """
    global _module
    if _module is not None:
        return _module
    with _loading:
        if _module is not None:  # another thread loaded it meanwhile
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
