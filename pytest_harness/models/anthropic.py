"""The `anthropic` provider: the Messages API (`POST /v1/messages`).

`base_url` (default `https://api.anthropic.com`) is the server's root, without `/v1`. The key
is sent as `x-api-key`, with `anthropic-version: 2023-06-01`. `max_tokens`, which the API
requires, defaults to 1024; set it (or `temperature`, `top_p`, …) in the model's `options`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pytest_harness.models.base import (
    ModelRequest,
    ModelResponse,
    ProposedCall,
    TokenUsage,
    estimate_request_tokens,
    estimate_tokens,
)
from pytest_harness.models.http import HttpProvider
from pytest_harness.models.wire import Malformed, ServerReported, parse_arguments

__all__ = ["ANTHROPIC_VERSION", "DEFAULT_MAX_TOKENS", "AnthropicProvider"]

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 1024
"""`max_tokens` when the model's `options` set none (the API requires one)."""


class AnthropicProvider(HttpProvider):
    """Answers model requests through Anthropic's Messages API."""

    name = "anthropic"
    default_base_url = "https://api.anthropic.com"
    default_key_env = "ANTHROPIC_API_KEY"
    path = "/v1/messages"
    reserved_options = frozenset({"model", "messages", "system", "tools", "stream"})

    def headers(self, key: str) -> dict[str, str]:
        """The key and the API version."""
        return {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION}

    def body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        """Top-level `system`; tool results as `tool_result` blocks of a user turn."""
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": DEFAULT_MAX_TOKENS,
            "messages": _messages(request),
        }
        if request.system:
            body["system"] = request.system
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
                for t in request.tools
            ]
        body.update(self.options)
        if stream:
            body["stream"] = True
        return body

    def parse(self, data: Any, request: ModelRequest) -> ModelResponse:
        """Text blocks joined, `tool_use` blocks as calls, usage; `refusal` raises `ModelError`."""
        if not isinstance(data, Mapping):
            raise Malformed(f"expected a JSON object, got {type(data).__name__}")
        if data.get("type") == "error" or ("content" not in data and data.get("error")):
            raise ServerReported(data.get("error"))
        content = data.get("content")
        if not isinstance(content, list):
            raise Malformed("no `content` list")
        if data.get("stop_reason") == "refusal":
            raise self.error("refusal", "the model refused (stop_reason 'refusal')")
        texts: list[str] = []
        calls: list[ProposedCall] = []
        for i, block in enumerate(content):
            if not isinstance(block, Mapping):
                raise Malformed(f"`content[{i}]` is not an object")
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif block.get("type") == "tool_use":
                name, call_id = block.get("name"), block.get("id")
                if not isinstance(name, str) or not name:
                    raise Malformed(f"`content[{i}]` (tool_use) has no `name`")
                call_id = call_id if isinstance(call_id, str) and call_id else f"toolu_{i}"
                calls.append(ProposedCall(call_id, name, parse_arguments(block.get("input"))))
        text = "".join(texts) or None
        return ModelResponse(
            text=text, calls=tuple(calls), usage=_usage(data, request, text, calls)
        )

    def stream_state(self) -> _Stream:
        """Folds Messages stream events into one `message`."""
        return _Stream()


class _Stream:
    """The events of one streamed message, folded as the non-streamed body would read."""

    def __init__(self) -> None:
        self.message: dict[str, Any] | None = None
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial_json: dict[int, list[str]] = {}
        self.stopped = False

    def feed(self, event: str, data: str) -> str | None:
        try:
            payload = json.loads(data)
        except ValueError:
            raise Malformed(f"a stream event is not JSON: {data[:200]!r}") from None
        if not isinstance(payload, Mapping):
            raise Malformed(f"a stream event is not a JSON object: {data[:200]!r}")
        kind = payload.get("type") or event
        if kind == "error":
            raise ServerReported(payload.get("error"))
        if kind == "message_start":
            message = payload.get("message")
            if not isinstance(message, Mapping):
                raise Malformed("`message_start` has no `message`")
            self.message = dict(message)
            self.message["usage"] = dict(message.get("usage") or {})
            return None
        if kind == "message_stop":
            self.stopped = True
            return None
        if kind not in _BLOCK_EVENTS and kind != "message_delta":
            return None  # `ping`, and event types added to the API later
        if self.message is None:
            raise Malformed(f"`{kind}` came before `message_start`")
        if kind == "message_delta":
            delta = payload.get("delta")
            if isinstance(delta, Mapping):
                self.message.update({k: v for k, v in delta.items() if v is not None})
            usage = payload.get("usage")
            if isinstance(usage, Mapping):
                self.message["usage"].update({k: v for k, v in usage.items() if v is not None})
            return None
        return self._fold_block(kind, payload)

    def _fold_block(self, kind: str, payload: Mapping[str, Any]) -> str | None:
        index = payload.get("index")
        if not isinstance(index, int):
            raise Malformed(f"`{kind}` has no `index`")
        if kind == "content_block_start":
            block = payload.get("content_block")
            if not isinstance(block, Mapping):
                raise Malformed("`content_block_start` has no `content_block`")
            self.blocks[index] = dict(block)
            return None
        target = self.blocks.get(index)
        if target is None:
            raise Malformed(f"`{kind}` for block {index}, which never started")
        if kind == "content_block_stop":
            parts = self.partial_json.pop(index, None)
            if parts is not None:
                target["input"] = "".join(parts)
            return None
        delta = payload.get("delta")
        if not isinstance(delta, Mapping):
            raise Malformed("`content_block_delta` has no `delta`")
        if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
            target["text"] = target.get("text", "") + delta["text"]
            return delta["text"] or None
        if delta.get("type") == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            self.partial_json.setdefault(index, []).append(delta["partial_json"])
        return None

    def body(self) -> Mapping[str, Any]:
        if self.message is None or not self.stopped:
            raise Malformed("the stream ended before `message_stop`")
        for index, parts in self.partial_json.items():  # blocks the stream never stopped
            self.blocks[index]["input"] = "".join(parts)
        return {**self.message, "content": [self.blocks[i] for i in sorted(self.blocks)]}


_BLOCK_EVENTS = frozenset({"content_block_start", "content_block_delta", "content_block_stop"})


def _messages(request: ModelRequest) -> list[dict[str, Any]]:
    """Alternating user and assistant turns of content blocks; neighbours of one role merge."""
    out: list[dict[str, Any]] = []
    for m in request.messages:
        role, content = m.get("role"), m.get("content") or ""
        blocks: list[dict[str, Any]] = []
        if role == "tool":
            blocks.append(
                {
                    "type": "tool_result",
                    "tool_use_id": m.get("tool_call_id", ""),
                    "content": content,
                }
            )
        elif content:
            blocks.append({"type": "text", "text": content})
        if role == "assistant":
            blocks += [
                {
                    "type": "tool_use",
                    "id": c["id"],
                    "name": c["name"],
                    "input": dict(c.get("args") or {}),
                }
                for c in m.get("tool_calls") or ()
            ]
        turn = "assistant" if role == "assistant" else "user"
        if not blocks:
            continue
        if out and out[-1]["role"] == turn:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": turn, "content": blocks})
    return out


def _usage(
    data: Mapping[str, Any],
    request: ModelRequest,
    text: str | None,
    calls: list[ProposedCall],
) -> TokenUsage:
    """Input tokens (cache writes and reads included) and output tokens; estimated if absent."""
    usage = data.get("usage")
    if isinstance(usage, Mapping) and isinstance(usage.get("input_tokens"), int):
        fields = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        tokens_in = sum(v for f in fields if isinstance(v := usage.get(f), int))
        output = usage.get("output_tokens")
        return TokenUsage(tokens_in, output if isinstance(output, int) else 0)
    answer = (text or "") + "".join(json.dumps(dict(c.args)) for c in calls)
    return TokenUsage(estimate_request_tokens(request), estimate_tokens(answer))
