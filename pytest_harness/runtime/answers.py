r"""Whether a model's answer can be kept: every part of it must be JSON the store can write.

An answer enters the run's state (the conversation) and its journal before anything acts on
it. A part the store's encoding refuses (a tool argument that is NaN or `1e999`, text with a
lone surrogate as `"\udcff"` in a JSON body decodes to, a number too long for decimal text, an
object of a `function` model's that is no JSON value) made the commit of that boundary fail
after the answer was paid for: `run()` raised `StoreError` (or `RecordingError` after its
retries), the run stayed `running`, and `recover()` asked the model, and paid, again.
`check_answer` makes such an answer a `malformed` `ModelError` instead, naming the model, the
place and the value: the attempt is committed as failed, its usage counted, the next fallback
model asked, and the run ends `failed` when none answers well.
"""

from __future__ import annotations

from pytest_harness.errors import ModelError
from pytest_harness.models.base import ModelResponse
from pytest_harness.store.helpers import json_fault, json_text, utf8_error

__all__ = ["check_answer"]


def check_answer(response: ModelResponse, model: str) -> None:
    """Raise a `malformed` `ModelError` when the store cannot keep part of `response`."""
    tokens_in, tokens_out = usage = (response.usage.input_tokens, response.usage.output_tokens)
    counted = (
        type(tokens_in) is int
        and type(tokens_out) is int
        and -_TOKENS < tokens_in < _TOKENS
        and -_TOKENS < tokens_out < _TOKENS
    ) or json_fault(list(usage), "its usage") is None
    if counted and _storable(response):
        return
    fault = _fault(response, usage, counted)
    if fault is None:
        return
    raise ModelError(
        "malformed",
        f"model {model!r} answered with what the store cannot keep: {fault}; the answer was "
        "not used (answers must be JSON: finite numbers, UTF-8 text)",
        model=model,
        usage=usage if counted else None,
    )


_TOKENS = 2**63
"""Integer token counts below this in size are storable as they are (the fast check)."""


def _storable(response: ModelResponse) -> bool:
    """Whether the store keeps every part of `response` (one encoding of them all, no walk)."""
    text = response.text
    if text is not None and type(text) is not str:
        return False
    calls = [(call.id, call.name, call.args) for call in response.calls]
    try:
        encoded = json_text((text, calls, response.thinking, response.incomplete))
    except (TypeError, ValueError, RecursionError):
        return False
    return utf8_error(encoded) is None


def _fault(response: ModelResponse, usage: tuple[int, int], counted: bool) -> str | None:
    """The first part of `response` the store cannot keep, described; None when all can be."""
    text = response.text
    if text is not None and (type(text) is not str or utf8_error(text) is not None):
        return json_fault(text, "its text")
    for index, call in enumerate(response.calls, start=1):
        fault = json_fault([call.id, call.name], f"tool call {index} (id, name)") or json_fault(
            call.args, f"tool call {index} ({_name(call.name)}) args"
        )
        if fault is not None:
            return fault
    if not counted:
        return json_fault(list(usage), "its usage (input, output tokens)")
    if response.thinking:
        return json_fault(list(response.thinking), "its thinking")
    if response.incomplete is not None:
        return json_fault(response.incomplete, "its incomplete reason")
    return None


def _name(name: object) -> str:
    """A tool call's name for a message: ASCII, short."""
    shown = ascii(name)
    return shown if len(shown) <= 60 else shown[:57] + "..."
