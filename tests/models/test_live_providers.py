"""The live providers against a real HTTP server on 127.0.0.1 that speaks both wire formats.

The server (`tests.model_server.ModelServer`) answers each request with the next queued reply;
no traffic leaves the loopback interface. `test_wire_shapes.py` has the answers shaped after the
providers' API references (thinking blocks, errors inside a 200, truncation, reasoning usage).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

import pytest_harness as ph
from pytest_harness.errors import LiveModelBlocked, ModelError, SpecError
from pytest_harness.models.base import (
    ModelResponse,
    ProposedCall,
    TokenUsage,
)
from pytest_harness.models.http import BACKOFF_CAP, HttpProvider, backoff_delay, parse_retry_after
from pytest_harness.models.wire import iter_sse, parse_arguments
from tests.model_server import Reply

from .conftest import (
    ANTHROPIC,
    CONVERSATION,
    KEY,
    KEY_ENV,
    LOOKUP,
    OPENAI,
    WIRES,
    ModelServer,
    Wire,
    anthropic_body,
    anthropic_stream,
    fails,
    openai_body,
    request,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.harness(allow_live=True)]


# -- requests and answers -------------------------------------------------------------------------


async def test_openai_maps_system_messages_tool_calls_results_and_tools(server) -> None:
    server.reply(Reply(json=openai_body("A-1 is 250.", usage=(31, 4))))
    provider = OPENAI.make(server, options={"temperature": 0.2, "max_tokens": 50})
    answer = await provider.complete(request(CONVERSATION, tools=(LOOKUP,)))
    assert answer == ModelResponse(text="A-1 is 250.", usage=TokenUsage(31, 4))
    [got] = server.received
    assert (got.method, got.path) == ("POST", "/v1/chat/completions")
    assert got.headers["authorization"] == f"Bearer {KEY}"
    assert got.body == {
        "model": "test-model",
        "messages": [
            {"role": "system", "content": "You are the order desk."},
            {"role": "user", "content": "Refund A-1 and A-2"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "lookup_order", "arguments": '{"order_id": "A-1"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "lookup_order", "arguments": '{"order_id": "A-2"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": '{"total": 250}'},
            {"role": "tool", "tool_call_id": "call_2", "content": '{"total": 10}'},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "lookup_order",
                    "description": "Look an order up.",
                    "parameters": dict(LOOKUP.parameters),
                },
            }
        ],
        "temperature": 0.2,
        "max_tokens": 50,
    }


async def test_anthropic_maps_system_turns_tool_use_results_and_tools(server) -> None:
    server.reply(
        Reply(json=anthropic_body("A-1 is 250.", usage=(40, 6))), Reply(json=anthropic_body("ok"))
    )
    provider = ANTHROPIC.make(server)
    answer = await provider.complete(request(CONVERSATION, tools=(LOOKUP,)))
    assert answer == ModelResponse(text="A-1 is 250.", usage=TokenUsage(40, 6))
    [got] = server.received
    assert (got.method, got.path) == ("POST", "/v1/messages")
    assert got.headers["x-api-key"] == KEY and got.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in got.headers
    assert got.body == {
        "model": "test-model",
        "max_tokens": 512,
        "system": "You are the order desk.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Refund A-1 and A-2"}]},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "call_1",
                        "name": "lookup_order",
                        "input": {"order_id": "A-1"},
                    },
                    {
                        "type": "tool_use",
                        "id": "call_2",
                        "name": "lookup_order",
                        "input": {"order_id": "A-2"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": '{"total": 250}'},
                    {"type": "tool_result", "tool_use_id": "call_2", "content": '{"total": 10}'},
                ],
            },
        ],
        "tools": [
            {
                "name": "lookup_order",
                "description": "Look an order up.",
                "input_schema": dict(LOOKUP.parameters),
            }
        ],
    }
    await ANTHROPIC.make(server, options={"max_tokens": 64, "temperature": 0}).complete(request())
    assert server.received[1].body["max_tokens"] == 64
    assert server.received[1].body["temperature"] == 0


@WIRES
async def test_tool_calls_are_parsed_with_their_arguments(wire: Wire, server) -> None:
    calls = (("c1", "lookup_order", '{"order_id": "A-1"}'), ("c2", "refund", '{"amount": 5.5}'))
    server.reply(Reply(json=wire.body("Looking.", calls)))
    answer = await wire.make(server).complete(request(tools=(LOOKUP,)))
    assert answer.text == "Looking."
    assert answer.calls == (
        ProposedCall("c1", "lookup_order", {"order_id": "A-1"}),
        ProposedCall("c2", "refund", {"amount": 5.5}),
    )
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == wire.usage


async def test_openai_malformed_arguments_reach_the_model_as_they_were_written(server) -> None:
    calls = (("c1", "lookup_order", '{"order_id": "A-'), ("c2", "ping", ""), ("c3", "x", "[1]"))
    server.reply(Reply(json=openai_body(None, calls)), Reply(json=openai_body("ok")))
    provider = OPENAI.make(server)
    answer = await provider.complete(request())
    assert [dict(c.args) for c in answer.calls] == [
        {"_raw_arguments": '{"order_id": "A-'},
        {},
        {"_raw_arguments": "[1]"},
    ]
    history = (
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": c.id, "name": c.name, "args": dict(c.args)} for c in answer.calls
            ],
        },
    )
    await provider.complete(request(history))
    sent = server.received[1].body["messages"][2]["tool_calls"]
    assert [c["function"]["arguments"] for c in sent] == ['{"order_id": "A-', "{}", "[1]"]


async def test_parse_arguments() -> None:
    assert parse_arguments('{"a": 1}') == {"a": 1}
    assert parse_arguments({"a": 1}) == {"a": 1}
    assert parse_arguments(None) == parse_arguments("  ") == {}
    assert parse_arguments("nope") == {"_raw_arguments": "nope"}
    assert parse_arguments(["x"]) == {"_raw_arguments": '["x"]'}


async def test_usage_is_estimated_when_the_server_reports_none(server) -> None:
    body = openai_body("four score and seven")
    del body["usage"]
    server.reply(Reply(json=body))
    answer = await OPENAI.make(server).complete(request())
    assert answer.usage.input_tokens > 0 and answer.usage.output_tokens == 5


async def test_anthropic_counts_cache_tokens_as_input(server) -> None:
    body = anthropic_body("hi", usage=(10, 3))
    body["usage"].update(cache_creation_input_tokens=100, cache_read_input_tokens=1000)
    server.reply(Reply(json=body))
    answer = await ANTHROPIC.make(server).complete(request())
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (1110, 3)


# -- streaming ----------------------------------------------------------------------------------


@WIRES
@pytest.mark.parametrize(
    "calls", [(), (("c1", "lookup_order", '{"order_id": "A-1", "n": [1, 2]}'),)]
)
async def test_streamed_answer_equals_the_non_streamed_one(wire: Wire, calls, server) -> None:
    pieces = ("The order ", "A-1 ", "costs 250.")
    server.reply(
        Reply(json=wire.body("".join(pieces), calls)), Reply(sse=wire.stream(pieces, calls))
    )
    provider = wire.make(server)
    plain = await provider.complete(request(tools=(LOOKUP,)))
    deltas: list[str] = []
    streamed = await provider.complete(request(tools=(LOOKUP,), on_text=deltas.append))
    assert streamed == plain
    assert deltas == list(pieces)
    assert plain.text == "The order A-1 costs 250."
    assert (streamed.usage.input_tokens, streamed.usage.output_tokens) == wire.usage
    first, second = (r.body for r in server.received)
    assert "stream" not in first and second["stream"] is True
    if wire is OPENAI:
        assert second["stream_options"] == {"include_usage": True}
    assert {k: v for k, v in second.items() if not k.startswith("stream")} == first


@WIRES
async def test_text_deltas_arrive_before_the_stream_ends(wire: Wire, server) -> None:
    first_delta = asyncio.Event()
    chunks = wire.stream(("one ", "two"))
    hold_after = 4 if wire is ANTHROPIC else 2  # the chunks up to the first text delta
    server.reply(Reply(sse=chunks, hold=first_delta, hold_after=hold_after))
    seen: list[str] = []

    def on_text(delta: str) -> None:
        seen.append(delta)
        first_delta.set()

    answer = await wire.make(server).complete(request(on_text=on_text))
    assert seen == ["one ", "two"] and answer.text == "one two"


@WIRES
async def test_a_stream_cut_short_is_retried_garbage_in_a_stream_is_not(wire: Wire, server) -> None:
    full = wire.stream(("a", "b"))
    server.reply(Reply(sse=full[:3]), Reply(sse=[full[0], "data: {not json\n\n"]))
    provider = wire.make(server)
    early = await fails(provider, request(on_text=lambda _: None))
    assert early.kind == "server" and early.retryable and "stream ended" in str(early)
    garbage = await fails(provider, request(on_text=lambda _: None))
    assert garbage.kind == "malformed" and not garbage.retryable
    assert "not JSON" in str(garbage) and "{not json" in str(garbage)


@WIRES
async def test_an_error_inside_a_stream_is_mapped(wire: Wire, server) -> None:
    overloaded = {"type": "overloaded_error", "message": "Overloaded"}
    limited = {"type": "rate_limit_error", "message": "slow down"}
    server.reply(Reply(sse=wire.error_event(overloaded)), Reply(sse=wire.error_event(limited)))
    provider = wire.make(server)
    first = await fails(provider, request(on_text=lambda _: None))
    assert first.kind == "server" and first.retryable and "Overloaded" in str(first)
    second = await fails(provider, request(on_text=lambda _: None))
    assert second.kind == "rate_limit"


async def test_sse_parser_handles_comments_multiline_data_and_a_missing_last_blank_line() -> None:
    lines = [
        ": keep-alive",
        "event: a",
        "data: one",
        "data: two",
        "",
        "id: 7",
        "retry: 5",
        "data:x",
    ]

    async def source() -> AsyncIterator[str]:
        for line in lines:
            yield line

    events = [event async for event in iter_sse(source())]
    assert events == [("a", "one\ntwo"), ("message", "x")]


# -- failures ------------------------------------------------------------------------------------


@WIRES
async def test_429_is_a_rate_limit_with_the_servers_retry_after(wire: Wire, server) -> None:
    body = {"error": {"type": "rate_limit_error", "message": "Too many requests"}}
    server.reply(Reply(429, json=body, headers={"Retry-After": "7"}))
    error = await fails(wire.make(server))
    assert error.kind == "rate_limit" and error.retryable and error.retry_after == 7.0
    assert "HTTP 429" in str(error) and "Too many requests" in str(error)
    assert f"{wire.name} model 'default' (test-model at {server.url}" in str(error)


@WIRES
@pytest.mark.parametrize("status", [500, 502, 503, 529])
async def test_5xx_is_a_retryable_server_error(wire: Wire, status: int, server) -> None:
    server.reply(Reply(status, raw=b"<html>Bad Gateway</html>"))
    error = await fails(wire.make(server))
    assert error.kind == "server" and error.retryable and error.retry_after is None
    assert f"HTTP {status}" in str(error) and "Bad Gateway" in str(error)


@WIRES
async def test_a_slow_server_times_out(wire: Wire, server) -> None:
    server.reply(Reply(json=wire.body("late"), delay=1.0))
    started = time.perf_counter()
    error = await fails(wire.make(server, timeout=0.1))
    assert time.perf_counter() - started < 0.6
    assert error.kind == "timeout" and error.retryable


@WIRES
async def test_an_unreachable_server_is_a_retryable_timeout(wire: Wire) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = wire.provider(
        model="m",
        base_url=f"http://127.0.0.1:{port}",
        api_key_env=KEY_ENV,
        timeout=30.0,  # refused at once; a loaded machine must not turn it into a read timeout
        options={"max_tokens": 16},
    )
    error = await fails(provider)
    assert error.kind == "timeout" and "could not reach the server" in str(error)


@WIRES
async def test_malformed_bodies_are_not_retried_and_name_what_is_wrong(wire: Wire, server) -> None:
    server.reply(Reply(raw=b"<html>oops</html>"), Reply(json={"id": "x"}), Reply(json=[1, 2]))
    provider = wire.make(server)
    not_json = await fails(provider)
    assert not_json.kind == "malformed" and not not_json.retryable
    assert "not JSON" in str(not_json) and "oops" in str(not_json)
    missing = await fails(provider)
    what = "`choices`" if wire is OPENAI else "`content`"
    assert missing.kind == "malformed" and what in str(missing)
    wrong = await fails(provider)
    assert wrong.kind == "malformed" and "expected a JSON object, got list" in str(wrong)


@WIRES
@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_key_is_an_auth_error_naming_the_variable(wire, status, server) -> None:
    server.reply(
        Reply(status, json={"error": {"type": "authentication_error", "message": "bad key"}})
    )
    error = await fails(wire.make(server))
    assert error.kind == "auth" and not error.retryable
    assert f"${KEY_ENV}" in str(error) and f"HTTP {status}" in str(error)


@WIRES
async def test_a_missing_key_is_an_error_at_the_first_call_naming_the_variable(
    wire: Wire, server, monkeypatch
) -> None:
    provider = wire.make(server)  # building needs no key: an offline overlay may replace it
    monkeypatch.setenv(KEY_ENV, "  ")
    error = await fails(provider)
    assert error.kind == "auth" and not error.retryable and KEY_ENV in str(error)
    assert server.received == []
    monkeypatch.delenv(KEY_ENV)
    default = wire.provider(model="m", base_url=server.url, options={"max_tokens": 16})
    assert default.api_key_env in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
    monkeypatch.delenv(default.api_key_env, raising=False)
    assert default.api_key_env in str(await fails(default))


@WIRES
async def test_content_filter_is_a_refusal_other_400s_are_bad_requests(wire, server) -> None:
    server.reply(
        Reply(400, json={"error": {"code": "content_filter", "message": "filtered"}}),
        Reply(400, json={"error": {"type": "invalid_request_error", "message": "bad max_tokens"}}),
    )
    provider = wire.make(server)
    refusal = await fails(provider)
    assert refusal.kind == "refusal" and not refusal.retryable
    bad = await fails(provider)
    assert bad.kind == "bad_request" and not bad.retryable and "bad max_tokens" in str(bad)


@WIRES
async def test_redirects_and_not_found_point_at_base_url(wire: Wire, server) -> None:
    moved = Reply(308, raw=b"", headers={"Location": "https://user:pw@api.example/v1?k=1"})
    server.reply(moved, Reply(404, json={"error": {"message": "no such model"}}))
    provider = wire.make(server)
    redirect = await fails(provider)
    assert redirect.kind == "bad_request" and "'https://api.example/v1'; set base_url" in str(
        redirect
    )
    missing = await fails(provider)
    assert missing.kind == "bad_request" and "check base_url" in str(missing)
    assert "no such model" in str(missing)


async def test_refusals_in_a_successful_answer(server) -> None:
    refused = openai_body(None)
    refused["choices"][0]["message"]["refusal"] = "I can't help with that."
    filtered = openai_body("partial")
    filtered["choices"][0]["finish_reason"] = "content_filter"
    server.reply(
        Reply(json=refused),
        Reply(json=filtered),
        Reply(json=anthropic_body("", stop="refusal")),
        Reply(sse=anthropic_stream(("I won't",), stop="refusal")),
    )
    openai, anthropic = OPENAI.make(server), ANTHROPIC.make(server)
    assert "I can't help" in str(await fails(openai))
    assert (await fails(openai)).kind == "refusal"
    assert (await fails(anthropic)).kind == "refusal"
    assert (await fails(anthropic, request(on_text=lambda _: None))).kind == "refusal"


@WIRES
async def test_the_key_never_appears_in_errors_or_logs(wire: Wire, server, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    echo = b'{"error": {"message": "Incorrect API key provided: $AUTH"}}'
    server.reply(
        Reply(401, raw=echo, echo=True),
        Reply(500, raw=b"upstream saw $AUTH", echo=True),
        Reply(400, raw=echo, echo=True),
        Reply(200, raw=b"not json, but $AUTH", echo=True),
        Reply(sse=wire.error_event({"type": "api_error", "message": KEY})),
        Reply(json=wire.body("late"), delay=1.0),
    )
    provider = wire.make(server)
    errors = [await fails(provider) for _ in range(4)]
    errors.append(await fails(provider, request(on_text=lambda _: None)))
    errors.append(await fails(wire.make(server, timeout=0.1)))
    assert [e.kind for e in errors] == [
        "auth",
        "server",
        "bad_request",
        "malformed",
        "server",
        "timeout",
    ]
    assert "[REDACTED]" in str(errors[0])
    for error in errors:
        assert KEY not in str(error) and KEY not in repr(error) and KEY not in repr(error.args)
        assert error.__context__ is None and error.__cause__ is None
    assert caplog.records, "httpx logs its requests at DEBUG"
    for record in caplog.records:
        assert KEY not in record.getMessage()


# -- retries --------------------------------------------------------------------------------------


async def test_backoff_grows_with_jitter_up_to_the_cap() -> None:
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (6, 16.0), (7, 20.0), (1000, 20.0)]:
        delays = {backoff_delay(attempt) for _ in range(50)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(delays) > 1
    assert backoff_delay(1000) <= BACKOFF_CAP


async def test_retry_delay_honours_retry_after(server) -> None:
    provider = OPENAI.make(server)
    assert 0.25 <= provider.retry_delay(1) <= 0.5
    assert provider.retry_delay(1, ModelError("rate_limit", "x", retry_after=3.0)) == 3.0
    assert provider.retry_delay(2, ModelError("rate_limit", "x", retry_after=3600)) == 60.0
    assert 0.5 <= provider.retry_delay(2, ModelError("server", "x")) <= 1.0
    server.reply(
        Reply(429, json={}, headers={"retry-after-ms": "1500"}), Reply(json=openai_body("ok"))
    )
    error = await fails(provider)
    assert error.retry_after == 1.5
    assert provider.retry_delay(1) == 1.5  # a caller that passes no error gets the last one's
    await provider.complete(request())
    assert 0.25 <= provider.retry_delay(1) <= 0.5


async def test_parse_retry_after() -> None:
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after": "0.5"}) == 0.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 28 <= (parse_retry_after({"retry-after": later}) or 0) <= 30
    past = format_datetime(datetime.now(UTC) - timedelta(seconds=30), usegmt=True)
    assert parse_retry_after({"retry-after": past}) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after": "nan"}) is None
    assert parse_retry_after({}) is None


# -- through the spec and the run loop ---------------------------------------------------------


def live_app(app, server: ModelServer, models: str) -> None:
    body = f"""
models:
{models}
tools:
  lookup_order: {{call: "{app.module}:lookup_order", replay: safe}}
tasks:
  orders:
    prompt: You are the order desk.
    tools: [lookup_order]
"""
    app.write(body.replace("$URL", server.url), base=False)


async def test_a_run_against_the_server_maps_tool_results_and_prices_usage(app, server) -> None:
    live_app(
        app,
        server,
        f"""
  default:
    use: openai
    model: gpt-test
    base_url: $URL/v1
    api_key_env: {KEY_ENV}
    price: {{input_per_mtok: 2.0, output_per_mtok: 8.0}}
""",
    )
    server.reply(
        Reply(
            json=openai_body(None, (("call_a", "lookup_order", '{"order_id": "A-1"}'),), (100, 20))
        ),
        Reply(json=openai_body("A-1 costs 250.", usage=(150, 10))),
    )
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "What does A-1 cost?", principal="ann")
    assert result.status is ph.RunStatus.COMPLETED and result.output == "A-1 costs 250."
    assert (result.usage.tokens_in, result.usage.tokens_out) == (250, 30)
    assert result.usage.usd == pytest.approx((250 * 2.0 + 30 * 8.0) / 1_000_000)
    assert app.tools.CALLS == [("lookup_order", "A-1")]
    first, second = (r.body for r in server.received)
    assert first["messages"] == [
        {"role": "system", "content": "You are the order desk."},
        {"role": "user", "content": "What does A-1 cost?"},
    ]
    assert first["tools"][0]["function"]["name"] == "lookup_order"
    assert first["tools"][0]["function"]["parameters"]["required"] == ["order_id"]
    assistant, tool = second["messages"][2:]
    assert assistant["tool_calls"] == [
        {
            "id": "call_a",
            "type": "function",
            "function": {"name": "lookup_order", "arguments": '{"order_id": "A-1"}'},
        }
    ]
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_a"
    assert json.loads(tool["content"])["total"] == 250.0


@pytest.fixture
def delays(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits the live providers asked the run loop for, in order."""
    asked: list[float] = []
    original = HttpProvider.retry_delay

    def spy(self: HttpProvider, attempt: int, error: ModelError | None = None) -> float:
        asked.append(original(self, attempt, error))
        return asked[-1]

    monkeypatch.setattr(HttpProvider, "retry_delay", spy)
    return asked


async def test_a_run_retries_after_429_honouring_retry_after(app, server, delays) -> None:
    live_app(
        app,
        server,
        f"""
  default:
    use: anthropic
    model: claude-test
    base_url: $URL
    api_key_env: {KEY_ENV}
    retries: 2
    options: {{max_tokens: 512}}
""",
    )
    limited = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    server.reply(
        Reply(429, json=limited, headers={"Retry-After": "0"}),
        Reply(json=anthropic_body("Done.", usage=(9, 2))),
    )
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "hi", principal="ann")
    assert delays == [0.0]  # the server's Retry-After, not the 0.25-0.5 s of a first backoff
    assert result.status is ph.RunStatus.COMPLETED and result.output == "Done."
    assert len(server.received) == 2
    assert [d.detail.get("error") for d in result.trace.of_kind("model")] == ["rate_limit", None]


async def test_a_run_falls_back_to_the_next_model_when_retries_run_out(app, server, delays) -> None:
    live_app(
        app,
        server,
        f"""
  default:
    use: openai
    model: gpt-test
    base_url: $URL/v1
    api_key_env: {KEY_ENV}
    retries: 1
    fallback: [backup]
    price: {{input_per_mtok: 100.0, output_per_mtok: 100.0}}
  backup:
    use: anthropic
    model: claude-test
    base_url: $URL
    api_key_env: {KEY_ENV}
    retries: 0
    options: {{max_tokens: 512}}
    price: {{input_per_mtok: 1.0, output_per_mtok: 5.0}}
""",
    )
    unavailable = Reply(503, raw=b"busy", headers={"Retry-After": "0"})
    server.reply(
        unavailable, unavailable, Reply(json=anthropic_body("From the backup.", usage=(30, 4)))
    )
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "hi", principal="ann")
    assert result.status is ph.RunStatus.COMPLETED and result.output == "From the backup."
    assert [r.path for r in server.received] == [
        "/v1/chat/completions",
        "/v1/chat/completions",
        "/v1/messages",
    ]
    assert server.received[2].body["system"] == "You are the order desk."
    assert result.usage.usd == pytest.approx((30 * 1.0 + 4 * 5.0) / 1_000_000)
    keys = [(d.key, d.detail.get("error")) for d in result.trace.of_kind("model")]
    assert keys == [("default", "server"), ("default", "server"), ("backup", None)]
    # asked after each retryable failure, the last too: its wait is recorded for a replay
    assert delays == [0.0, 0.0]


async def test_live_calls_are_blocked_naming_the_provider(app, server) -> None:
    live_app(
        app,
        server,
        f"""
  default:
    use: anthropic
    model: claude-test
    base_url: $URL
    api_key_env: {KEY_ENV}
    options: {{max_tokens: 512}}
""",
    )
    async with ph.load(app.spec) as harness:
        with ph.allow_live_models(False), pytest.raises(LiveModelBlocked, match="'anthropic'"):
            await harness.run("orders", "hi", principal="ann")
    assert server.received == []


async def test_a_run_without_a_key_fails_naming_the_variable(app, server, monkeypatch) -> None:
    live_app(
        app,
        server,
        f"""
  default: {{use: openai, model: gpt-test, base_url: $URL/v1, api_key_env: {KEY_ENV}}}
""",
    )
    monkeypatch.delenv(KEY_ENV)
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "hi", principal="ann")
    assert result.failed and result.error["type"] == "ModelError"
    assert KEY_ENV in result.error["message"] and server.received == []


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("base_url: ftp://example.test", r"base_url must be an http\(s\) URL"),
        (f"api_key_env: {KEY}", "not the key itself"),
        ("options: {messages: []}", "options cannot set messages"),
    ],
    ids=["base_url", "api_key_env", "options"],
)
async def test_bad_settings_are_spec_errors_at_load(app, server, setting, expected) -> None:
    live_app(app, server, f"  default: {{use: openai, model: gpt-test, {setting}}}\n")
    with pytest.raises(SpecError, match=expected) as info:
        ph.load(app.spec)
    key = setting.split(":")[0]
    assert f"harness.yaml:6 models.default.{key}:" in str(info.value)
    assert KEY not in str(info.value)


async def test_a_live_model_needs_a_model_id(app, server) -> None:
    live_app(app, server, "  default: {use: anthropic}\n")
    with pytest.raises(SpecError, match="needs `model:`"):
        ph.load(app.spec)


async def test_httpx_is_imported_only_when_a_live_provider_is_built(tmp_path) -> None:
    spec = tmp_path / "harness.yaml"
    spec.write_text(
        "version: 1\nname: t\nmodels:\n  default: {use: scripted, script: [{say: hi}]}\n"
        "tasks:\n  t: {prompt: p}\n"
    )
    code = (
        "import sys, asyncio, pytest_harness as ph\n"
        "async def main():\n"
        f"    async with ph.load({str(spec)!r}) as h:\n"
        "        await h.run('t', 'x', principal='p')\n"
        "asyncio.run(main())\n"
        "print('httpx' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_httpx_is_imported_by_a_live_providers_first_request_not_at_load(tmp_path) -> None:
    """Loading a spec with a live model builds (and checks) its provider without httpx (#13)."""
    spec = tmp_path / "harness.yaml"
    spec.write_text(
        "version: 1\nname: t\nmodels:\n"
        "  default: {use: openai, model: gpt-test, api_key_env: HARNESS_TEST_NO_SUCH_KEY}\n"
        "tasks:\n  t: {prompt: p}\n"
    )
    code = (
        "import sys, asyncio, pytest_harness as ph\n"
        "from pytest_harness.errors import ModelError\n"
        "from pytest_harness.models.base import ModelRequest\n"
        f"harness = ph.load({str(spec)!r})\n"
        "provider = harness.plans.provider('default')\n"
        "print(type(provider).__name__, 'httpx' in sys.modules)\n"
        "request = ModelRequest(task='t', model='default', system='p', messages=(), tools=(),\n"
        "                       run_id='r', turn=0, input='x')\n"
        "try:\n"
        "    asyncio.run(provider.complete(request))\n"
        "except ModelError as exc:\n"
        "    print(exc.kind, 'httpx' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_TEST_NO_SUCH_KEY"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.split("\n")[:2] == ["OpenAIProvider False", "auth True"]


# -- the first event ------------------------------------------------------------------------------


@WIRES
async def test_the_first_byte_of_a_plain_answer_is_its_first_event(wire: Wire, server) -> None:
    server.reply(Reply(json=wire.body("late"), delay=0.3))
    started = time.perf_counter()
    seen: list[float] = []
    answer = await wire.make(server).complete(
        request(on_first_event=lambda: seen.append(time.perf_counter() - started))
    )
    assert answer.text == "late"
    assert len(seen) == 1 and seen[0] >= 0.3


@WIRES
async def test_the_first_event_of_a_stream_is_its_first_event_not_its_headers(
    wire: Wire, server
) -> None:
    go = asyncio.Event()
    server.reply(Reply(sse=wire.stream(("one ", "two")), hold=go, hold_after=0))
    order: list[str] = []
    call = asyncio.ensure_future(
        wire.make(server).complete(
            request(
                on_text=lambda d: order.append(f"text {d}"),
                on_first_event=lambda: order.append("first"),
            )
        )
    )
    for _ in range(50):  # the headers went out at once; the first event is held
        await asyncio.sleep(0.01)
    assert order == []
    go.set()
    answer = await call
    assert answer.text == "one two"
    assert order == ["first", "text one ", "text two"]


@WIRES
async def test_an_error_status_is_a_first_event(wire: Wire, server) -> None:
    server.reply(Reply(429, json={"error": {"message": "slow down"}}))
    seen: list[bool] = []
    error = await fails(wire.make(server), request(on_first_event=lambda: seen.append(True)))
    assert error.kind == "rate_limit" and seen == [True]


async def test_a_run_holds_a_silent_server_to_its_first_event_timeout(app, server) -> None:
    live_app(
        app,
        server,
        f"""
  default:
    use: openai
    model: gpt-test
    base_url: $URL/v1
    api_key_env: {KEY_ENV}
    retries: 1
    timeout: 10s
    first_event_timeout: 0.2s
""",
    )
    server.reply(Reply(json=openai_body("too late"), delay=3.0), Reply(json=openai_body("Hi.")))
    async with ph.load(app.spec) as harness:
        started = time.perf_counter()
        result = await harness.run("orders", "hi", principal="ann")
        took = time.perf_counter() - started
        stored = await harness.store.get_run(result.run_id)
    assert result.status is ph.RunStatus.COMPLETED and result.output == "Hi."
    assert took < 2.0  # not the 3 s the first reply took, nor the 10 s timeout
    assert [d.detail.get("error") for d in result.trace.of_kind("model")] == ["timeout", None]
    assert len(server.received) == 2
    assert stored.state["clocks"]["default"]["first_event_last"] < 0.2
