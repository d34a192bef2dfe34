"""`run_status` is `RunStatus(value)`, by a faster road."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_harness.runtime.results import RunStatus, run_status


@pytest.mark.parametrize("status", list(RunStatus))
def test_each_value_gives_its_status(status: RunStatus) -> None:
    assert run_status(status.value) is status
    assert run_status(status) is status  # a member is its own status, as RunStatus(member)


@given(st.one_of(st.text(max_size=30), st.integers(), st.none(), st.lists(st.text(), max_size=2)))
def test_anything_else_fails_as_the_enum_call_fails(value: object) -> None:
    try:
        expected: RunStatus | str = RunStatus(value)  # type: ignore[arg-type]
    except ValueError as exc:
        expected = str(exc)
    try:
        got: RunStatus | str = run_status(value)  # type: ignore[arg-type]
    except ValueError as exc:
        got = str(exc)
    assert got == expected
