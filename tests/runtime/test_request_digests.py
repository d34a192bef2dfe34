"""`request_digests` gives the digests of the request as recordings compare it, cache or not."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_harness.models.base import (
    Message,
    ModelRequest,
    ToolSchema,
    canonical_json,
    content_digest,
    text_digest,
)
from pytest_harness.redaction import redact, stable_ids
from pytest_harness.runtime.request_digests import DENY_MESSAGES, PARTS, request_digests
from pytest_harness.spec.schema import Effect, RuleSpec

RUN = "run_" + "a" * 32
OTHER = "run_" + "b" * 32
TOOLS = (
    ToolSchema(
        name="refund",
        description="Refund an order.",
        parameters={"type": "object", "properties": {"amount": {"type": "number"}}},
    ),
)


def request(system: str, messages: list[Message], tools: tuple[ToolSchema, ...] = TOOLS) -> Any:
    return ModelRequest(
        task="t",
        model="m",
        system=system,
        messages=tuple(messages),
        tools=tools,
        run_id=RUN,
        turn=0,
        input="hi",
    )


def expected(req: ModelRequest) -> tuple[str, dict[str, str]]:
    """The digests as the module's docstring describes them, in one pass and four encodings.

    The messages are redacted; the system prompt and tool schemas are taken as they are (the
    project's own text); generated ids are numbered across the whole request.
    """
    content = req.content()
    seen = stable_ids({**content, "messages": redact(content["messages"])})
    return content_digest(seen), {part: content_digest(seen[part]) for part in PARTS}


USER: Message = {"role": "user", "content": "Refund $25 on A-1001."}
CASES = {
    "plain": ("You help.", [USER]),
    "secret in a message": ("You help.", [{"role": "user", "content": "password=hunter22"}]),
    "id in a message": ("You help.", [{"role": "user", "content": f"see {RUN} and {OTHER}"}]),
    "id in the prompt": (f"You serve {OTHER}.", [{"role": "user", "content": f"after {RUN}"}]),
    "secret in the prompt": ("Use the key sk-ant-api03-abcdefghijklmnopqrstu.", [USER]),
    "no messages": ("You help.", []),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_digests_are_those_of_the_request_as_recordings_compare_it(case: str) -> None:
    system, messages = CASES[case]
    req = request(system, messages)
    assert request_digests(req, req.content()) == expected(req)
    again = request(system, [*messages, {"role": "assistant", "content": f"ok {RUN}"}])
    assert request_digests(again, again.content()) == expected(again)  # the prompt remembered


def test_parts_come_in_the_order_recordings_keep_them() -> None:
    req = request("You help.", [USER])
    _, parts = request_digests(req, req.content())
    assert tuple(parts) == ("system", "tools", "messages")


def test_another_prompt_or_schemas_object_is_not_taken_for_a_remembered_one() -> None:
    first = request("You help.", [USER])
    request_digests(first, first.content())
    changed = ToolSchema(name="refund", description="Refund part of an order.", parameters={})
    for req in (request("You help!", [USER]), request("You help.", [USER], (changed,))):
        digest, parts = request_digests(req, req.content())
        assert (digest, parts) == expected(req)
        assert digest != expected(first)[0]


def test_a_remembered_message_gives_the_digests_of_its_content_whatever_its_form() -> None:
    """Messages are remembered by their canonical JSON: the same content in another form (a
    tuple for a list, a secret in a JSON string, an id) digests as the comparable request."""
    call = {"id": "c1", "name": "refund", "args": {"amount": 25, "token": "abc"}}
    turns: list[list[Message]] = [
        [USER],
        [USER, {"role": "assistant", "content": None, "tool_calls": [call]}],
        [USER, {"role": "assistant", "content": None, "tool_calls": (dict(call),)}],  # type: ignore[typeddict-item]
        [USER, {"role": "tool", "content": '{"password": "hunter22", "ok": true}'}],
        [USER, {"role": "tool", "content": f'{{"run": "{RUN}"}}'}],
        [USER, {"role": "user", "content": "Refund $25 on A-1001. "}],
    ]
    for _ in range(2):  # the second time, every message is remembered
        for messages in turns:
            req = request("You help.", messages)
            assert request_digests(req, req.content()) == expected(req)


def test_a_long_message_is_redacted_once_for_all_the_requests_that_repeat_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tool result of 320 KB is redacted at the request that first holds it, not again at
    every later turn (each redaction of it scanned every secret shape, about a second)."""
    from pytest_harness.redaction import redact
    from pytest_harness.runtime import request_digests as module

    big: Message = {"role": "tool", "content": "order A-1001 shipped; password=hunter2 " * 8_000}
    redacted: list[object] = []

    def counting(value: object) -> object:
        redacted.append(value)
        return redact(value)

    monkeypatch.setattr(module, "redact", counting)
    messages: list[Message] = [USER, big]
    for turn in range(4):
        req = request("You help.", messages)
        assert request_digests(req, req.content()) == expected(req)
        messages = [*messages, {"role": "assistant", "content": f"turn {turn}"}]
    assert sum(1 for value in redacted if value == big) == 1


# -- deny messages that redaction changes: digested as the spec has them ----------------------

HIDDEN = "Auth: only the privacy team closes accounts."
PLAIN = "Accounts are closed by the privacy team."


def rules(*messages: str, then: Effect = Effect.DENY) -> tuple[RuleSpec, ...]:
    return tuple(
        RuleSpec(id=f"r{i}", when="true", then=then, message=m) for i, m in enumerate(messages)
    )


def told(*texts: str) -> list[Message]:
    call = {"id": "c1", "name": "delete_account", "args": {}}
    messages: list[Message] = [USER]
    for text in texts:
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "content": text, "tool_call_id": "c1"},
        ]
    return messages


def test_a_request_that_tells_a_hidden_deny_message_keeps_its_digest_as_the_spec_has_it() -> None:
    req = request("You help.", told(HIDDEN, PLAIN, HIDDEN))
    digest, parts = request_digests(req, req.content(), rules(HIDDEN, PLAIN))
    assert (digest, {p: parts[p] for p in PARTS}) == expected(req)  # the messages: redacted
    assert tuple(parts) == (*PARTS, DENY_MESSAGES)
    assert parts[DENY_MESSAGES] == text_digest(canonical_json([HIDDEN, HIDDEN]))
    edited = request("You help.", told(HIDDEN.replace("only", "never")))
    _, again = request_digests(edited, edited.content(), rules(HIDDEN.replace("only", "never")))
    first = request("You help.", told(HIDDEN))
    _, before = request_digests(first, first.content(), rules(HIDDEN))
    assert again["messages"] == before["messages"]  # the edit is inside the redacted span
    assert again[DENY_MESSAGES] != before[DENY_MESSAGES]


@pytest.mark.parametrize(
    ("messages", "task_rules"),
    [
        (told(PLAIN), rules(PLAIN)),  # redaction changes nothing in it
        (told(HIDDEN), rules(HIDDEN, then=Effect.APPROVE)),  # not a deny rule's
        (told(), rules(HIDDEN)),  # not told yet (the first request)
        ([{"role": "user", "content": HIDDEN}], rules(HIDDEN)),  # the run's input, not a tool's
        (told(HIDDEN), ()),
    ],
    ids=["plain", "approve rule", "not told", "user message", "no rules"],
)
def test_no_deny_message_digest_without_a_hidden_deny_message_told(
    messages: list[Message], task_rules: tuple[RuleSpec, ...]
) -> None:
    req = request("You help.", messages)
    assert request_digests(req, req.content(), task_rules) == expected(req)


def test_which_deny_messages_redaction_changes_is_worked_out_once_per_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The common case (no deny message reads like a credential) adds no redaction per request."""
    from pytest_harness.runtime import request_digests as module

    seen: list[object] = []

    def counting(value: object) -> object:
        seen.append(value)
        return redact(value)

    monkeypatch.setattr(module, "redact", counting)
    task_rules = rules(PLAIN)
    for turn in range(3):
        req = request("You help.", [*told(PLAIN), {"role": "assistant", "content": f"t{turn}"}])
        assert request_digests(req, req.content(), task_rules) == expected(req)
    assert seen.count(PLAIN) == 1  # the rule's message, once; then remembered
