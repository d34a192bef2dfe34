"""The live providers against answers shaped as the providers' API references document them.

Each case runs streamed and not streamed, from the loopback server: Anthropic's signed
`thinking` and `redacted_thinking` blocks, errors reported inside a 200 (OpenRouter's numeric
`code`, `metadata.raw`), truncated answers (`finish_reason: length`, `stop_reason: max_tokens`),
reasoning tokens billed outside `completion_tokens`, text blocks as paragraphs, and answers that
break their format.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

import pytest_harness as ph
from pytest_harness.errors import SpecError
from pytest_harness.models.anthropic import AnthropicProvider
from pytest_harness.models.base import ModelResponse
from pytest_harness.models.http import HttpProvider
from pytest_harness.runtime.truncation import CONTINUE_PROMPT
from tests.model_server import Reply

from .conftest import ANTHROPIC, KEY, KEY_ENV, OPENAI, ModelServer, fails, request

pytestmark = [pytest.mark.asyncio, pytest.mark.harness(allow_live=True)]

STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])


def on_text(stream: bool, seen: list[str] | None = None) -> Any:
    """The request's `on_text`: set for a streamed request, None for a JSON one."""
    if not stream:
        return None
    return (seen if seen is not None else []).append


# -- Anthropic answers, as the Messages API reference writes them ---------------------------------

SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYdsRsbtYbC5S2M/f8s+CIdW8WhQ=="
THINKING = {
    "type": "thinking",
    "thinking": "The customer asks about order A-1. I should look it up before answering.",
    "signature": SIGNATURE,
}
REDACTED = {
    "type": "redacted_thinking",
    "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4",
}
TOOL_USE = {
    "type": "tool_use",
    "id": "toolu_01A",
    "name": "lookup_order",
    "input": {"order_id": "A-1"},
}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def message(content: list[dict[str, Any]], stop: str, usage=(412, 96)) -> dict[str, Any]:
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def message_events(content: list[dict[str, Any]], stop: str, usage=(412, 96)) -> list[str]:
    """The SSE events of the same message: each block started, its deltas, stopped."""
    start = message([], None, (usage[0], 1))  # type: ignore[arg-type]
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for i, block in enumerate(content):
        kind = block["type"]
        empty = {
            "text": {"type": "text", "text": ""},
            "thinking": {"type": "thinking", "thinking": "", "signature": ""},
            "tool_use": {**block, "input": {}},
        }.get(kind, block)
        events.append({"type": "content_block_start", "index": i, "content_block": empty})
        if kind == "text":
            half = len(block["text"]) // 2
            for piece in (block["text"][:half], block["text"][half:]):
                delta = {"type": "text_delta", "text": piece}
                events.append({"type": "content_block_delta", "index": i, "delta": delta})
        elif kind == "thinking":
            for piece in block["thinking"].split(". "):
                delta = {"type": "thinking_delta", "thinking": piece + ". "}
                events.append({"type": "content_block_delta", "index": i, "delta": delta})
            events[-1]["delta"]["thinking"] = events[-1]["delta"]["thinking"][:-2]
            delta = {"type": "signature_delta", "signature": block["signature"]}
            events.append({"type": "content_block_delta", "index": i, "delta": delta})
        elif kind == "tool_use":
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            events.append({"type": "content_block_delta", "index": i, "delta": delta})
        events.append({"type": "content_block_stop", "index": i})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": usage[1]},
        }
    )
    events.append({"type": "message_stop"})
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events]


def anthropic(stream: bool, content: list[dict[str, Any]], stop: str, usage=(412, 96)) -> Reply:
    if stream:
        return Reply(sse=message_events(content, stop, usage))
    return Reply(json=message(content, stop, usage))


# -- OpenAI-compatible answers (OpenAI, OpenRouter, Gemini's compatible endpoint) ------------------


def completion(
    content: str | None, finish: str = "stop", usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "id": "gen-1733500000-abc",
        "object": "chat.completion",
        "created": 1733500000,
        "model": "openai/gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "finish_reason": finish,
            }
        ],
        "usage": usage or {"prompt_tokens": 43, "completion_tokens": 10, "total_tokens": 53},
    }


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "gen-1733500000-abc",
        "object": "chat.completion.chunk",
        "created": 1733500000,
        "model": "openai/gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def completion_chunks(
    content: str, finish: str = "stop", usage: dict[str, Any] | None = None, done: bool = True
) -> list[str]:
    half = len(content) // 2
    chunks = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": content[:half]}),
        chunk({"content": content[half:]}),
        chunk({}, finish),
        {
            "id": "gen-1733500000-abc",
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": usage or {"prompt_tokens": 43, "completion_tokens": 10, "total_tokens": 53},
        },
    ]
    lines = [f"data: {json.dumps(c)}\n\n" for c in chunks]
    return [*lines, "data: [DONE]\n\n"] if done else lines


def openai(stream: bool, content: str, finish: str = "stop", usage=None) -> Reply:
    if stream:
        return Reply(sse=completion_chunks(content, finish, usage))
    return Reply(json=completion(content, finish, usage))


TOKEN_LIMIT = {
    "code": 400,
    "message": "Token limit reached",
    "metadata": {"provider_name": "Azure"},
}
USAGE_43_10 = {"prompt_tokens": 43, "completion_tokens": 10, "total_tokens": 53}


def reported(stream: bool, error: dict[str, Any], usage=USAGE_43_10) -> Reply:
    """An error inside a 200, as OpenRouter sends one: in a chunk, or in the body."""
    if stream:
        failing = chunk({"content": ""}, "error", error=error, usage=usage, provider="Azure")
        lines = [chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}), failing]
        return Reply(sse=[f"data: {json.dumps(c)}\n\n" for c in lines] + ["data: [DONE]\n\n"])
    body = completion("", "error", usage)
    body["error"] = error
    return Reply(json=body)


def live_spec(app, server: ModelServer, use: str, settings: str = "") -> None:
    """A spec whose `default` model is live against the loopback server."""
    base = server.url + ("/v1" if use == "openai" else "")
    if use == "anthropic" and "options" not in settings:
        settings += "\n    options: {max_tokens: 1024}"
    app.write(
        f"""
models:
  default:
    use: {use}
    model: test-model
    base_url: {base}
    api_key_env: {KEY_ENV}
    retries: 2
    price: {{input_per_mtok: 1000000.0, output_per_mtok: 2000000.0}}{settings}
tools:
  lookup_order: {{call: "{app.module}:lookup_order", replay: safe}}
state: {{record: true}}
tasks:
  orders:
    prompt: You are the order desk.
    tools: [lookup_order]
""",
        base=False,
    )


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(HttpProvider, "retry_delay", lambda self, attempt, error=None: 0.0)


@pytest.fixture
def streamed(monkeypatch: pytest.MonkeyPatch):
    """Make every run's live model stream (or not), as a followed run would."""
    import dataclasses

    original = HttpProvider.complete

    def use(stream: bool) -> None:
        async def complete(self: HttpProvider, req):
            return await original(self, dataclasses.replace(req, on_text=on_text(stream)))

        monkeypatch.setattr(HttpProvider, "complete", complete)

    return use


# -- 1. thinking blocks go back unchanged ----------------------------------------------------------


@STREAMS
async def test_thinking_blocks_are_kept_with_their_signature(stream: bool, server) -> None:
    content = [THINKING, text("Let me look that order up."), TOOL_USE]
    server.reply(anthropic(stream, content, "tool_use"))
    answer = await ANTHROPIC.make(server).complete(request(on_text=on_text(stream)))
    assert answer.thinking == (THINKING,)
    assert answer.text == "Let me look that order up."
    assert [(c.id, c.name, dict(c.args)) for c in answer.calls] == [
        ("toolu_01A", "lookup_order", {"order_id": "A-1"})
    ]


@STREAMS
@pytest.mark.parametrize("blocks", [[THINKING], [REDACTED], [THINKING, REDACTED]])
async def test_a_tool_turn_sends_its_thinking_back_first_and_unchanged(
    stream: bool, blocks, app, server, streamed
) -> None:
    live_spec(
        app,
        server,
        "anthropic",
        "\n    options: {max_tokens: 4096, thinking: {type: enabled, budget_tokens: 2048}}",
    )
    streamed(stream)
    server.reply(
        anthropic(stream, [*blocks, text("Let me look."), TOOL_USE], "tool_use"),
        anthropic(stream, [text("A-1 costs 250.")], "end_turn"),
    )
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "What does A-1 cost?", principal="ann")
    assert result.status is ph.RunStatus.COMPLETED and result.output == "A-1 costs 250."
    first, second = (r.body for r in server.received)
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert first["max_tokens"] == 4096
    assistant = second["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == [*blocks, text("Let me look."), TOOL_USE]
    assert second["messages"][2]["content"][0]["type"] == "tool_result"


async def test_a_recording_keeps_thinking_and_its_replay_sends_it_back(
    app, server, tmp_path
) -> None:
    live_spec(app, server, "anthropic")
    server.reply(
        anthropic(False, [THINKING, text("Let me look."), TOOL_USE], "tool_use"),
        anthropic(False, [text("A-1 costs 250.")], "end_turn"),
    )
    golden = tmp_path / "golden.yaml"
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "What does A-1 cost?", principal="ann")
        await harness.export(result.run_id, golden)
        same = await harness.replay(golden)
    assert same.same and same.model_requests_changed == (0, 2)
    data = yaml.safe_load(golden.read_text())
    assert data["model_turns"][0]["answer"]["thinking"] == [THINKING]
    assert "thinking" not in data["model_turns"][1]["answer"]
    # A changed thinking text is sent back as recorded, so the request changes; the decisions
    # (what the model said and called) do not.
    data["model_turns"][0]["answer"]["thinking"][0]["thinking"] = "Another line of thought."
    golden.write_text(yaml.safe_dump(data, sort_keys=False))
    async with ph.load(app.spec) as harness:
        report = await harness.replay(golden)
    assert report.same and not report.decisions
    assert report.model_requests_changed == (1, 2)
    assert len(server.received) == 2  # the replays called nothing


# -- 2. an error inside a 200 ----------------------------------------------------------------------


@STREAMS
@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (400, "bad_request"),
        ("400", "bad_request"),
        (402, "bad_request"),
        (401, "auth"),
        (408, "timeout"),
        (429, "rate_limit"),
        (502, "server"),
        (503, "server"),
    ],
)
async def test_a_numeric_code_in_a_200_maps_like_its_http_status(
    stream: bool, code, kind: str, server
) -> None:
    server.reply(reported(stream, {**TOKEN_LIMIT, "code": code}))
    error = await fails(OPENAI.make(server), request(on_text=on_text(stream)))
    assert error.kind == kind and error.retryable == (kind in ("rate_limit", "server", "timeout"))
    assert "Token limit reached" in str(error) and f"error {int(code)}" in str(error)
    assert error.usage == (43, 10)


@STREAMS
async def test_a_400_in_a_200_is_not_retried_and_its_usage_is_counted(
    stream: bool, app, server, streamed
) -> None:
    live_spec(app, server, "openai")
    streamed(stream)
    server.reply(*[reported(stream, TOKEN_LIMIT)] * 3)
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "hi", principal="ann")
    assert len(server.received) == 1  # not retried: the same request would fail the same way
    assert result.failed and "Token limit reached" in result.error["message"]
    assert (result.usage.tokens_in, result.usage.tokens_out) == (43, 10)
    assert result.usage.usd == pytest.approx(43 * 1.0 + 10 * 2.0)
    assert not result.usage.incomplete  # what it cost is known
    assert [d.detail for d in result.trace.of_kind("model")] == [{"error": "bad_request"}]


@STREAMS
async def test_a_5xx_in_a_200_is_retried_and_each_attempt_is_counted(
    stream: bool, app, server, streamed
) -> None:
    live_spec(app, server, "openai")
    streamed(stream)
    busy = {"code": 502, "message": "Upstream overloaded"}
    server.reply(reported(stream, busy), openai(stream, "Hello."))
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "hi", principal="ann")
    assert result.status is ph.RunStatus.COMPLETED and result.output == "Hello."
    assert len(server.received) == 2
    assert (result.usage.tokens_in, result.usage.tokens_out) == (86, 20)


# -- 3. truncation --------------------------------------------------------------------------------


@STREAMS
async def test_a_cut_answer_is_marked_incomplete(stream: bool, server) -> None:
    cut = "The refund policy says that"
    server.reply(
        openai(stream, cut, "length"),
        anthropic(stream, [text(cut)], "max_tokens"),
        anthropic(stream, [text(cut)], "model_context_window_exceeded"),
        openai(stream, "Whole.", "stop"),
    )
    req = request(on_text=on_text(stream))
    assert (await OPENAI.make(server).complete(req)).incomplete == "max_tokens"
    claude = ANTHROPIC.make(server)
    assert (await claude.complete(req)).incomplete == "max_tokens"
    assert (await claude.complete(req)).incomplete == "context_window"
    assert (await OPENAI.make(server).complete(req)).incomplete is None


@STREAMS
@pytest.mark.parametrize("use", ["openai", "anthropic"])
async def test_a_cut_answer_fails_the_run_by_default(stream, use, app, server, streamed) -> None:
    live_spec(app, server, use)
    streamed(stream)
    cut = "The refund policy says that"
    if use == "openai":
        server.reply(openai(stream, cut, "length"))
    else:
        server.reply(anthropic(stream, [text(cut)], "max_tokens", usage=(412, 1024)))
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "What is the refund policy?", principal="ann")
    assert result.failed and result.error["type"] == "ModelTruncated"
    message = result.error["message"]
    assert "model 'default' stopped at its output token limit" in message
    assert "options.max_tokens" in message and "on_truncation" in message
    [decision] = result.trace.of_kind("model")
    assert decision.detail["incomplete"] == "max_tokens" and decision.detail["text"] == cut
    assert result.usage.truncated == 1 and result.usage.tokens_out in (10, 1024)
    assert len(server.received) == 1


@STREAMS
async def test_accept_uses_the_cut_answer_and_says_so(stream, app, server, streamed) -> None:
    live_spec(app, server, "openai", "\n    on_truncation: accept")
    streamed(stream)
    server.reply(openai(stream, "The refund policy says that", "length"))
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "What is the refund policy?", principal="ann")
    assert (
        result.status is ph.RunStatus.COMPLETED and result.output == "The refund policy says that"
    )
    assert result.usage.truncated == 1 and result.usage.to_dict()["truncated"] == 1
    assert result.trace.of_kind("model")[0].detail["incomplete"] == "max_tokens"


@STREAMS
@pytest.mark.parametrize("use", ["openai", "anthropic"])
async def test_continue_asks_for_the_rest_and_joins_the_pieces(
    stream, use, app, server, streamed
) -> None:
    live_spec(app, server, use, "\n    on_truncation: continue")
    streamed(stream)
    if use == "openai":
        server.reply(
            openai(stream, "Refunds are accepted within 30 ", "length"),
            openai(stream, "days of delivery.", "stop"),
        )
    else:
        server.reply(
            anthropic(stream, [text("Refunds are accepted within 30 ")], "max_tokens"),
            anthropic(stream, [text("days of delivery.")], "end_turn"),
        )
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "What is the refund policy?", principal="ann")
    assert result.status is ph.RunStatus.COMPLETED
    assert result.output == "Refunds are accepted within 30 days of delivery."
    assert result.usage.truncated == 1 and result.usage.steps == 2
    marks = [d.detail.get("incomplete") for d in result.trace.of_kind("model")]
    assert marks == ["max_tokens", None]
    second = server.received[1].body["messages"]
    assistant, prompt = second[-2:]
    assert assistant["role"] == "assistant" and prompt == (
        {"role": "user", "content": CONTINUE_PROMPT}
        if use == "openai"
        else {"role": "user", "content": [text(CONTINUE_PROMPT)]}
    )


async def test_continue_gives_up_after_the_most_continuations(app, server, monkeypatch) -> None:
    monkeypatch.setattr("pytest_harness.runtime.engine.MAX_CONTINUATIONS", 2)
    live_spec(app, server, "openai", "\n    on_truncation: continue")
    server.reply(*[openai(False, "and so on, ", "length")] * 3)
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Count.", principal="ann")
    assert result.failed and result.error["type"] == "ModelTruncated"
    assert "after 2 continuations" in result.error["message"]
    assert result.usage.truncated == 3 and len(server.received) == 3


async def test_continue_cannot_help_a_full_context_window(app, server) -> None:
    live_spec(app, server, "anthropic", "\n    on_truncation: continue")
    server.reply(anthropic(False, [text("Partial")], "model_context_window_exceeded"))
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "hi", principal="ann")
    assert result.failed and "filled its context window" in result.error["message"]
    assert len(server.received) == 1


async def test_replay_applies_todays_on_truncation(app, server, tmp_path) -> None:
    live_spec(app, server, "openai", "\n    on_truncation: accept")
    server.reply(openai(False, "The refund policy says that", "length"))
    golden = tmp_path / "cut.yaml"
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Policy?", principal="ann")
        await harness.export(result.run_id, golden)
    assert yaml.safe_load(golden.read_text())["model_turns"][0]["answer"]["incomplete"] == (
        "max_tokens"
    )
    app.spec.write_text(
        app.spec.read_text().replace("on_truncation: accept", "on_truncation: fail")
    )
    async with ph.load(app.spec) as harness:
        report = await harness.replay(golden)
    assert not report.same and report.status == ("completed", "failed")


# -- the spec: on_truncation, options --------------------------------------------------------------


@pytest.mark.parametrize(
    ("use", "setting", "where", "expected"),
    [
        ("openai", "on_truncation: ignore", "on_truncation", "fail', 'continue' or 'accept'"),
        ("anthropic", "options: {temperature: 0}", "options", "needs options.max_tokens"),
        ("anthropic", "options: {max_tokens: 0}", "options.max_tokens", "positive whole number"),
        ("openai", "options: {max_tokens: lots}", "options.max_tokens", "got 'lots'"),
        (
            "openai",
            "options: {max_completion_tokens: true}",
            "options.max_completion_tokens",
            "got True",
        ),
        (
            "anthropic",
            "options: {max_tokens: 64, thinking: yes}",
            "options.thinking",
            "mapping with a `type`",
        ),
        (
            "anthropic",
            "options: {max_tokens: 64, thinking: {type: enabled}}",
            "options.thinking.budget_tokens",
            "needs budget_tokens",
        ),
    ],
    ids=["on_truncation", "no-max_tokens", "zero", "text", "bool", "thinking", "budget"],
)
async def test_bad_settings_are_spec_errors(use, setting, where, expected, app, server) -> None:
    app.write(
        f"""
models:
  default:
    use: {use}
    model: test-model
    {setting}
tasks:
  orders: {{prompt: p}}
""",
        base=False,
    )
    with pytest.raises(SpecError, match=expected) as info:
        ph.load(app.spec)
    assert f"models.default.{where}" in str(info.value)
    assert "harness.yaml:" in str(info.value)


async def test_anthropic_sends_the_max_tokens_of_the_spec_and_no_other(server) -> None:
    server.reply(Reply(json=message([text("hi")], "end_turn")))
    await ANTHROPIC.make(server, options={"max_tokens": 300}).complete(request())
    assert server.received[0].body["max_tokens"] == 300
    with pytest.raises(ValueError, match=r"needs options\.max_tokens"):
        AnthropicProvider(model="m", options={})


# -- 4. the provider's detail stays in the message -------------------------------------------------

RATE_LIMITED = {
    "error": {
        "code": 429,
        "message": "Provider returned error",
        "metadata": {
            "raw": "qwen/qwen3-coder:free is temporarily rate-limited upstream. Please retry "
            "shortly, or add your own key to accumulate your rate limits",
            "provider_name": "Venice",
        },
    },
    "user_id": "user_2zzAbCdEf",
}


@STREAMS
async def test_openrouter_error_metadata_is_kept(stream: bool, server) -> None:
    server.reply(Reply(429, json=RATE_LIMITED), reported(stream, RATE_LIMITED["error"]))
    provider = OPENAI.make(server)
    for error in [
        await fails(provider, request(on_text=on_text(stream))),  # the HTTP status
        await fails(provider, request(on_text=on_text(stream))),  # inside a 200
    ]:
        assert error.kind == "rate_limit"
        message = str(error)
        assert "Provider returned error" in message and "provider 'Venice'" in message
        assert "temporarily rate-limited upstream" in message


async def test_error_metadata_is_redacted(server) -> None:
    raw = json.dumps({"error": {"message": f"bad key {KEY}", "api_key": "sk-upstream-secret"}})
    body = {
        "error": {
            "code": 401,
            "message": "Provider returned error",
            "metadata": {"raw": raw, "provider_name": "Acme", "access_token": "tok-123"},
        }
    }
    server.reply(Reply(401, json=body))
    error = await fails(OPENAI.make(server))
    message = str(error)
    assert error.kind == "auth" and "provider 'Acme'" in message and "bad key" in message
    assert KEY not in message and "sk-upstream-secret" not in message and "tok-123" not in message


# -- 5. reasoning tokens --------------------------------------------------------------------------


@STREAMS
@pytest.mark.parametrize(
    ("usage", "billed"),
    [
        # OpenAI: reasoning is inside completion_tokens, and total = prompt + completion
        (
            {
                "prompt_tokens": 12,
                "completion_tokens": 300,
                "total_tokens": 312,
                "completion_tokens_details": {"reasoning_tokens": 260},
            },
            (12, 300),
        ),
        # Gemini's compatible endpoint: thoughts only in total_tokens
        ({"prompt_tokens": 12, "completion_tokens": 40, "total_tokens": 312}, (12, 300)),
        # a server reporting reasoning beside completion_tokens, and no total
        (
            {
                "prompt_tokens": 12,
                "completion_tokens": 40,
                "completion_tokens_details": {"reasoning_tokens": 260},
            },
            (12, 300),
        ),
        # Responses-style names
        (
            {
                "input_tokens": 12,
                "output_tokens": 40,
                "output_tokens_details": {"reasoning_tokens": 260},
            },
            (12, 300),
        ),
    ],
    ids=["openai", "total", "details", "output_tokens_details"],
)
async def test_reasoning_tokens_are_counted_as_billed(stream, usage, billed, server) -> None:
    server.reply(openai(stream, "Done.", usage=usage))
    answer = await OPENAI.make(server).complete(request(on_text=on_text(stream)))
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == billed


@STREAMS
async def test_a_budget_counts_reasoning_tokens(stream, app, server, streamed) -> None:
    live_spec(app, server, "openai")
    app.spec.write_text(
        app.spec.read_text().replace(
            "tools: [lookup_order]", "tools: [lookup_order]\n    budget: {tokens: 200}"
        )
    )
    streamed(stream)
    server.reply(
        openai(
            stream,
            "Done.",
            usage={"prompt_tokens": 12, "completion_tokens": 40, "total_tokens": 312},
        )
    )
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "hi", principal="ann")
    assert result.status is ph.RunStatus.LIMITED and result.limit == "tokens"
    assert result.usage.tokens_out == 300


# -- 6. text blocks are paragraphs -----------------------------------------------------------------


@STREAMS
async def test_text_blocks_are_joined_as_paragraphs(stream: bool, server) -> None:
    blocks = [text("I checked the order information."), THINKING, text("I found that A-1 shipped.")]
    server.reply(anthropic(stream, blocks, "end_turn"))
    seen: list[str] = []
    answer = await ANTHROPIC.make(server).complete(request(on_text=on_text(stream, seen)))
    assert answer.text == "I checked the order information.\n\nI found that A-1 shipped."
    if stream:
        assert "".join(seen) == answer.text


# -- answers that break their format ---------------------------------------------------------------


async def test_a_stream_that_ended_but_never_said_done_is_not_retried(
    app, server, streamed
) -> None:
    live_spec(app, server, "openai")
    streamed(True)
    server.reply(*[Reply(sse=completion_chunks("Hello.", done=False))] * 3)
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "hi", principal="ann")
    assert len(server.received) == 1 and result.failed
    message = result.error["message"]
    assert "openai model 'default'" in message and "without `data: [DONE]`" in message
    assert "after 5 chunks" in message and '"usage"' in message  # the last chunk, named
    assert (result.usage.tokens_in, result.usage.tokens_out) == (43, 10)


@pytest.mark.parametrize("wire", [OPENAI, ANTHROPIC], ids=["openai", "anthropic"])
async def test_a_stream_cut_mid_answer_is_retried(wire, server) -> None:
    lines = (
        completion_chunks("Hello there.")
        if wire is OPENAI
        else message_events([text("Hello there.")], "end_turn")
    )
    server.reply(Reply(sse=lines[:3]))
    error = await fails(wire.make(server), request(on_text=on_text(True)))
    assert error.kind == "server" and error.retryable
    assert f"{wire.name} model 'default'" in str(error) and "stream ended" in str(error)


@pytest.mark.parametrize("wire", [OPENAI, ANTHROPIC], ids=["openai", "anthropic"])
async def test_a_chunk_that_is_not_json_is_named_and_not_retried(wire, server) -> None:
    lines = (
        completion_chunks("Hi.") if wire is OPENAI else message_events([text("Hi.")], "end_turn")
    )
    server.reply(Reply(sse=[lines[0], 'data: {"choices": [\n\n']))
    error = await fails(wire.make(server), request(on_text=on_text(True)))
    assert error.kind == "malformed" and not error.retryable
    assert f"{wire.name} model 'default'" in str(error) and '{"choices": [' in str(error)


@STREAMS
async def test_an_unknown_block_type_is_named_and_not_retried(
    stream, app, server, streamed
) -> None:
    block = {
        "type": "server_tool_use",
        "id": "srvtoolu_01",
        "name": "web_search",
        "input": {"query": "A-1"},
    }
    live_spec(app, server, "anthropic")
    streamed(stream)
    server.reply(*[anthropic(stream, [block, text("It shipped.")], "end_turn")] * 3)
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "hi", principal="ann")
    assert len(server.received) == 1 and result.failed
    message = result.error["message"]
    assert "anthropic model 'default'" in message and "'server_tool_use'" in message
    assert "A-1" not in message  # the block is named by its keys, never its content
    if not stream:  # the whole answer said what it cost
        assert (result.usage.tokens_in, result.usage.tokens_out) == (412, 96)


async def test_an_unknown_delta_type_is_named(server) -> None:
    events = message_events([text("Hi.")], "end_turn")
    odd = {"type": "content_block_delta", "index": 0, "delta": {"type": "hologram_delta", "x": 1}}
    events.insert(2, f"event: content_block_delta\ndata: {json.dumps(odd)}\n\n")
    server.reply(Reply(sse=events))
    error = await fails(ANTHROPIC.make(server), request(on_text=on_text(True)))
    assert error.kind == "malformed" and "'hologram_delta'" in str(error)


async def test_streamed_and_json_answers_are_equal(server) -> None:
    content = [REDACTED, THINKING, text("One."), text("Two."), TOOL_USE]
    server.reply(anthropic(False, content, "tool_use"), anthropic(True, content, "tool_use"))
    provider = ANTHROPIC.make(server)
    plain: ModelResponse = await provider.complete(request())
    sse: ModelResponse = await provider.complete(request(on_text=on_text(True)))
    assert plain == sse and plain.thinking == (REDACTED, THINKING)
