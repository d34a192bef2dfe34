"""The model's arguments that do not fit a tool's schema, in words the model can act on.

`Tool.validate` raises `InvalidToolArguments` and `Tool.invoke` answers with its message; both
list pydantic's errors as `problems_of` words them: an unexpected argument with the nearest
name, a missing one, `expected an integer, got 'abc'` for a value of the wrong type or range.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_harness.errors import did_you_mean
from pytest_harness.tools.outcome import _short

if TYPE_CHECKING:
    from pydantic import ValidationError
    from pydantic_core import ErrorDetails

__all__ = ["InvalidToolArguments", "problems_of"]


class InvalidToolArguments(ValueError):
    """The model's arguments do not fit the tool's schema; `.problems` lists each, readably."""

    def __init__(self, tool: str, problems: Sequence[str]) -> None:
        self.tool = tool
        self.problems = tuple(problems)
        super().__init__(f"invalid arguments for tool {tool!r}: {'; '.join(self.problems)}")


def problems_of(names: Sequence[str], exc: ValidationError) -> list[str]:
    """The errors pydantic found in a tool's arguments, one readable problem each.

    `names` are the tool's parameters (for "did you mean").
    """
    problems = []
    for error in exc.errors(include_url=False):
        loc, kind = error["loc"], error["type"]
        if kind == "extra_forbidden" and len(loc) == 1:
            unexpected = str(loc[0])
            hint = did_you_mean(unexpected, names) if names else " (the tool takes no arguments)"
            problems.append(f"unexpected argument {unexpected!r}{hint}")
        elif kind == "missing" and len(loc) == 1:
            problems.append(f"missing required argument {loc[0]!r}")
        elif kind == "missing":
            problems.append(
                f"{_format_loc(loc)}: missing required field (got {_short(error['input'])})"
            )
        else:
            got = _short(error["input"])
            problems.append(f"{_format_loc(loc)}: {_expected(error)}, got {got}")
    return problems


def _format_loc(loc: tuple[int | str, ...]) -> str:
    if not loc:
        return "arguments"
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "tuple_type": "a list",
    "set_type": "a list of distinct values",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "dataclass_type": "an object",
    "none_required": "null",
}
_BOUNDS = {
    "greater_than": ("a number greater than", "gt"),
    "greater_than_equal": ("a number of at least", "ge"),
    "less_than": ("a number less than", "lt"),
    "less_than_equal": ("a number of at most", "le"),
    "string_too_short": ("a string of at least {} characters", "min_length"),
    "string_too_long": ("a string of at most {} characters", "max_length"),
    "too_short": ("at least {} items", "min_length"),
    "too_long": ("at most {} items", "max_length"),
}


def _expected(error: ErrorDetails) -> str:
    """`expected an integer` for pydantic's `Input should be a valid integer, unable to …`."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}"
    if kind in ("literal_error", "enum") and "expected" in ctx:
        return f"expected {ctx['expected']}"
    if kind in _BOUNDS and _BOUNDS[kind][1] in ctx:
        text, key = _BOUNDS[kind]
        value = ctx[key]
        return f"expected {text.format(value)}" if "{}" in text else f"expected {text} {value}"
    message = error["msg"]
    if message.startswith("Input should be "):
        return "expected " + message.removeprefix("Input should be ")
    return message[:1].lower() + message[1:]
