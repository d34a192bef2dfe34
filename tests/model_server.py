"""A loopback model server that speaks the live providers' wire formats, for any test.

The server is a minimal HTTP/1.1 server on asyncio: each request gets the next queued reply
(JSON, a raw body, or SSE chunks), optionally after a delay; every request it received is kept
for the tests to inspect. No traffic leaves the loopback interface. A live model in a spec
points at it with `base_url` (`ModelServer.url`, plus `/v1` for OpenAI) and reads its key from
`KEY_ENV` (set to `KEY`). `openai_body` / `anthropic_body` (and their `_stream` forms) write
the answers as each provider's API does.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

KEY = f"sk-test-{uuid.uuid4().hex}"
KEY_ENV = "PH_TEST_MODEL_KEY"


# -- the server ---------------------------------------------------------------------------------


@dataclass
class Reply:
    """One answer of the server: `json`, `raw` bytes, or `sse` chunks, after `delay` seconds.

    `echo` replaces `$AUTH` in `raw` with the credential header the request carried; `hold`
    (with `hold_after`) pauses the SSE stream after that many chunks until the event is set.
    """

    status: int = 200
    json: Any = None
    raw: bytes | None = None
    sse: list[str] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    echo: bool = False
    hold: asyncio.Event | None = None
    hold_after: int = 1


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class ModelServer:
    """Answers each request with the next queued `Reply`; keeps what it received."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.received: list[Received] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def reply(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            self.tasks.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        method, path, _ = (await reader.readline()).decode().split(" ", 2)
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        raw_body = await reader.readexactly(int(headers.get("content-length", "0")))
        self.received.append(
            Received(method, path, headers, json.loads(raw_body) if raw_body else None)
        )
        reply = (
            self.replies.popleft()
            if self.replies
            else Reply(500, json={"error": {"message": "the test queued no reply"}})
        )
        if reply.delay:
            await asyncio.sleep(reply.delay)
        head = [f"HTTP/1.1 {reply.status} X", "Connection: close"]
        head += [f"{k}: {v}" for k, v in reply.headers.items()]
        if reply.sse is not None:
            head += ["Content-Type: text/event-stream", "Transfer-Encoding: chunked"]
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
            for i, chunk in enumerate(reply.sse):
                if reply.hold is not None and i == reply.hold_after:
                    await asyncio.wait_for(reply.hold.wait(), 2)
                data = chunk.encode()
                writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
        else:
            if reply.raw is not None:
                content = reply.raw
                if reply.echo:
                    auth = headers.get("authorization") or headers.get("x-api-key") or ""
                    content = content.replace(b"$AUTH", auth.encode())
            else:
                content = json.dumps(reply.json).encode()
                head.append("Content-Type: application/json")
            head.append(f"Content-Length: {len(content)}")
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + content)
        await writer.drain()


# -- the two wire formats, as the tests write them ----------------------------------------------

Call = tuple[str, str, str]
"""(id, name, JSON arguments as the model writes them)."""


def openai_body(text: str | None, calls: tuple[Call, ...] = (), usage=(12, 5)) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ]
    finish = "tool_calls" if calls else "stop"
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        },
    }


def openai_stream(
    pieces: tuple[str, ...], calls: tuple[Call, ...] = (), usage=(12, 5)
) -> list[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": p}) for p in pieces]
    for index, (call_id, name, args) in enumerate(calls):
        start = {"index": index, "id": call_id, "type": "function"}
        chunks.append(
            chunk({"tool_calls": [{**start, "function": {"name": name, "arguments": ""}}]})
        )
        half = len(args) // 2
        for part in (args[:half], args[half:]):
            chunks.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
            )
    chunks.append(chunk({}, "tool_calls" if calls else "stop"))
    chunks.append(
        {
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]},
        }
    )
    return [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]


def anthropic_body(
    text: str | None, calls: tuple[Call, ...] = (), usage=(20, 7), stop: str | None = None
) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [
        {"type": "tool_use", "id": i, "name": n, "input": json.loads(a)} for i, n, a in calls
    ]
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop or ("tool_use" if calls else "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def anthropic_stream(
    pieces: tuple[str, ...], calls: tuple[Call, ...] = (), usage=(20, 7), stop: str | None = None
) -> list[str]:
    start = anthropic_body(None, usage=(usage[0], 1))
    start.update(content=[], stop_reason=None)
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    index = 0
    if pieces:
        events.append(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            }
        )
        events.append({"type": "ping"})
        events += [
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}
            for p in pieces
        ]
        events.append({"type": "content_block_stop", "index": 0})
        index = 1
    for offset, (call_id, name, args) in enumerate(calls):
        i = index + offset
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        events.append({"type": "content_block_start", "index": i, "content_block": block})
        half = len(args) // 2
        events += [
            {
                "type": "content_block_delta",
                "index": i,
                "delta": {"type": "input_json_delta", "partial_json": part},
            }
            for part in (args[:half], args[half:])
        ]
        events.append({"type": "content_block_stop", "index": i})
    reason = stop or ("tool_use" if calls else "end_turn")
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": None},
            "usage": {"output_tokens": usage[1]},
        }
    )
    events.append({"type": "message_stop"})
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events]
