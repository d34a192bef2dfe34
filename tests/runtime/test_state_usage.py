"""The usage a checkpoint keeps is `RunState.usage()` in its JSON form, whatever was spent."""

from __future__ import annotations

import pytest

from pytest_harness.runtime.state import RunState


@pytest.mark.parametrize(
    "spent",
    [
        {},
        {"tokens_in": 420, "tokens_out": 12, "usd": 0.1 + 0.2, "steps": 3, "tool_calls": 2},
        {"usage_incomplete": True, "truncated": 2, "usd": 1 / 3},
    ],
)
def test_the_checkpoint_usage_is_the_usage_as_json(spent: dict[str, object]) -> None:
    state = RunState(**spent)  # type: ignore[arg-type]
    assert state.to_dict()["usage"] == state.usage().to_dict()
    assert RunState.from_dict(state.to_dict()).usage() == state.usage()
