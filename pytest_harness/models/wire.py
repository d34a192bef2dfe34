"""What the two wire formats share that is not HTTP: SSE events, tool arguments, bad bodies.

Providers raise `Malformed` for an answer that does not have its format's shape and
`ServerReported` for an error the server wrote into an answer or a stream; `HttpProvider` turns
both into `ModelError`s.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

__all__ = [
    "RAW_ARGUMENTS",
    "Malformed",
    "ServerReported",
    "StreamState",
    "dump_arguments",
    "iter_sse",
    "parse_arguments",
]

RAW_ARGUMENTS = "_raw_arguments"
"""The key that carries tool arguments which are not a JSON object, as the model wrote them."""


class Malformed(Exception):
    """The server's answer does not have the shape its wire format promises.

    `cut` is true for a stream that ended before its answer did (the connection dropped): asking
    again can help, so that one is a retried `server` error; any other malformed answer (a chunk
    that is not JSON, an unknown content block) would come back the same and is not retried.
    """

    def __init__(
        self, message: str, *, cut: bool = False, usage: tuple[int, int] | None = None
    ) -> None:
        self.cut = cut
        self.usage = usage
        """`(input, output)` tokens, when the malformed answer said what it cost."""
        super().__init__(message)


class ServerReported(Exception):
    """The server reported an error inside a successful answer or a stream.

    `usage` is `(input_tokens, output_tokens)` when the answer that carried the error also said
    what it cost (OpenRouter puts usage in the chunk of a mid-stream error): it was billed.
    """

    def __init__(self, error: Any, usage: tuple[int, int] | None = None) -> None:
        self.error = error
        self.usage = usage
        super().__init__("error reported by the server")


class StreamState(Protocol):
    """Folds the events of an SSE stream into the body the non-streamed call would return."""

    def feed(self, event: str, data: str) -> str | None:
        """Take one event; return its text delta, if it has one."""
        ...

    def body(self) -> Mapping[str, Any]:
        """The answer as one JSON body; `Malformed` when the stream ended before the answer."""
        ...


async def iter_sse(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, str]]:
    """Server-sent events `(event, data)` from the lines of a response.

    `event` defaults to `message`; comments, `id` and `retry` fields are skipped.
    """
    event, data = "", list[str]()
    async for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield event or "message", "\n".join(data)
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
    if data:
        yield event or "message", "\n".join(data)


def parse_arguments(raw: Any) -> dict[str, Any]:
    """Tool arguments from the model: a JSON object (text or parsed); empty means none.

    Anything else is passed on as `{"_raw_arguments": text}`, so that argument validation
    tells the model its call was malformed (and the trace shows what it wrote) instead of the
    whole answer failing.
    """
    if isinstance(raw, Mapping):
        return dict(raw)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    text = raw if isinstance(raw, str) else json.dumps(raw)
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return parsed
    return {RAW_ARGUMENTS: text}


def dump_arguments(args: Mapping[str, Any]) -> str:
    """Tool arguments as JSON text for the wire: malformed ones go back exactly as written."""
    if set(args) == {RAW_ARGUMENTS} and isinstance(args[RAW_ARGUMENTS], str):
        return str(args[RAW_ARGUMENTS])
    return json.dumps(dict(args), ensure_ascii=False)
