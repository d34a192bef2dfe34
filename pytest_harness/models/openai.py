"""The `openai` provider: the Chat Completions wire format, to OpenAI or any compatible server.

`base_url` (default `https://api.openai.com/v1`) may point at any server that speaks
`POST /chat/completions` (vLLM, llama.cpp, Ollama, LiteLLM, Azure's compatible endpoint); the
key is sent as `Authorization: Bearer`. Streaming asks for usage in the last chunk
(`stream_options.include_usage`).
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
from pytest_harness.models.wire import Malformed, ServerReported, dump_arguments, parse_arguments

__all__ = ["OpenAIProvider"]


class OpenAIProvider(HttpProvider):
    """Answers model requests through an OpenAI-compatible Chat Completions endpoint."""

    name = "openai"
    default_base_url = "https://api.openai.com/v1"
    default_key_env = "OPENAI_API_KEY"
    path = "/chat/completions"
    reserved_options = frozenset({"model", "messages", "tools", "stream", "stream_options"})

    def headers(self, key: str) -> dict[str, str]:
        """A bearer token."""
        return {"Authorization": f"Bearer {key}"}

    def body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        """System prompt first, then the conversation; tools as `function` tools."""
        body: dict[str, Any] = {"model": self.model, "messages": _messages(request)}
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": dict(t.parameters),
                    },
                }
                for t in request.tools
            ]
        body.update(self.options)
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def parse(self, data: Any, request: ModelRequest) -> ModelResponse:
        """Text, tool calls and usage of the first choice; a refusal raises `ModelError`.

        `finish_reason: "length"` marks the answer `incomplete` (`max_tokens`). An `error` in
        the body (OpenRouter reports a failure that happened after the 200 this way, with the
        usage the attempt cost) raises `ServerReported`.
        """
        if not isinstance(data, Mapping):
            raise Malformed(f"expected a JSON object, got {type(data).__name__}")
        choices = data.get("choices")
        error = data.get("error")
        if error and isinstance(error, Mapping | str):
            raise ServerReported(error, billed_usage(data.get("usage")))
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            raise Malformed("no `choices`")
        finish = choices[0].get("finish_reason")
        if finish == "error":
            error = {"message": "the answer ended with finish_reason 'error'"}
            raise ServerReported(error, billed_usage(data.get("usage")))
        message = choices[0].get("message")
        if not isinstance(message, Mapping):
            raise Malformed("no `choices[0].message`")
        refusal = message.get("refusal")
        if refusal or finish == "content_filter":
            reason = refusal if isinstance(refusal, str) else "content_filter"
            raise self.error("refusal", f"the model refused: {reason[:300]!r}")
        text = message.get("content")
        if text is not None and not isinstance(text, str):
            raise Malformed("`choices[0].message.content` is not a string")
        calls = tuple(_call(i, c) for i, c in enumerate(_list(message, "tool_calls")))
        return ModelResponse(
            text=text or None,
            calls=calls,
            usage=_usage(data, request, text, calls),
            incomplete=_TRUNCATED.get(finish) if isinstance(finish, str) else None,
        )

    def stream_state(self) -> _Stream:
        """Folds `chat.completion.chunk`s into one `chat.completion`."""
        return _Stream()


_TRUNCATED = {"length": "max_tokens", "max_tokens": "max_tokens"}
"""`finish_reason`s of an answer cut at its token limit, by the `incomplete` reason they give."""


class _Stream:
    """The chunks of one streamed completion, folded as the non-streamed body would read."""

    def __init__(self) -> None:
        self.chunks = 0
        self.last = ""
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.done = False

    def feed(self, event: str, data: str) -> str | None:
        if data.strip() == "[DONE]":
            self.done = True
            return None
        if self.done:
            raise Malformed(f"a stream chunk came after `[DONE]`: {data[:200]!r}")
        self.chunks += 1
        self.last = data
        try:
            chunk = json.loads(data)
        except ValueError:
            raise Malformed(f"stream chunk {self.chunks} is not JSON: {data[:200]!r}") from None
        if not isinstance(chunk, Mapping):
            raise Malformed(f"stream chunk {self.chunks} is not a JSON object: {data[:200]!r}")
        if chunk.get("error"):
            raise ServerReported(chunk["error"], billed_usage(chunk.get("usage")))
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        delta_text = None
        for choice in _list(chunk, "choices"):
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if not isinstance(delta, Mapping):
                raise Malformed(f"a stream chunk's `delta` is not an object: {data[:200]!r}")
            if isinstance(delta.get("content"), str) and delta["content"]:
                delta_text = delta["content"]
                self.text.append(delta_text)
            if isinstance(delta.get("refusal"), str):
                self.refusal.append(delta["refusal"])
            for piece in _list(delta, "tool_calls"):
                self._fold_call(piece)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return delta_text

    def _fold_call(self, piece: Any) -> None:
        """Add one piece of a tool call: its id and name come first, its arguments in parts."""
        if not isinstance(piece, Mapping):
            raise Malformed(f"a streamed tool call is not an object: {piece!r:.200}")
        index = piece.get("index")
        if not isinstance(index, int):  # servers that omit it send one call at a time
            index = max(self.calls, default=-1) + (1 if piece.get("id") or not self.calls else 0)
        slot = self.calls.setdefault(
            index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if isinstance(piece.get("id"), str) and piece["id"]:
            slot["id"] = piece["id"]
        function = piece.get("function")
        for field in ("name", "arguments"):
            if isinstance(function, Mapping) and isinstance(function.get(field), str):
                slot["function"][field] += function[field]

    def body(self) -> Mapping[str, Any]:
        if not self.done:
            # Cut before its answer ended (a dropped connection): asking again can help. Ended
            # but never closed with `[DONE]`: the server breaks the format, and would again.
            where = f"after {self.chunks} chunks" if self.chunks else "before any chunk"
            last = f"; the last: {self.last[:200]!r}" if self.last else ""
            raise Malformed(
                f"the stream ended without `data: [DONE]`, {where}{last}",
                cut=self.finish_reason is None,
                usage=billed_usage(self.usage),
            )
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        choice = {"index": 0, "message": message, "finish_reason": self.finish_reason}
        return {"object": "chat.completion", "choices": [choice], "usage": self.usage}


def _messages(request: ModelRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for m in request.messages:
        role = m.get("role") or "user"
        if role == "tool":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": m.get("tool_call_id", ""),
                    "content": m.get("content") or "",
                }
            )
        elif role == "assistant":
            message: dict[str, Any] = {"role": "assistant", "content": m.get("content")}
            calls = m.get("tool_calls") or []
            if calls:
                message["tool_calls"] = [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {
                            "name": c["name"],
                            "arguments": dump_arguments(c.get("args") or {}),
                        },
                    }
                    for c in calls
                ]
            elif message["content"] is None:
                message["content"] = ""
            out.append(message)
        else:
            out.append({"role": role, "content": m.get("content") or ""})
    return out


def _call(index: int, raw: Any) -> ProposedCall:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("function"), Mapping):
        raise Malformed(f"`tool_calls[{index}]` has no `function`")
    function = raw["function"]
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise Malformed(f"`tool_calls[{index}].function` has no `name`")
    call_id = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else None
    return ProposedCall(
        id=call_id or f"call_{index}", name=name, args=parse_arguments(function.get("arguments"))
    )


def _usage(
    data: Mapping[str, Any],
    request: ModelRequest,
    text: str | None,
    calls: tuple[ProposedCall, ...],
) -> TokenUsage:
    """What the provider bills (`billed_usage`); estimated when the server reports none."""
    billed = billed_usage(data.get("usage"))
    if billed is not None:
        return TokenUsage(*billed)
    answer = (text or "") + "".join(json.dumps(dict(c.args)) for c in calls)
    return TokenUsage(estimate_request_tokens(request), estimate_tokens(answer))


def billed_usage(usage: Any) -> tuple[int, int] | None:
    """`(input, output)` tokens as billed, from a `usage` object; None when it has no input count.

    Input is `prompt_tokens` (or `input_tokens`). Output is `completion_tokens` (or
    `output_tokens`), plus the reasoning tokens a server reports outside it: when
    `completion_tokens_details.reasoning_tokens` (or `output_tokens_details`) exceeds the
    output count, they are added to it; when `total_tokens` exceeds input + output, the excess
    is counted as output (servers such as Gemini's compatible endpoint bill thinking that way).
    """
    if not isinstance(usage, Mapping):
        return None
    tokens_in = _int(usage.get("prompt_tokens"), usage.get("input_tokens"))
    if tokens_in is None:
        return None
    tokens_out = _int(usage.get("completion_tokens"), usage.get("output_tokens")) or 0
    for details in (usage.get("completion_tokens_details"), usage.get("output_tokens_details")):
        reasoning = _int(details.get("reasoning_tokens")) if isinstance(details, Mapping) else None
        if reasoning is not None and reasoning > tokens_out:
            tokens_out += reasoning
            break
    total = _int(usage.get("total_tokens"))
    if total is not None and total > tokens_in + tokens_out:
        tokens_out = total - tokens_in
    return tokens_in, tokens_out


def _list(holder: Mapping[str, Any], key: str) -> list[Any]:
    """`holder[key]` as a list (absent or null: empty); `Malformed` when it is something else."""
    value = holder.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise Malformed(f"`{key}` is not a list: {json.dumps(value, default=str)[:200]}")
    return value


def _int(*values: Any) -> int | None:
    """The first value that is a non-negative int (not a bool)."""
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None
