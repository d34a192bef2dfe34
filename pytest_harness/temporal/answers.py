"""A model attempt as the `harness_model` activity takes it and answers it, as plain JSON.

The workflow's driver sends the attempt's request (`request_payload`); the activity rebuilds it
from the worker's plan (`request_of`), asks the provider, and answers with the response, the
typed `ModelError`, or the exception a provider raised (`answer_of`). The workflow reads the
answer back (`response_of`), raising the error as the provider did, so the engine's retries,
fallbacks and accounting treat it exactly as a local attempt's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_harness.errors import ModelError
from pytest_harness.models.base import (
    Message,
    ModelRequest,
    ModelResponse,
    ProposedCall,
    TokenUsage,
)
from pytest_harness.runtime.plan import TaskPlan

__all__ = [
    "ProviderFailed",
    "answer_of",
    "named_error",
    "request_of",
    "request_payload",
    "response_of",
]


class ProviderFailed(Exception):
    """A provider raised something other than `ModelError`; `kind` is its class name."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def named_error(kind: str, message: str) -> Exception:
    """An exception of a class named `kind`: the run then fails with an error of that type.

    The engine records a raised exception's class name as the run's error type, as it does for
    one raised in this process.
    """
    error: type[Exception] = type(kind, (Exception,), {})
    return error(message)


def request_payload(request: ModelRequest, conversation: Mapping[str, Any]) -> dict[str, Any]:
    """What the activity needs of a request (the system prompt and tools come from its plan).

    `conversation` stands for its messages (`conversation.Sent.wire`: the tail past what the
    worker holds, or all of them).
    """
    return {
        "task": request.task,
        "model": request.model,
        "conversation": dict(conversation),
        "run_id": request.run_id,
        "turn": request.turn,
        "input": request.input,
        "attempt_id": request.attempt_id,
    }


def request_of(
    plan: TaskPlan,
    payload: Mapping[str, Any],
    messages: Sequence[Message],
    *,
    on_text: Callable[[str], None] | None,
    on_first_event: Callable[[], None],
) -> ModelRequest:
    """The request `request_payload` describes, with its whole `messages`, as the driver made it."""
    return ModelRequest(
        task=plan.name,
        model=str(payload["model"]),
        system=plan.spec.prompt,
        messages=tuple(messages),
        tools=plan.schemas,
        run_id=str(payload["run_id"]),
        turn=int(payload["turn"]),
        input=str(payload["input"]),
        attempt_id=str(payload["attempt_id"]),
        on_text=on_text,
        on_first_event=on_first_event,
    )


def answer_of(outcome: ModelResponse | BaseException) -> dict[str, Any]:
    """An attempt's response or failure as the activity returns it."""
    if isinstance(outcome, ModelError):
        return {
            "error": {
                "kind": outcome.kind,
                "message": str(outcome),
                "model": outcome.model,
                "retry_after": outcome.retry_after,
                "usage": None if outcome.usage is None else list(outcome.usage),
            }
        }
    if isinstance(outcome, BaseException):
        return {"exception": {"type": type(outcome).__name__, "message": str(outcome)}}
    response: dict[str, Any] = {
        "text": outcome.text,
        "calls": [{"id": c.id, "name": c.name, "args": dict(c.args)} for c in outcome.calls],
        "usage": [outcome.usage.input_tokens, outcome.usage.output_tokens],
        "thinking": [dict(block) for block in outcome.thinking],
        "incomplete": outcome.incomplete,
    }
    return {"response": response}


def response_of(answer: Mapping[str, Any]) -> ModelResponse:
    """The response in an activity's answer; its `ModelError` (or `ProviderFailed`) raised."""
    error = answer.get("error")
    if error is not None:
        usage = error.get("usage")
        raise ModelError(
            str(error["kind"]),
            str(error["message"]),
            model=error.get("model"),
            retry_after=error.get("retry_after"),
            usage=None if usage is None else (int(usage[0]), int(usage[1])),
        )
    failed = answer.get("exception")
    if failed is not None:
        raise ProviderFailed(str(failed["type"]), str(failed["message"]))
    data = answer["response"]
    return ModelResponse(
        text=data.get("text"),
        calls=tuple(ProposedCall(c["id"], c["name"], dict(c["args"])) for c in data["calls"]),
        usage=TokenUsage(int(data["usage"][0]), int(data["usage"][1])),
        thinking=tuple(dict(block) for block in data.get("thinking") or ()),
        incomplete=data.get("incomplete"),
    )
