"""Tools: Python callables the model may call, each with a JSON schema derived from its signature.

`ToolSet.from_spec` imports every tool a spec declares. `Tool.invoke` validates the model's
arguments against the derived schema and calls the function with them as keyword arguments; a
problem of the tool's own (bad arguments, an exception, a timeout) comes back as a `ToolOutcome`
for the model to read, never as an exception into the run loop (`tools/outcome.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from pytest_harness.eager import start
from pytest_harness.errors import did_you_mean
from pytest_harness.importing import import_callable
from pytest_harness.models.base import ToolSchema
from pytest_harness.tools.context import ToolContext, tool_context
from pytest_harness.tools.outcome import OutcomeKind, ToolOutcome, _short
from pytest_harness.tools.plain import (
    SchemaCache,
    check_plain,
    detached,
    plain_params,
    schema_key,
)

if TYPE_CHECKING:
    from pydantic import TypeAdapter, ValidationError
    from pydantic_core import ErrorDetails

    from pytest_harness.spec.schema import ToolSpec
    from pytest_harness.spec.spec import Spec

__all__ = [
    "InvalidToolArguments",
    "OutcomeKind",
    "Tool",
    "ToolOutcome",
    "ToolSet",
    "ToolSignatureError",
]

_ARGUMENTS_CONFIG: dict[str, Any] = {"extra": "forbid", "coerce_numbers_to_str": True}
"""Lax validation for LLM JSON (`"250"` → 250, `1001` → `"1001"`); unknown arguments are errors.

pydantic (and docstring_parser) are imported when a tool first needs them: a plain tool
(`tools/plain.py`) whose schema is cached and whose arguments have their exact types needs
neither."""


class InvalidToolArguments(ValueError):
    """The model's arguments do not fit the tool's schema; `.problems` lists each, readably."""

    def __init__(self, tool: str, problems: Sequence[str]) -> None:
        self.tool = tool
        self.problems = tuple(problems)
        super().__init__(f"invalid arguments for tool {tool!r}: {'; '.join(self.problems)}")


class ToolSignatureError(TypeError):
    """A callable cannot be a tool (`*args`, positional-only parameters, a type with no schema).

    `.reason` is the message without the tool's name, for a `SpecError` that names it already.
    """

    def __init__(self, tool: str, reason: str) -> None:
        self.tool = tool
        self.reason = reason
        super().__init__(f"tool {tool!r}: {reason}")


class _Expired(Exception):
    """The `asyncio.timeout` around a call fired (not a `TimeoutError` the tool raised)."""


class Tool:
    """A callable the model may call: its name, function, spec entry and derived schema.

    The schema comes from the signature (pydantic builds the validator and the JSON schema) and
    the docstring (the description and, from its Args/Parameters section, one per parameter).
    Parameters with defaults are optional; unannotated ones accept anything. `*args`,
    `**kwargs` and positional-only parameters raise `ToolSignatureError`: tools receive their
    arguments as keyword arguments. `schema` is shared by every request that offers the tool:
    read it, never mutate it.
    """

    __slots__ = ("_adapter", "_names", "_plain", "fn", "is_async", "name", "schema", "spec")

    def __init__(
        self,
        name: str,
        fn: Callable[..., Any],
        spec: ToolSpec | None = None,
        *,
        cache: SchemaCache | None = None,
    ) -> None:
        """`cache` keeps the derived schema of a plain tool across processes (`tools/plain.py`)."""
        if spec is None:
            from pytest_harness.spec.schema import ToolSpec

            spec = ToolSpec(call=_reference(fn))
        self.name = name
        self.fn = fn
        self.spec = spec
        self.is_async = _is_async(fn)
        signature = _signature(name, fn)
        self._names = tuple(signature.parameters)
        self._plain = plain_params(signature)
        self._adapter: TypeAdapter[dict[str, Any]] | None = None
        key: dict[str, Any] | None = None
        found: tuple[str, dict[str, Any]] | None = None
        if cache is not None and self._plain is not None:
            key = schema_key(name, fn, self._plain, signature, inspect.getdoc(_unwrap(fn)))
            found = cache.read(key)
        if found is not None:
            description, parameters = found
        else:
            description, described = _read_docstring(fn)
            self._adapter, parameters = _derive(name, fn, signature, described)
            if cache is not None and key is not None:
                cache.write(key, description, parameters)
        self.schema = ToolSchema(
            name=name, description=spec.description or description, parameters=parameters
        )

    def __repr__(self) -> str:
        return f"Tool({self.name!r}, {self.spec.call!r})"

    @property
    def parameters(self) -> tuple[str, ...]:
        """The names of the function's parameters, in order."""
        return self._names

    def validate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Validate and convert `args`, or raise `InvalidToolArguments` listing what is wrong.

        Omitted optional arguments stay omitted, so the function's own defaults apply.
        """
        if self._plain is not None and (plain := check_plain(self._plain, args)) is not None:
            return plain
        from pydantic import ValidationError

        try:
            return self._validator().validate_python(args)
        except ValidationError as exc:
            raise InvalidToolArguments(self.name, self._problems(exc)) from None

    def _validator(self) -> TypeAdapter[dict[str, Any]]:
        """Pydantic's validator of the arguments, built on first use for a cached plain tool."""
        if self._adapter is None:
            self._adapter = _adapter(self.name, self.fn, _signature(self.name, self.fn))
        return self._adapter

    def check(self, args: Mapping[str, Any]) -> ToolOutcome | None:
        """The `invalid_arguments` outcome `invoke` would give `args`, or None when they fit.

        A replay applies today's contract with it before answering a call from its recording.
        """
        if self._plain is not None and check_plain(self._plain, args) is not None:
            return None
        from pydantic import ValidationError

        try:
            self._validator().validate_python(args)
        except ValidationError as exc:
            return self._invalid(exc)
        return None

    def _invalid(self, exc: ValidationError) -> ToolOutcome:
        message = str(InvalidToolArguments(self.name, self._problems(exc)))
        return ToolOutcome.failure(
            "invalid_arguments", message, type="InvalidToolArguments", message=message
        )

    async def invoke(
        self,
        args: Mapping[str, Any],
        context: ToolContext,
        *,
        overall_timeout: float | None = None,
    ) -> ToolOutcome:
        """Validate `args`, call the function with them inside `context`, and say how it went.

        Never raises for the tool's problems: bad arguments, an exception, the tool's `timeout`
        or the run's remaining `overall_timeout` (whichever is smaller) come back as a failed
        `ToolOutcome`. `asyncio.CancelledError` propagates. Async functions are awaited; a sync
        function runs in a worker thread (DESIGN §10), so the timeout, the deadline and the
        lease renewal keep working while it blocks; that thread cannot be stopped and may run
        on after a timeout. Artifacts the call attached through its context join the outcome's
        `artifacts`.
        """
        outcome = await self._invoke(args, context, overall_timeout)
        if context.attached:
            outcome = replace(outcome, artifacts=(*outcome.artifacts, *context.attached))
        return outcome

    async def _invoke(
        self, args: Mapping[str, Any], context: ToolContext, overall_timeout: float | None
    ) -> ToolOutcome:
        args = detached(args)
        kwargs = None if self._plain is None else check_plain(self._plain, args)
        if kwargs is None:
            from pydantic import ValidationError

            try:
                kwargs = self._validator().validate_python(args)
            except ValidationError as exc:
                return self._invalid(exc)
        limit = self.spec.timeout
        kind: OutcomeKind = "timeout"
        if overall_timeout is not None and (limit is None or overall_timeout <= limit):
            limit, kind = overall_timeout, "deadline"
        if limit is not None and limit <= 0:
            return self._expired(kind, limit, started=False)
        with tool_context(context):
            try:
                if limit is None:
                    if self.is_async:
                        result = self.fn(**kwargs)
                    else:  # in a thread: the loop (lease renewal, other runs) keeps going
                        result = await asyncio.to_thread(self.fn, **kwargs)
                    if inspect.isawaitable(result):
                        result = await result
                else:
                    result = await self._call_within(limit, kwargs)
            except _Expired:
                return self._expired(kind, limit or 0.0, started=True)
            except Exception as exc:
                return ToolOutcome.failure(
                    "error",
                    f"tool {self.name!r} raised {_describe(exc)}",
                    type=type(exc).__name__,
                    message=str(exc),
                )
        return ToolOutcome.success(result)

    async def _call_within(self, limit: float, kwargs: dict[str, Any]) -> Any:
        """Call the function, cut off after `limit` seconds (`_Expired`).

        An async function is started at once: one that answers without waiting arms no timer
        (`pytest_harness.eager`), and one that waits is held to the limit counted from its
        start.
        """
        since = asyncio.get_running_loop().time()
        if self.is_async:
            result = self.fn(**kwargs)
            if not inspect.isawaitable(result):
                return result
            started = start(result)
            if started.done:
                return started.value
            pending: Any = started
        else:
            pending = asyncio.to_thread(self.fn, **kwargs)
        timer = asyncio.timeout_at(since + limit)
        try:
            async with timer:
                result = await pending
                if not self.is_async and inspect.isawaitable(result):
                    result = await result
        except TimeoutError:
            if timer.expired():
                raise _Expired from None
            raise
        return result

    def _expired(self, kind: OutcomeKind, limit: float, *, started: bool) -> ToolOutcome:
        if kind == "timeout":
            text = f"tool {self.name!r} timed out after {limit:g}s"
        elif started:
            text = f"tool {self.name!r} was stopped after {limit:g}s: the run's deadline passed"
        else:
            text = f"tool {self.name!r} was not called: the run's deadline has passed"
        return ToolOutcome.failure(kind, text, type="TimeoutError", message=text)

    def _problems(self, exc: ValidationError) -> list[str]:
        problems = []
        for error in exc.errors(include_url=False):
            loc, kind = error["loc"], error["type"]
            if kind == "extra_forbidden" and len(loc) == 1:
                unexpected = str(loc[0])
                hint = (
                    did_you_mean(unexpected, self._names)
                    if self._names
                    else " (the tool takes no arguments)"
                )
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


class ToolSet:
    """The tools of a spec, by name, with their schemas cached per task's list of names."""

    __slots__ = ("_schemas", "_tools")

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"two tools are named {tool.name!r}")
            self._tools[tool.name] = tool
        self._schemas: dict[tuple[str, ...], tuple[ToolSchema, ...]] = {}

    @classmethod
    def from_spec(cls, spec: Spec) -> ToolSet:
        """Import and check every tool of `spec`; a bad one is a `SpecError` at its line."""
        from pytest_harness.spec.cache import enabled

        cache = SchemaCache(spec.path.parent / ".harness" / "cache") if enabled() else None
        tools = []
        for name, tool_spec in spec.document.tools.items():
            where = ("tools", name, "call")
            fn = import_callable(tool_spec.call, spec=spec, where=where)
            try:
                tools.append(Tool(name, fn, tool_spec, cache=cache))
            except ToolSignatureError as exc:
                raise spec.error(exc.reason, where) from exc
        return cls(tools)

    def get(self, name: str) -> Tool | None:
        """Return the tool called `name`, or None."""
        return self._tools.get(name)

    def names(self) -> tuple[str, ...]:
        """Return every tool's name, in the spec's order."""
        return tuple(self._tools)

    def schemas(self, names: Sequence[str]) -> tuple[ToolSchema, ...]:
        """Return the schemas of the tools `names` in that order; `KeyError` for an unknown one."""
        key = tuple(names)
        cached = self._schemas.get(key)
        if cached is None:
            for name in key:
                if name not in self._tools:
                    raise KeyError(f"unknown tool {name!r}{did_you_mean(name, self._tools)}")
            cached = self._schemas[key] = tuple(self._tools[name].schema for name in key)
        return cached

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolSet({', '.join(self._tools)})"


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
