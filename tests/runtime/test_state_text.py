"""The state's text at each commit (`StateText`) is exactly what encoding it whole gives."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from pytest_harness.errors import StoreError
from pytest_harness.runtime.state import RunState, StateText
from pytest_harness.store.base import encode_json
from pytest_harness.store.helpers import PreparedJSON


def whole(state: dict[str, Any]) -> str:
    return encode_json(dict(state), "the state")


def test_each_commit_is_the_whole_encoding_as_entries_are_added_replaced_and_cut() -> None:
    text = StateText()
    state = RunState()
    for step in range(4):
        state.messages.append({"role": "user", "content": f"é {step}"})
        state.trace.append({"step": step, "kind": "model", "key": "m", "detail": {"x": 1.5}})
        prepared = text.prepared(state.to_dict())
        assert isinstance(prepared, PreparedJSON) and prepared == state.to_dict()
        assert encode_json(prepared, "the state") == whole(state.to_dict())
    state.messages[1] = {"role": "assistant", "content": None}  # replaced: encoded anew
    del state.trace[2:]
    assert encode_json(text.prepared(state.to_dict()), "s") == whole(state.to_dict())
    state.messages = []  # a new list
    assert encode_json(text.prepared(state.to_dict()), "s") == whole(state.to_dict())
    assert json.loads(encode_json(text.prepared(state.to_dict()), "s")) == state.to_dict()


@pytest.mark.parametrize("bad", [math.nan, {1, 2}, object()])
def test_an_entry_json_cannot_hold_is_the_same_store_error(bad: object) -> None:
    text = StateText()
    state = RunState()
    state.trace.append({"detail": {"ok": 1}})
    encode_json(text.prepared(state.to_dict()), "the state of run r")
    state.trace.append({"detail": {"bad": bad}})
    with pytest.raises(StoreError) as cached:
        encode_json(text.prepared(state.to_dict()), "the state of run r")
    with pytest.raises(StoreError) as plain:
        encode_json(state.to_dict(), "the state of run r")
    assert str(cached.value) == str(plain.value)
    state.trace.pop()  # the failed entry left nothing behind
    assert encode_json(text.prepared(state.to_dict()), "s") == whole(state.to_dict())


@pytest.mark.asyncio
async def test_a_tool_that_changes_its_arguments_changes_nothing_the_run_committed(
    app: Any, write_file: Any
) -> None:
    import sys

    import pytest_harness as ph

    module = f"tagger_{app.module}"
    write_file(
        f"{module}.py",
        """
        from pytest_harness.models.base import ModelResponse, ProposedCall

        SEEN = []


        def tag(items):
            \"\"\"Tag items (and scribble on the list it was given).\"\"\"
            items.append("MUTATED")
            return len(items)


        def model(request):
            if request.turn == 0:
                return ModelResponse(calls=(ProposedCall("c1", "tag", {"items": ["a"]}),))
            SEEN.extend(m["tool_calls"][0]["args"] for m in request.messages if m.get("tool_calls"))
            return ModelResponse(text="done")
        """,
    )
    app.write(
        f"""
        models:
          default: {{use: function, call: "{module}:model"}}
        tools:
          tag: {{call: "{module}:tag"}}
        tasks:
          t: {{prompt: p, tools: [tag]}}
        state: {{use: sqlite, path: state.db}}
        """,
        base=False,
    )
    try:
        async with ph.load(app.spec) as harness:
            result = await harness.run("t", "tag a", principal="ann")
            stored = await harness.store.get_run(result.run_id)
        seen = sys.modules[module].SEEN
    finally:
        sys.modules.pop(module, None)
    assert result.ok and result.trace.tool_calls()[0].result == 2  # the tool saw its change
    calls = [m for m in stored.state["messages"] if m.get("tool_calls")]
    # the model was sent what the store holds: the arguments as proposed
    assert seen == [calls[0]["tool_calls"][0]["args"]] == [{"items": ["a"]}]


def test_a_group_of_scalars_read_again_is_its_own_text() -> None:
    """`{"v": 1, "phase": ...}` is kept by value: `True` and `1.0` (equal to `1`) are not `1`."""
    for phase in ["model", "tools", "model", True, 1, 1.0, None, "é\u2028"]:
        state = RunState(phase=phase)  # type: ignore[arg-type]
        assert encode_json(StateText().prepared(state.to_dict()), "s") == whole(state.to_dict())


def test_a_new_runs_state_is_its_whole_encoding() -> None:
    from pytest_harness.runtime.state import initial_state

    for _ in range(2):  # the text made, then the text kept
        state = initial_state()
        assert state == RunState().to_dict()
        assert encode_json(state, "s") == whole(RunState().to_dict())
