"""A tool's schema and validator, derived from its callable's signature and docstring.

`Tool` (`tools/registry.py`) reads its function here: the signature, checked to take every
argument by keyword (`ToolSignatureError` when not), pydantic's validator of the arguments and
their JSON schema (titles left out), and the docstring's description and per-parameter
descriptions. pydantic and docstring_parser are imported on first use.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from pydantic import TypeAdapter

__all__ = ["ToolSignatureError"]


_ARGUMENTS_CONFIG: dict[str, Any] = {"extra": "forbid", "coerce_numbers_to_str": True}
"""Lax validation for LLM JSON (`"250"` → 250, `1001` → `"1001"`); unknown arguments are errors.

pydantic (and docstring_parser) are imported when a tool first needs them: a plain tool
(`tools/plain.py`) whose schema is cached and whose arguments have their exact types needs
neither."""


class ToolSignatureError(TypeError):
    """A callable cannot be a tool (`*args`, positional-only parameters, a type with no schema).

    `.reason` is the message without the tool's name, for a `SpecError` that names it already.
    """

    def __init__(self, tool: str, reason: str) -> None:
        self.tool = tool
        self.reason = reason
        super().__init__(f"tool {tool!r}: {reason}")


@functools.cache
def _schema_generator() -> type[Any]:
    """Pydantic's JSON schema generator minus the titles, which only cost the model tokens."""
    from pydantic.json_schema import GenerateJsonSchema

    class _SchemaWithoutTitles(GenerateJsonSchema):
        def field_title_should_be_set(self, schema: Any) -> bool:
            return False

        def generate(self, schema: Any, mode: Any = "validation") -> Any:
            value = super().generate(schema, mode)
            value.pop("title", None)
            return value

    return _SchemaWithoutTitles


def _signature(name: str, fn: Callable[..., Any]) -> inspect.Signature:
    """`fn`'s signature, or `ToolSignatureError` when it is unreadable or not by keyword."""
    where = _reference(fn)
    try:
        signature = inspect.signature(fn, eval_str=True)
    except Exception as exc:
        raise ToolSignatureError(
            name, f"cannot read the signature of {where}: {_describe(exc)}"
        ) from exc
    for param in signature.parameters.values():
        if param.kind is param.VAR_POSITIONAL or param.kind is param.VAR_KEYWORD:
            stars = "*" if param.kind is param.VAR_POSITIONAL else "**"
            raise ToolSignatureError(
                name,
                f"{where} takes {stars}{param.name}; tools receive their arguments as keyword "
                "arguments, one named parameter each, so declare every argument by name",
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolSignatureError(
                name,
                f"parameter {param.name!r} of {where} is positional-only; tools receive their "
                "arguments as keyword arguments, so drop the '/' from the signature",
            )
    return signature


def _adapter(
    name: str, fn: Callable[..., Any], signature: inspect.Signature
) -> TypeAdapter[dict[str, Any]]:
    """Pydantic's validator of `fn`'s arguments (a `TypedDict` of its parameters)."""
    import typing_extensions
    from pydantic import TypeAdapter, with_config

    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        annotation = Any if param.annotation is param.empty else param.annotation
        if param.default is param.empty:
            fields[param.name] = typing_extensions.Required[annotation]
        else:
            fields[param.name] = typing_extensions.NotRequired[annotation]
    # The functional `TypedDict(name, fields)` form, which type checkers reject for computed
    # fields.
    make_typed_dict: Any = typing_extensions.TypedDict
    arguments = with_config(cast(Any, _ARGUMENTS_CONFIG))(make_typed_dict("ToolArguments", fields))
    arguments.__module__ = getattr(fn, "__module__", None) or __name__
    return TypeAdapter(arguments)


def _derive(
    name: str, fn: Callable[..., Any], signature: inspect.Signature, described: Mapping[str, str]
) -> tuple[TypeAdapter[dict[str, Any]], dict[str, Any]]:
    """Build the validator and the JSON schema of `fn`'s arguments."""
    from pydantic_core import to_jsonable_python

    where = _reference(fn)
    annotations: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    for param in signature.parameters.values():
        annotations[param.name] = Any if param.annotation is param.empty else param.annotation
        if param.default is not param.empty:
            defaults[param.name] = param.default
    try:
        adapter = _adapter(name, fn, signature)
        parameters = adapter.json_schema(schema_generator=_schema_generator())
    except Exception as exc:
        raise _unschemable(name, where, annotations, exc) from exc
    properties = parameters.setdefault("properties", {})
    for param_name, prop in properties.items():
        if param_name in described:
            prop.setdefault("description", described[param_name])
        if param_name in defaults:
            # A default that is not JSON-able stays out of the schema; it still applies.
            with contextlib.suppress(Exception):
                prop.setdefault("default", to_jsonable_python(defaults[param_name]))
    return adapter, parameters


def _unschemable(
    name: str, where: str, annotations: Mapping[str, Any], exc: Exception
) -> ToolSignatureError:
    """Build the error naming the parameter whose type has no schema, when one is to blame."""
    from pydantic import TypeAdapter

    for param_name, annotation in annotations.items():
        try:
            TypeAdapter(annotation).json_schema()
        except Exception as inner:
            return ToolSignatureError(
                name,
                f"parameter {param_name!r} of {where} has type {_type_name(annotation)}, which "
                f"has no JSON schema ({_first_line(inner)}); tools take JSON-able arguments: str, "
                "int, float, bool, lists, dicts, Literal, Enum, dataclasses, pydantic models",
            )
    return ToolSignatureError(name, f"cannot derive a schema for {where}: {_first_line(exc)}")


def _read_docstring(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """Return the docstring's description and each parameter's (from Args/Parameters).

    Sections are left out of the description; Google, NumPy, reST and Epydoc styles all work.
    """
    doc = inspect.getdoc(_unwrap(fn))
    if not doc:
        return "", {}
    import docstring_parser

    try:
        parsed = docstring_parser.parse(doc)
    except docstring_parser.ParseError:
        return doc, {}
    parts = (parsed.short_description, parsed.long_description)
    description = "\n\n".join(part.strip() for part in parts if part and part.strip())
    params = {p.arg_name: " ".join(p.description.split()) for p in parsed.params if p.description}
    return description, params


def _unwrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def _is_async(fn: Callable[..., Any]) -> bool:
    fn = _unwrap(fn)
    if inspect.iscoroutinefunction(fn):
        return True
    # A callable object: is its class's __call__ a coroutine function?
    return not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__)


def _reference(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", None) or "?"
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}:{qualname}"


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__qualname__", None) or repr(annotation)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _describe(exc: BaseException) -> str:
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
