"""What a tool knows about the call it serves: `current_tool_context()`.

The context lives in a `contextvars.ContextVar`, so it follows the call into coroutines, tasks
the tool starts, and the worker thread a sync tool with a timeout runs in
(`pytest_harness.threads.in_thread` copies the context).
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from types import TracebackType

from pytest_harness.errors import HarnessError
from pytest_harness.principal import Principal
from pytest_harness.tools.artifacts import Artifact

__all__ = ["ToolContext", "current_tool_context", "tool_context"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolContext:
    """The tool call being served: which tool, its execution key, run, principal and attempt.

    `execution_key` is identical when a resumed run repeats the call, so an `idempotent` tool
    passes it to the service it calls to deduplicate writes; `attempt` counts invocations of
    that key, from 1.
    """

    tool: str
    execution_key: str
    run_id: str
    principal: Principal
    attempt: int = 1
    attached: list[Artifact] = field(default_factory=list, repr=False, compare=False)
    """Artifacts attached to this call so far (see `attach`)."""

    def attach(
        self, data: bytes | Artifact, media_type: str | None = None, name: str | None = None
    ) -> str:
        """Attach an artifact to this call's result and return its `artifact:sha256:` URI.

        Pass an `Artifact`, or its bytes with a `media_type` (and an optional `name`). A
        recorded run's store keeps the bytes by SHA-256; put the URI in the result to refer
        to it. `HarnessError` for bytes without a media type.
        """
        if isinstance(data, Artifact):
            artifact = data
        else:
            if media_type is None:
                raise HarnessError(
                    f"attach() needs a media_type with raw bytes (tool {self.tool!r}, "
                    f"execution key {self.execution_key})"
                )
            artifact = Artifact(data, media_type, name)
        self.attached.append(artifact)
        return artifact.uri


_CURRENT: ContextVar[ToolContext | None] = ContextVar("pytest_harness_tool_context", default=None)


def current_tool_context() -> ToolContext:
    """Return the context of the tool call being served; `HarnessError` outside a tool call."""
    context = _CURRENT.get()
    if context is None:
        raise HarnessError(
            "current_tool_context() was called outside a tool call; call it from inside a "
            "tool function while the harness runs it"
        )
    return context


class tool_context:  # lower case: used like a function, `with tool_context(ctx):`
    """Set `context` as the current tool context for the duration of a `with` block."""

    __slots__ = ("_context", "_token")

    def __init__(self, context: ToolContext) -> None:
        self._context = context
        self._token: Token[ToolContext | None] | None = None

    def __enter__(self) -> ToolContext:
        self._token = _CURRENT.set(self._context)
        return self._context

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            _CURRENT.reset(self._token)
            self._token = None
