"""The scripted and function providers: script files, errors with lines, turn selection."""

from __future__ import annotations

import pytest

import pytest_harness as ph
from pytest_harness.errors import ModelError, ScriptExhausted, SpecError
from pytest_harness.models.base import ModelRequest
from pytest_harness.models.scripted import ScriptedProvider

pytestmark = pytest.mark.asyncio


def request(turn: int, task: str = "t", text: str = "hi") -> ModelRequest:
    return ModelRequest(
        task=task,
        model="default",
        system="p",
        messages=({"role": "user", "content": text},),
        tools=(),
        run_id="run_x",
        turn=turn,
        input=text,
    )


async def test_turns_in_python_are_answered_in_order() -> None:
    provider = ScriptedProvider.from_turns(
        [
            {"call": "lookup", "args": {"id": 1}},
            {"calls": [{"name": "a"}, {"name": "b", "args": {"x": 2}}], "say": "both"},
            {"say": "done", "usage": {"input_tokens": 7, "output_tokens": 3}},
            {"error": "rate_limit"},
        ]
    )
    first = await provider.complete(request(0))
    assert [(c.name, dict(c.args)) for c in first.calls] == [("lookup", {"id": 1})]
    assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0
    second = await provider.complete(request(1))
    assert second.text == "both" and [c.name for c in second.calls] == ["a", "b"]
    assert [c.id for c in second.calls] == ["call_1_0", "call_1_1"]
    third = await provider.complete(request(2))
    assert (third.text, third.usage.input_tokens, third.usage.output_tokens) == ("done", 7, 3)
    with pytest.raises(ModelError) as info:
        await provider.complete(request(3))
    assert info.value.kind == "rate_limit" and info.value.retryable
    with pytest.raises(ScriptExhausted, match="asked for turn 5 but the script has 4 turns") as ex:
        await provider.complete(request(4))
    assert ex.value.task == "t" and ex.value.turn == 5 and "user: 'hi'" in ex.value.last_request


async def test_an_error_turn_asks_for_its_retry_after() -> None:
    provider = ScriptedProvider.from_turns(
        [{"error": "rate_limit", "retry_after": "1.5s"}, {"error": "server"}]
    )
    with pytest.raises(ModelError) as info:
        await provider.complete(request(0))
    assert info.value.retry_after == 1.5
    assert provider.retry_delay(1, info.value) == 1.5
    with pytest.raises(ModelError) as info:
        await provider.complete(request(1))
    assert provider.retry_delay(1, info.value) == 0.0


@pytest.mark.parametrize(
    ("turns", "message"),
    [
        ([{"sey": "x"}], r"\[0\].sey: unknown key 'sey'"),
        ([{"call": "a", "calls": []}], "either `call`"),
        ([{}], "needs one of"),
        ([{"error": "meltdown"}], r"\[0\].error: .*'meltdown'"),
        ([{"say": "x", "delay": "soon"}], r"\[0\].delay"),
        ([{"say": "x", "retry_after": "1s"}], "`retry_after` belongs to an `error` turn"),
        ([{"error": "rate_limit", "retry_after": "-1s"}], r"\[0\].retry_after"),
        (["hello"], "a turn is a mapping"),
        ({"match": [{"task": "a"}]}, "with `turns`"),
        ({"matches": []}, "unknown key 'matches'"),
    ],
)
async def test_malformed_turns_are_spec_errors(turns, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        ScriptedProvider.from_turns(turns)


async def test_script_file_errors_name_the_file_and_line(app, write_file) -> None:
    write_file(
        "orders.script.yaml",
        """
        - say: fine
        - call: lookup_order
          args: {order_id: 1}
          colour: red
        """,
    )
    app.write("tasks:\n  t: {prompt: p}\n")
    app.spec.write_text(app.spec.read_text().replace("script: []", "script: orders.script.yaml"))
    with pytest.raises(SpecError) as info:
        ph.load(app.spec)
    assert info.value.file.endswith("orders.script.yaml")
    assert info.value.line == 5
    assert "[1].colour: unknown key 'colour'" in str(info.value)


async def test_inline_script_errors_point_into_harness_yaml(app) -> None:
    app.write("tasks:\n  t: {prompt: p}\n")
    app.spec.write_text(
        app.spec.read_text().replace("script: []", "script: [{say: x}, {bogus: 1}]")
    )
    with pytest.raises(SpecError, match=r"models.default.script\[1\].bogus: unknown key") as info:
        ph.load(app.spec)
    assert info.value.line is not None


async def test_missing_script_file(app) -> None:
    app.write("tasks:\n  t: {prompt: p}\n")
    app.spec.write_text(app.spec.read_text().replace("script: []", "script: nowhere.yaml"))
    with pytest.raises(SpecError, match=r"nowhere\.yaml") as info:
        ph.load(app.spec)
    # named where the spec names it: the spec file, its line and the key path
    line = app.spec.read_text().splitlines().index("    script: nowhere.yaml") + 1
    assert str(info.value).startswith(
        f"{app.spec}:{line} models.default.script: script file not found: nowhere.yaml "
    )


async def test_function_provider_gets_the_request(app, write_file) -> None:
    write_file(
        "fn_model.py",
        """
        from pytest_harness.models.base import ModelResponse, ProposedCall

        async def answer(request):
            if request.turn == 0:
                return ModelResponse(calls=(ProposedCall("c1", "lookup_order", {"order_id": "A"}),))
            assert [t.name for t in request.tools] == ["lookup_order"]
            return "looked up " + request.messages[-1]["content"][:20]

        def wrong(request):
            return 42
        """,
    )
    app.write(
        """
tasks:
  t: {prompt: p, tools: [lookup_order]}
  w: {prompt: p, model: bad}
"""
    )
    text = app.spec.read_text().replace(
        "    use: scripted\n    script: []",
        '    use: function\n    call: "fn_model:answer"\n'
        '  bad:\n    use: function\n    call: "fn_model:wrong"',
    )
    app.spec.write_text(text)
    async with ph.load(app.spec) as harness:
        result = await harness.run("t", "hi", principal="ann")
        wrong = await harness.run("w", "hi", principal="ann")
    assert result.ok and result.output.startswith("looked up {")
    assert wrong.failed and "returned int" in wrong.error["message"]
    import sys

    sys.modules.pop("fn_model", None)
