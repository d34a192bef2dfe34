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
