"""The loopback model server the live providers' tests talk to, and both wire formats.

The server and the answers' shapes are `tests.model_server`'s (tests of other packages use them
too); here are its fixture, the key in the environment, and each wire format as a `Wire`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from pytest_harness.errors import ModelError
from pytest_harness.models.anthropic import AnthropicProvider
from pytest_harness.models.base import ModelRequest, ToolSchema
from pytest_harness.models.http import HttpProvider
from pytest_harness.models.openai import OpenAIProvider
from tests.model_server import (
    KEY,
    KEY_ENV,
    ModelServer,
    anthropic_body,
    anthropic_stream,
    openai_body,
    openai_stream,
)


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key in the environment; no proxy between the client and the loopback server."""
    monkeypatch.setenv(KEY_ENV, KEY)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@dataclass(frozen=True)
class Wire:
    """One provider's wire format, so a test can run against both."""

    name: str
    provider: type[HttpProvider]
    path: str
    suffix: str
    body: Callable[..., dict[str, Any]]
    stream: Callable[..., list[str]]
    usage: tuple[int, int]

    def make(self, server: ModelServer, **settings: Any) -> HttpProvider:
        settings.setdefault("timeout", 5.0)
        if self.name == "anthropic":  # the Messages API requires it; the spec must say it
            settings.setdefault("options", {"max_tokens": 512})
        return self.provider(
            model="test-model",
            model_name="default",
            base_url=server.url + self.suffix,
            api_key_env=KEY_ENV,
            **settings,
        )

    def error_event(self, error: dict[str, Any]) -> list[str]:
        if self.name == "openai":
            return [*openai_stream(("Hel",))[:2], f"data: {json.dumps({'error': error})}\n\n"]
        first = anthropic_stream(("Hel",))[:2]
        return [*first, f"event: error\ndata: {json.dumps({'type': 'error', 'error': error})}\n\n"]


OPENAI = Wire(
    "openai", OpenAIProvider, "/v1/chat/completions", "/v1", openai_body, openai_stream, (12, 5)
)
ANTHROPIC = Wire(
    "anthropic", AnthropicProvider, "/v1/messages", "", anthropic_body, anthropic_stream, (20, 7)
)
WIRES = pytest.mark.parametrize("wire", [OPENAI, ANTHROPIC], ids=["openai", "anthropic"])

LOOKUP = ToolSchema(
    "lookup_order",
    "Look an order up.",
    {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
)
CONVERSATION = (
    {"role": "user", "content": "Refund A-1 and A-2"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "name": "lookup_order", "args": {"order_id": "A-1"}},
            {"id": "call_2", "name": "lookup_order", "args": {"order_id": "A-2"}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "name": "lookup_order", "content": '{"total": 250}'},
    {"role": "tool", "tool_call_id": "call_2", "name": "lookup_order", "content": '{"total": 10}'},
)


def request(
    messages: tuple[Any, ...] = ({"role": "user", "content": "hi"},),
    *,
    tools: tuple[ToolSchema, ...] = (),
    on_text: Callable[[str], None] | None = None,
    on_first_event: Callable[[], None] | None = None,
) -> ModelRequest:
    return ModelRequest(
        task="orders",
        model="default",
        system="You are the order desk.",
        messages=messages,
        tools=tools,
        run_id="run_test",
        turn=0,
        input="hi",
        on_text=on_text,
        on_first_event=on_first_event,
    )


async def fails(provider: HttpProvider, req: ModelRequest | None = None) -> ModelError:
    with pytest.raises(ModelError) as info:
        await provider.complete(req or request())
    return info.value
