"""Answers cut at their token limit: what a run does with them (a model's `on_truncation`).

A provider marks such an answer `incomplete` (`max_tokens`: OpenAI's `finish_reason: length`,
Anthropic's `stop_reason: max_tokens`; `context_window`: Anthropic's
`model_context_window_exceeded`). The run loop counts its tokens, marks the model decision and
the run's usage, then by the model's `on_truncation`:

* `fail` (the default): the run ends `failed` with `ModelTruncated`, naming the model and what to
  change;
* `continue`: the cut answer stays in the conversation, followed by `CONTINUE_PROMPT` as a user
  message, and the model is asked again; the texts of the pieces are joined into the output. At
  most `MAX_CONTINUATIONS` in a row, then the run fails as with `fail`;
* `accept`: the answer is used as it is.

The chain of continuations is read back from the run's messages, so a resumed run knows it.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_harness.errors import ModelTruncated
from pytest_harness.models.base import Message, ModelResponse

__all__ = [
    "CONTINUE_PROMPT",
    "MAX_CONTINUATIONS",
    "continuations",
    "joined_output",
    "truncation_error",
]

CONTINUE_PROMPT = (
    "Your previous answer was cut off at the output token limit. Continue it exactly where it "
    "stopped, without repeating anything."
)
"""The user message that asks a model to continue its cut answer (`on_truncation: continue`)."""
MAX_CONTINUATIONS = 8
"""The most continuations of one answer in a row before the run fails."""

_REASONS = {
    "max_tokens": "stopped at its output token limit",
    "context_window": "filled its context window",
}


def continuations(messages: Sequence[Message]) -> list[str]:
    """The texts of the cut answers the last messages continue, oldest first."""
    pieces: list[str] = []
    index = len(messages)
    while index >= 2:
        prompt, answer = messages[index - 1], messages[index - 2]
        if prompt.get("role") != "user" or prompt.get("content") != CONTINUE_PROMPT:
            break
        if answer.get("role") != "assistant":
            break
        pieces.append(answer.get("content") or "")
        index -= 2
    return pieces[::-1]


def joined_output(messages: Sequence[Message], text: str) -> str:
    """The whole answer: the pieces it continues, then `text`, with nothing in between."""
    return "".join([*continuations(messages), text])


def truncation_error(model: str, response: ModelResponse, *, continued: int = 0) -> ModelTruncated:
    """The error of a run that ends on a cut answer, saying what to change."""
    reason = response.incomplete or "max_tokens"
    what = _REASONS.get(reason, f"was cut short ({reason})")
    after = f" after {continued} continuations" if continued else ""
    return ModelTruncated(
        model,
        reason,
        f"model {model!r} {what}{after} ({response.usage.output_tokens} output tokens): the "
        f"answer is incomplete. Raise models.{model}.options.max_tokens, or set "
        f"models.{model}.on_truncation to `continue` (ask for the rest) or `accept` (use it cut)",
    )
