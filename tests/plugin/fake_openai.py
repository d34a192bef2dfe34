"""A fake OpenAI-compatible Chat Completions server on 127.0.0.1, in a thread, for cassette tests.

It answers from the conversation alone (stateless, deterministic): a request offering no
tools (an eval judge) gets `0.9`; otherwise, no tool result yet → call
`lookup_order` for the order named in the user's message; one → call `refund` when the user asked
for a refund of `$N`, else say the lookup's result; more → say the last result. It counts the
requests it served, so a test can tell that nothing reached it.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def answer(body: dict[str, Any]) -> dict[str, Any]:
    messages = body["messages"]
    user = next(m["content"] for m in messages if m["role"] == "user")
    results = [m["content"] for m in messages if m["role"] == "tool"]
    named = re.search(r"A-\d+", user)
    order = named[0] if named else "A-1"
    refund = re.search(r"\$(\d+)", user)
    calls: list[tuple[str, dict[str, Any]]] = []
    text = None
    if not body.get("tools"):  # an online eval's judge: a score
        text = "0.9"
    elif not results:
        calls = [("lookup_order", {"order_id": order})]
    elif len(results) == 1 and refund:
        calls = [("refund", {"order_id": order, "amount": int(refund[1])})]
    else:
        text = f"Done: {results[-1]}"
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {
                "id": f"call_{len(results)}_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(calls)
        ]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    }


class FakeOpenAI:
    """`with FakeOpenAI() as server:` serves `server.url` until the block ends."""

    def __init__(self) -> None:
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length))
                outer.requests += 1
                data = json.dumps(answer(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
