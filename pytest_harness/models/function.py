"""The `function` provider: a Python callable answers each model request.

The callable (`call: module:function` in the spec) receives the `ModelRequest` and returns a
`ModelResponse` or a string (a text answer); it may be async. Use it to script answers that
depend on the conversation, or to wrap a model client of your own.

A synchronous callable runs in a worker thread (DESIGN §10), so while it blocks the event loop
keeps running: the model's `timeout`, the task's `deadline` and the lease renewal still fire.
A thread cannot be stopped: one that outlives its timeout runs on, and what it streams or
returns after that is dropped.

A callable that raises `SystemExit` (it called `sys.exit()`) or another `BaseException` of its
own fails the run with a `HarnessError` naming the model and the callable, as a tool's would be
its error outcome: it must not end the process, or a worker that resumes the run ends too.
Ctrl-C (`KeyboardInterrupt`) and cancellation go through.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any

from pytest_harness.errors import HarnessError, ModelError
from pytest_harness.hookspecs import ProviderConfig
from pytest_harness.models.base import (
    ModelRequest,
    ModelResponse,
    TokenUsage,
    estimate_request_tokens,
    estimate_tokens,
)
from pytest_harness.threads import in_thread

__all__ = ["FunctionProvider"]

_NOT_THE_MODELS = (KeyboardInterrupt, asyncio.CancelledError, GeneratorExit)
"""Raised through a model call, never turned into a failure: Ctrl-C and cancellation."""


class FunctionProvider:
    """Answers model requests by calling a Python function."""

    name = "function"
    live = False

    def __init__(
        self,
        fn: Callable[[ModelRequest], Any],
        *,
        model_name: str = "function",
        call: str | None = None,
    ) -> None:
        self.fn = fn
        self.model_name = model_name
        self.call = call
        """The spec's `call: module:function`, for messages (None: given as a callable)."""
        self.is_async = _is_async(fn)

    @classmethod
    def from_config(cls, config: ProviderConfig) -> FunctionProvider:
        """Build from a model's `call: module:function`."""
        from pytest_harness.importing import import_callable

        if not config.model.call:
            raise config.spec.error(
                "a function model needs `call: module:function`", ("models", config.name)
            )
        fn = import_callable(
            config.model.call, spec=config.spec, where=("models", config.name, "call")
        )
        return cls(fn, model_name=config.name, call=config.model.call)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Call the function (a sync one in a worker thread) and normalise what it returns."""
        try:
            answer = self.fn(request) if self.is_async else await self._in_thread(request)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception:
            raise
        except BaseException as exc:
            if isinstance(exc, _NOT_THE_MODELS):
                raise
            # sys.exit() in a model function ended the process, and every worker that
            # resumed the run in turn (the run was left `running`)
            where = f" ({self.call})" if self.call else ""
            raise HarnessError(
                f"function model {self.model_name!r}{where} raised {type(exc).__name__}"
                f"({exc}); a model function must return a ModelResponse or a str, or raise "
                "an Exception, not end the process"
            ) from exc
        if isinstance(answer, ModelResponse):
            return answer
        if isinstance(answer, str):
            usage = TokenUsage(estimate_request_tokens(request), estimate_tokens(answer))
            return ModelResponse(text=answer, usage=usage)
        raise HarnessError(
            f"function model {self.model_name!r} returned {type(answer).__name__}; "
            "return a ModelResponse or a str"
        )

    async def _in_thread(self, request: ModelRequest) -> Any:
        """Call the sync function in a worker thread; its `on_text` pieces reach the loop.

        Each piece is handed to the loop in order, ahead of the function's return; pieces
        from a thread that outlived its caller (a timeout) are dropped.
        """
        sink = request.on_text
        if sink is None:
            return await in_thread(self.fn, request)
        loop = asyncio.get_running_loop()
        live = True

        def deliver(delta: str) -> None:
            if live:
                sink(delta)

        def on_text(delta: str) -> None:
            if live:
                # a closed loop (RuntimeError) has nobody left to read it
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(deliver, delta)

        try:
            return await in_thread(self.fn, dataclasses.replace(request, on_text=on_text))
        finally:
            live = False

    def retry_delay(self, attempt: int, error: ModelError | None = None) -> float:
        """A function's failures are retried at once."""
        return 0.0


def _is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling `fn` gives a coroutine (an async function, a partial, or an object)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    return not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__)
