"""Guards of every check kind and action, on input, output and tool results."""

from __future__ import annotations

import pytest

import pytest_harness as ph
from pytest_harness.errors import SpecError

pytestmark = pytest.mark.asyncio


def guarded(app, guards: str, script: str, tools: str = "[lookup_order]") -> None:
    app.write(
        f"""
guards:
{guards}
tasks:
  t:
    prompt: p
    tools: {tools}
"""
    )
    app.spec.write_text(app.spec.read_text().replace("script: []", f"script: {script}", 1))


@pytest.mark.parametrize(
    ("guard", "answer", "output"),
    [
        (
            "{id: g, on: output, check: regex, pattern: 'a+b', action: redact}",
            "xaab",
            "x[REDACTED]",
        ),
        (
            "{id: g, on: output, check: contains, text: SECRET, ignore_case: true, action: redact}",
            "the secret is out",
            "the [REDACTED] is out",
        ),
        ("{id: g, on: output, check: max_length, max: 4, action: redact}", "abcdefgh", "abcd"),
        (
            "{id: g, on: output, check: json_schema, action: redact, "
            "schema: {type: object, required: [ok]}}",
            '{"nope": 1}',
            "[REDACTED]",
        ),
        (
            "{id: g, on: output, check: cel, when: 'text.contains(\"ssn\")', action: redact}",
            "my ssn",
            "[REDACTED]",
        ),
    ],
)
async def test_each_check_redacts_the_output(app, guard: str, answer: str, output: str) -> None:
    guarded(app, f"  - {guard}", f"[{{say: '{answer}'}}]")
    async with ph.load(app.spec) as harness:
        result = await harness.run("t", "hi", principal="ann")
    assert result.ok
    assert result.output == output
    assert result.trace.fired("g")


async def test_checks_that_do_not_fire_leave_the_text_alone(app) -> None:
    guards = """
  - {id: a, on: output, check: regex, pattern: 'zzz', action: block}
  - {id: b, on: output, check: json_schema, schema: {type: object}, action: block}
  - {id: c, on: input, check: max_length, max: 100, action: block}
"""
    guarded(app, guards, """[{say: '{"fine": true}'}]""")
    async with ph.load(app.spec) as harness:
        result = await harness.run("t", "hi", principal="ann")
    assert result.ok and result.output == '{"fine": true}'
    assert not result.trace.of_kind("guard")


async def test_warn_records_and_block_refuses_the_output(app) -> None:
    guards = """
  - {id: w, on: output, check: contains, text: maybe, action: warn}
  - {id: b, on: output, check: contains, text: forbidden, action: block, message: "no way"}
"""
    guarded(app, guards, "[{say: 'maybe forbidden'}]")
    async with ph.load(app.spec) as harness:
        result = await harness.run("t", "hi", principal="ann")
    assert result.status is ph.RunStatus.REFUSED
    assert result.output is None
    assert result.error == {"type": "GuardBlocked", "message": "no way"}
    assert [d.key for d in result.trace.of_kind("guard")] == ["w", "b"]


async def test_tool_result_guards_redact_what_the_model_sees_or_refuse(app) -> None:
    guards = """
  - id: card
    on: tool_result
    check: regex
    pattern: '\\d{16}'
    action: redact
    tools: [lookup_order]
"""
    guarded(app, guards, "[{call: lookup_order, args: {order_id: A-1}}, {say: done}]")
    async with ph.load(app.spec) as harness:
        result = await harness.run("t", "hi", principal="ann")
        record = await harness.store.get_run(result.run_id)
    [tool_message] = [m for m in record.state["messages"] if m["role"] == "tool"]
    assert "[REDACTED]" in tool_message["content"]
    assert "4111111111111111" not in tool_message["content"]
    assert result.trace.fired("card")
    # the raw result stays in the trace for the application's own store
    assert result.trace.tool_calls()[0].result["card"] == "4111111111111111"

    guarded(
        app,
        "  - {id: stop, on: tool_result, check: contains, text: '4111', action: block}",
        "[{call: lookup_order, args: {order_id: A-1}}, {say: done}]",
    )
    async with ph.load(app.spec) as harness:
        refused = await harness.run("t", "hi", principal="ann")
    assert refused.status is ph.RunStatus.REFUSED
    assert refused.trace.fired("stop")


async def test_callable_guard(app, write_file) -> None:
    write_file(
        "my_guards.py",
        """
        def shout(text, context):
            if context.on == "output" and text.isupper():
                return text.lower()
            return None
        """,
    )
    guarded(
        app,
        "  - {id: quiet, on: output, check: 'my_guards:shout', action: redact}",
        "[{say: HELLO}]",
    )
    async with ph.load(app.spec) as harness:
        result = await harness.run("t", "hi", principal="ann")
    assert result.output == "hello"
    import sys

    sys.modules.pop("my_guards", None)


@pytest.mark.parametrize(
    ("guard", "message"),
    [
        ("{id: g, on: output, check: regex}", "guards[0]: a regex guard needs `pattern`"),
        ("{id: g, on: output, check: regex, pattern: 'a('}", "guards[0].pattern: bad regex 'a('"),
        ("{id: g, on: output, check: max_length}", "a max_length guard needs `max`"),
        ("{id: g, on: output, check: contains}", "a contains guard needs `text`"),
        ("{id: g, on: output, check: json_schema, schema: {type: 12}}", "invalid JSON schema"),
        ("{id: g, on: output, check: 'nope_mod_xyz:f'}", "nope_mod_xyz"),
    ],
)
async def test_bad_guard_parameters_are_spec_errors(app, guard: str, message: str) -> None:
    guarded(app, f"  - {guard}", "[{say: hi}]")
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("(", r"\(")) as info:
        ph.load(app.spec)
    assert info.value.line is not None
