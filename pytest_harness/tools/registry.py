"""Tools: Python callables the model may call, each with a JSON schema derived from its signature.

`ToolSet.from_spec` imports every tool a spec declares. `Tool.invoke` validates the model's
arguments against the derived schema and calls the function with them as keyword arguments; a
problem of the tool's own (bad arguments, an exception, a timeout) comes back as a `ToolOutcome`
for the model to read, never as an exception into the run loop (`tools/outcome.py`). The schema
is derived in `tools/schema.py`; bad arguments are worded in `tools/problems.py`.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pytest_harness.eager import start
from pytest_harness.errors import did_you_mean
from pytest_harness.importing import import_callable
from pytest_harness.models.base import ToolSchema
from pytest_harness.store.helpers import utf8_error
from pytest_harness.threads import in_thread
from pytest_harness.tools.context import ToolContext, tool_context
from pytest_harness.tools.outcome import OutcomeKind, ToolOutcome
from pytest_harness.tools.plain import (
    SchemaCache,
    check_plain,
    detached,
    plain_params,
    schema_key,
)
from pytest_harness.tools.problems import InvalidToolArguments, problems_of
from pytest_harness.tools.schema import (
    ToolSignatureError,
    _adapter,
    _derive,
    _describe,
    _is_async,
    _read_docstring,
    _reference,
    _signature,
    _unwrap,
)

if TYPE_CHECKING:
    from pydantic import TypeAdapter, ValidationError

    from pytest_harness.spec.schema import ToolSpec
    from pytest_harness.spec.spec import Spec

__all__ = [
    "InvalidToolArguments",
    "OutcomeKind",
    "Tool",
    "ToolOutcome",
    "ToolSet",
    "ToolSignatureError",
    "timeout_text",
]


_NOT_THE_TOOLS = (KeyboardInterrupt, asyncio.CancelledError, GeneratorExit)
"""Raised through a tool call, never turned into its outcome: Ctrl-C and cancellation."""


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
            raise InvalidToolArguments(self.name, problems_of(self._names, exc)) from None

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
        message = str(InvalidToolArguments(self.name, problems_of(self._names, exc)))
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
        on after a timeout, and nothing waits for it when the loop closes
        (`pytest_harness.threads`). Artifacts the call attached through its context join the
        outcome's `artifacts`.
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
                        result = await in_thread(self.fn, **kwargs)
                    if inspect.isawaitable(result):
                        result = await result
                else:
                    result = await self._call_within(limit, kwargs)
            except _Expired:
                return self._expired(kind, limit or 0.0, started=True)
            except BaseException as exc:
                if isinstance(exc, _NOT_THE_TOOLS):
                    raise
                # any other error is the tool's answer, `SystemExit` included: a tool that
                # calls sys.exit() must not end the process and strand its run
                outcome = ToolOutcome.failure(
                    "error",
                    f"tool {self.name!r} raised {_describe(exc)}",
                    type=type(exc).__name__,
                    message=str(exc),
                )
            else:
                outcome = ToolOutcome.success(result)
        return self._unicode(outcome)

    def _unicode(self, outcome: ToolOutcome) -> ToolOutcome:
        """`outcome`, or an error outcome when its text is not valid Unicode.

        A lone surrogate (a string decoded with `surrogateescape`, say) cannot be stored as
        UTF-8: the run would stop at its next commit.
        """
        text = outcome.text
        message = "" if outcome.error is None else outcome.error.get("message", "")
        for part in (text, message):
            exc = utf8_error(part)
            if exc is None:
                continue
            what = "its result" if outcome.ok else "the error it raised"
            bad = part[exc.start : exc.end].encode("utf-8", "backslashreplace").decode()
            return ToolOutcome.failure(
                "error",
                f"tool {self.name!r} returned text that is not valid Unicode in {what}: "
                f"{bad} at character {exc.start} ({exc.reason}); return str decoded as "
                "UTF-8 (bytes.decode('utf-8', 'replace'))",
                type="UnicodeEncodeError",
                message=f"{exc.reason} at character {exc.start}",
            )
        return outcome

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
            pending = in_thread(self.fn, **kwargs)
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
            text = timeout_text(self.name, limit)
        elif started:
            text = f"tool {self.name!r} was stopped after {limit:g}s: the run's deadline passed"
        else:
            text = f"tool {self.name!r} was not called: the run's deadline has passed"
        return ToolOutcome.failure(kind, text, type="TimeoutError", message=text)


def timeout_text(name: str, limit: float) -> str:
    """The text of a call of tool `name` that its own `timeout` of `limit` seconds stopped."""
    return f"tool {name!r} timed out after {limit:g}s"


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
