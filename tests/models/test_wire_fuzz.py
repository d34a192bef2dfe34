"""The stream folds and body parsers on hostile input: a typed failure or an answer, nothing else.

A server (or whatever sits between it and us) may send anything. Every event sequence folds
into an answer or raises `Malformed` / `ServerReported`, which the provider turns into a
`ModelError`; no `KeyError`, `TypeError` or `AttributeError` escapes.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_harness.errors import ModelError
from pytest_harness.models.anthropic import AnthropicProvider
from pytest_harness.models.base import ModelRequest, ModelResponse
from pytest_harness.models.openai import OpenAIProvider
from pytest_harness.models.wire import Malformed, ServerReported

OPENAI = OpenAIProvider(model="m")
ANTHROPIC = AnthropicProvider(model="m", options={"max_tokens": 64})
REQUEST = ModelRequest(
    task="t",
    model="default",
    system="s",
    messages=({"role": "user", "content": "hi"},),
    tools=(),
    run_id="run_x",
    turn=0,
    input="hi",
)

scalars = st.none() | st.booleans() | st.integers(-3, 2000) | st.text(max_size=8)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
_KEYS = [
    "type", "index", "delta", "content_block", "message", "text", "thinking", "signature",
    "partial_json", "usage", "stop_reason", "choices", "finish_reason", "content", "error",
    "code", "message", "tool_calls", "function", "arguments", "name", "id", "input",
    "prompt_tokens", "completion_tokens", "total_tokens", "input_tokens", "output_tokens",
]  # fmt: skip
_TYPES = [
    "message_start", "content_block_start", "content_block_delta", "content_block_stop",
    "message_delta", "message_stop", "error", "ping", "text", "thinking", "redacted_thinking",
    "tool_use", "text_delta", "thinking_delta", "signature_delta", "input_json_delta",
]  # fmt: skip
shaped = st.recursive(
    scalars | st.sampled_from(_TYPES),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=5)
    ),
    max_leaves=20,
)
event_data = st.one_of(
    st.text(max_size=30),
    json_values.map(json.dumps),
    shaped.map(json.dumps),
    st.just("[DONE]"),
)
events = st.lists(st.tuples(st.sampled_from(["message", *_TYPES]), event_data), max_size=12)


def fold(provider: Any, stream: list[tuple[str, str]]) -> ModelResponse | None:
    state = provider.stream_state()
    try:
        for event, data in stream:
            state.feed(event, data)
        return provider.parse(state.body(), REQUEST)  # type: ignore[no-any-return]
    except (Malformed, ServerReported, ModelError):  # a refusal is a ModelError at once
        return None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events)
def test_an_openai_stream_folds_or_fails_typed(stream: list[tuple[str, str]]) -> None:
    fold(OPENAI, stream)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events)
def test_an_anthropic_stream_folds_or_fails_typed(stream: list[tuple[str, str]]) -> None:
    fold(ANTHROPIC, stream)


@settings(max_examples=200, deadline=None)
@given(shaped | json_values)
def test_a_body_parses_or_fails_typed(body: Any) -> None:
    for provider in (OPENAI, ANTHROPIC):
        try:
            answer = provider.parse(body, REQUEST)
        except (Malformed, ServerReported, ModelError):
            continue
        assert isinstance(answer, ModelResponse)
        assert answer.usage.input_tokens >= 0 and answer.usage.output_tokens >= 0


def _valid_anthropic() -> list[tuple[str, str]]:
    message = {"type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 9}}
    thinking = {"type": "thinking", "thinking": "", "signature": ""}
    tool = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}

    def delta(index: int, kind: str, field: str, piece: str) -> dict[str, Any]:
        change = {"type": kind, field: piece}
        return {"type": "content_block_delta", "index": index, "delta": change}

    raw: list[dict[str, Any]] = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": thinking},
        delta(0, "thinking_delta", "thinking", "Hm."),
        delta(0, "signature_delta", "signature", "Eq=="),
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        delta(1, "text_delta", "text", "Hi"),
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": tool},
        delta(2, "input_json_delta", "partial_json", '{"a": 1}'),
        {"type": "content_block_stop", "index": 2},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
        {"type": "message_stop"},
    ]
    return [(e["type"], json.dumps(e)) for e in raw]


VALID = _valid_anthropic()


def test_the_valid_stream_folds() -> None:
    answer = fold(ANTHROPIC, VALID)
    assert answer is not None and answer.text == "Hi" and answer.thinking[0]["signature"] == "Eq=="


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, len(VALID) - 1), max_size=3),
    st.integers(0, len(VALID)),
    event_data,
)
def test_a_damaged_anthropic_stream_folds_or_fails_typed(
    dropped: list[int], at: int, inserted: str
) -> None:
    stream = [e for i, e in enumerate(VALID) if i not in dropped]
    stream.insert(min(at, len(stream)), ("message", inserted))
    fold(ANTHROPIC, stream)
