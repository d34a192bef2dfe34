"""Answers cut at their token limit, offline: a model's `on_truncation` through the run loop."""

from __future__ import annotations

import json

import pytest

import pytest_harness as ph
from pytest_harness.errors import SpecError
from pytest_harness.runtime.truncation import CONTINUE_PROMPT, continuations, joined_output
from pytest_harness.testing import call, say


def spec(app, turns: list[dict] | dict, policy: str | None = None) -> None:
    setting = f"\n    on_truncation: {policy}" if policy else ""
    app.write(
        f"""
models:
  default:
    use: scripted
    script: {json.dumps(turns)}{setting}
tools:
  lookup_order: {{call: "{app.module}:lookup_order", replay: safe}}
tasks:
  orders:
    prompt: You are the order desk.
    tools: [lookup_order]
""",
        base=False,
    )


@pytest.mark.asyncio
async def test_a_cut_answer_fails_the_run_by_default(app) -> None:
    spec(app, [say("Refunds are", (30, 64), incomplete="max_tokens")])
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Policy?", principal="ann")
    assert result.status is ph.RunStatus.FAILED and result.error["type"] == "ModelTruncated"
    assert result.usage.truncated == 1 and (result.usage.tokens_in, result.usage.tokens_out) == (
        30,
        64,
    )
    with pytest.raises(ph.RunFailed):
        result.raise_for_status()
    decisions = [(d.kind, d.detail.get("incomplete")) for d in result.trace]
    assert ("model", "max_tokens") in decisions


@pytest.mark.asyncio
async def test_accept_completes_with_the_marker(app) -> None:
    spec(app, [say("Refunds are", incomplete="max_tokens")], "accept")
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Policy?", principal="ann")
    assert result.ok and result.output == "Refunds are" and result.usage.truncated == 1


@pytest.mark.asyncio
async def test_continue_joins_the_pieces_and_keeps_them_in_the_session(app) -> None:
    policy = [
        say("Refunds are accepted ", incomplete="max_tokens"),
        say("within 30 days", incomplete="max_tokens"),
        say("."),
    ]
    thanks = [say("You are welcome.")]
    script = {
        "match": [{"input": "Policy*", "turns": policy}, {"input": "Thanks*", "turns": thanks}]
    }
    spec(app, script, "continue")
    async with ph.load(app.spec) as harness:
        first = await harness.run("orders", "Policy?", principal="ann", session_id="s1")
        second = await harness.run("orders", "Thanks!", principal="ann", session_id="s1")
    assert first.output == "Refunds are accepted within 30 days."
    assert first.usage.truncated == 2 and first.usage.steps == 3
    assert second.ok and second.output == "You are welcome."  # not joined to the first


@pytest.mark.asyncio
async def test_a_cut_answer_with_calls_goes_on_with_them_under_continue(app) -> None:
    cut = call("lookup_order", order_id="A-1") | {"incomplete": "max_tokens"}
    spec(app, [cut, say("A-1 costs 250.")], "continue")
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "A-1?", principal="ann")
    assert result.ok and result.output == "A-1 costs 250."
    assert app.tools.CALLS == [("lookup_order", "A-1")]


@pytest.mark.asyncio
async def test_a_scripted_turn_with_a_bad_incomplete_is_a_spec_error(app) -> None:
    spec(app, [{"say": "x", "incomplete": "tired"}])
    with pytest.raises(SpecError, match="max_tokens") as info:
        ph.load(app.spec)
    assert "models.default.script[0].incomplete" in str(info.value)
    spec(app, [{"error": "server", "incomplete": "max_tokens"}])
    with pytest.raises(SpecError, match="no answer to be `incomplete`"):
        ph.load(app.spec)


def test_continuations_are_read_back_from_the_messages() -> None:
    messages = [
        {"role": "user", "content": "Policy?"},
        {"role": "assistant", "content": "Refunds "},
        {"role": "user", "content": CONTINUE_PROMPT},
        {"role": "assistant", "content": "are "},
        {"role": "user", "content": CONTINUE_PROMPT},
    ]
    assert continuations(messages) == ["Refunds ", "are "]
    assert joined_output(messages, "accepted.") == "Refunds are accepted."
    assert continuations(messages[:1]) == [] and joined_output([], "x") == "x"
