"""The `function` provider: a Python callable answers each model request.

The callable (`call: module:function` in the spec) receives the `ModelRequest` and returns a
`ModelResponse` or a string (a text answer); it may be async. Use it to script answers that
depend on the conversation, or to wrap a model client of your own.
"""

from __future__ import annotations

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

__all__ = ["FunctionProvider"]


class FunctionProvider:
    """Answers model requests by calling a Python function."""

    name = "function"
    live = False

    def __init__(self, fn: Callable[[ModelRequest], Any], *, model_name: str = "function") -> None:
        self.fn = fn
        self.model_name = model_name

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
        return cls(fn, model_name=config.name)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Call the function and normalise what it returns."""
        answer = self.fn(request)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, ModelResponse):
            return answer
        if isinstance(answer, str):
            usage = TokenUsage(estimate_request_tokens(request), estimate_tokens(answer))
            return ModelResponse(text=answer, usage=usage)
        raise HarnessError(
            f"function model {self.model_name!r} returned {type(answer).__name__}; "
            "return a ModelResponse or a str"
        )

    def retry_delay(self, attempt: int, error: ModelError | None = None) -> float:
        """A function's failures are retried at once."""
        return 0.0
