"""The `anthropic` provider: the Messages API (`POST /v1/messages`).

`base_url` (default `https://api.anthropic.com`) is the server's root, without `/v1`. The key
is sent as `x-api-key`, with `anthropic-version: 2023-06-01`. `max_tokens`, which the API
requires, must be set in the model's `options` (with `temperature`, `thinking`, …): the provider
adds no hidden default.

Signed `thinking` and `redacted_thinking` blocks are kept on the answer and sent back unchanged
(signature included) at the head of the assistant turn, as the API requires after a tool call.
Text blocks are joined as paragraphs (a blank line between them).
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

__all__ = ["ANTHROPIC_VERSION", "AnthropicProvider"]

ANTHROPIC_VERSION = "2023-06-01"
_THINKING_BLOCKS = frozenset({"thinking", "redacted_thinking"})
_TRUNCATED = {"max_tokens": "max_tokens", "model_context_window_exceeded": "context_window"}
"""`stop_reason`s of an answer cut short, by the `incomplete` reason they give."""


class AnthropicProvider(HttpProvider):
    """Answers model requests through Anthropic's Messages API."""

    name = "anthropic"
    default_base_url = "https://api.anthropic.com"
    default_key_env = "ANTHROPIC_API_KEY"
    path = "/v1/messages"
    reserved_options = frozenset({"model", "messages", "system", "tools", "stream"})

    @classmethod
    def settings_problem(
        cls, *, base_url: str, api_key_env: str, options: Mapping[str, Any]
    ) -> tuple[tuple[str, ...], str] | None:
        """The common checks, then `options.max_tokens` (required) and `options.thinking`."""
        problem = super().settings_problem(
            base_url=base_url, api_key_env=api_key_env, options=options
        )
        if problem is not None:
            return problem
        if "max_tokens" not in options:
            return ("options",), (
                "an anthropic model needs options.max_tokens (the API requires the most output "
                "tokens an answer may use), e.g. options: {max_tokens: 4096}"
            )
        thinking = options.get("thinking")
        if thinking is not None and (
            not isinstance(thinking, Mapping) or not isinstance(thinking.get("type"), str)
        ):
            return ("options", "thinking"), (
                "options.thinking must be a mapping with a `type`, e.g. "
                f"{{type: enabled, budget_tokens: 2048}}, got {thinking!r:.80}"
            )
        if isinstance(thinking, Mapping) and thinking.get("type") == "enabled":
            budget = thinking.get("budget_tokens")
            if not _positive_int(budget):
                return ("options", "thinking", "budget_tokens"), (
                    "thinking of type enabled needs budget_tokens, a positive whole number of "
                    f"tokens, got {budget!r:.80}"
                )
        return None

    def headers(self, key: str) -> dict[str, str]:
        """The key and the API version."""
        return {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION}

    def body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        """Top-level `system`; tool results as `tool_result` blocks of a user turn."""
        body: dict[str, Any] = {"model": self.model, "messages": _messages(request)}
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
        """Text blocks joined as paragraphs, `tool_use` blocks as calls, thinking kept, usage.

        `stop_reason: refusal` raises `ModelError`; `max_tokens` and
        `model_context_window_exceeded` mark the answer `incomplete`. A block of a type this
        provider does not know is `Malformed` (dropping it would lose part of the answer).
        """
        if not isinstance(data, Mapping):
            raise Malformed(f"expected a JSON object, got {type(data).__name__}")
        if data.get("type") == "error" or ("content" not in data and data.get("error")):
            raise ServerReported(data.get("error"))
        content = data.get("content")
        if not isinstance(content, list):
            raise Malformed("no `content` list")
        stop = data.get("stop_reason")
        if stop == "refusal":
            raise self.error("refusal", "the model refused (stop_reason 'refusal')")
        texts: list[str] = []
        calls: list[ProposedCall] = []
        thinking: list[dict[str, Any]] = []
        for i, block in enumerate(content):
            if not isinstance(block, Mapping):
                raise Malformed(f"`content[{i}]` is not an object")
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "tool_use":
                name, call_id = block.get("name"), block.get("id")
                if not isinstance(name, str) or not name:
                    raise Malformed(f"`content[{i}]` (tool_use) has no `name`")
                call_id = call_id if isinstance(call_id, str) and call_id else f"toolu_{i}"
                calls.append(ProposedCall(call_id, name, parse_arguments(block.get("input"))))
            elif kind in _THINKING_BLOCKS:
                thinking.append(dict(block))
            else:  # the answer was billed all the same
                billed = _usage(data, request, None, [])
                raise Malformed(
                    f"`content[{i}]` has a block type this provider does not know: "
                    f"{kind!r} (block {_describe_block(block)})",
                    usage=(billed.input_tokens, billed.output_tokens),
                )
        text = "\n\n".join(t for t in texts if t) or None
        return ModelResponse(
            text=text,
            calls=tuple(calls),
            usage=_usage(data, request, text, calls),
            thinking=tuple(thinking),
            incomplete=_TRUNCATED.get(stop) if isinstance(stop, str) else None,
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
        self.last = ""
        """The type of the last event, for the error of a stream that stops early."""
        self.texts = 0
        """Text blocks whose text has begun: the next one's first piece starts a paragraph."""

    def feed(self, event: str, data: str) -> str | None:
        try:
            payload = json.loads(data)
        except ValueError:
            raise Malformed(f"a stream event is not JSON: {data[:200]!r}") from None
        if not isinstance(payload, Mapping):
            raise Malformed(f"a stream event is not a JSON object: {data[:200]!r}")
        kind = payload.get("type") or event
        if not isinstance(kind, str):
            raise Malformed(f"a stream event's `type` is not a string: {data[:200]!r}")
        self.last = kind
        if kind == "error":
            raise ServerReported(payload.get("error"))
        if kind == "message_start":
            message = payload.get("message")
            if not isinstance(message, Mapping):
                raise Malformed("`message_start` has no `message`")
            usage = message.get("usage")
            self.message = dict(message)
            self.message["usage"] = dict(usage) if isinstance(usage, Mapping) else {}
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
            if block.get("type") not in _KNOWN_BLOCKS:
                raise Malformed(
                    f"block {index} has a type this provider does not know: "
                    f"{block.get('type')!r} (block {_describe_block(block)})"
                )
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
        change = str(delta.get("type"))
        field = _DELTA_FIELDS.get(change)
        if field is None or not isinstance(delta.get(field), str):
            raise Malformed(
                f"block {index} got a delta this provider does not know: {delta.get('type')!r}"
            )
        piece: str = delta[field]
        if change == "input_json_delta":
            self.partial_json.setdefault(index, []).append(piece)
        elif change == "signature_delta":
            target["signature"] = target.get("signature", "") + piece
        elif change == "thinking_delta":
            target["thinking"] = target.get("thinking", "") + piece
        elif piece:  # a text_delta: the non-streamed answer joins text blocks as paragraphs
            begins = not target.get("text")
            target["text"] = target.get("text", "") + piece
            if begins:
                self.texts += 1
                return "\n\n" + piece if self.texts > 1 else piece
            return piece
        return None

    def body(self) -> Mapping[str, Any]:
        if self.message is None or not self.stopped:
            last = f"the last was `{self.last}`" if self.last else "none came"
            raise Malformed(f"the stream ended before `message_stop` ({last})", cut=True)
        for index, parts in self.partial_json.items():  # blocks the stream never stopped
            self.blocks[index]["input"] = "".join(parts)
        return {**self.message, "content": [self.blocks[i] for i in sorted(self.blocks)]}


_BLOCK_EVENTS = frozenset({"content_block_start", "content_block_delta", "content_block_stop"})
_KNOWN_BLOCKS = frozenset({"text", "tool_use", *_THINKING_BLOCKS})
_DELTA_FIELDS = {
    "text_delta": "text",
    "input_json_delta": "partial_json",
    "thinking_delta": "thinking",
    "signature_delta": "signature",
}
"""The delta types of a streamed block, with the field that holds each one's piece."""


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _describe_block(block: Mapping[str, Any]) -> str:
    """A block's keys, never its content (which may be long or sensitive)."""
    return "with keys " + ", ".join(sorted(str(k) for k in block)) if block else "empty"


def _messages(request: ModelRequest) -> list[dict[str, Any]]:
    """Alternating user and assistant turns of content blocks; neighbours of one role merge.

    An assistant turn is its thinking blocks, its text, then its `tool_use` blocks.
    """
    out: list[dict[str, Any]] = []
    for m in request.messages:
        role, content = m.get("role"), m.get("content") or ""
        blocks: list[dict[str, Any]] = []
        if role == "assistant":  # thinking first, exactly as received: the API checks it
            blocks += [dict(b) for b in m.get("thinking") or ()]
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
