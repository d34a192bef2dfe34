"""How reading a run takes its workflow's end (`temporal/reading.py`), on a stand-in handle.

One notion of "ended outside the harness" (`records.ENDED_OUTSIDE`): `runs()` lists such a
run as `failed`, and reading it is an `ExecutionError` that says how it ended.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

from pytest_harness.errors import ExecutionError
from pytest_harness.temporal.reading import _ended
from pytest_harness.temporal.records import ENDED_OUTSIDE

pytestmark = pytest.mark.asyncio

RESULT = {"run_id": "r1", "status": "completed"}


class Handle:
    """A workflow handle whose workflow is described with `status`."""

    def __init__(self, status: WorkflowExecutionStatus) -> None:
        self.status = status

    async def describe(self) -> Any:
        return SimpleNamespace(status=self.status)

    async def result(self) -> Any:
        if self.status is WorkflowExecutionStatus.FAILED:
            raise WorkflowFailureError(cause=RuntimeError("boom"))
        return RESULT

    async def fetch_history_events(self, **_: Any) -> AsyncIterator[Any]:
        return
        yield  # an async generator with no events: no termination reason


@pytest.mark.parametrize("status", list(WorkflowExecutionStatus), ids=lambda s: s.name)
async def test_only_the_ends_the_harness_never_chooses_are_read_as_ended_outside(
    status: WorkflowExecutionStatus,
) -> None:
    handle: Any = Handle(status)
    if status is WorkflowExecutionStatus.COMPLETED:
        assert await _ended(handle, "r1") == RESULT
    elif status is WorkflowExecutionStatus.FAILED:
        with pytest.raises(ExecutionError, match="its workflow failed on a worker: boom"):
            await _ended(handle, "r1")
    elif status in ENDED_OUTSIDE:
        with pytest.raises(ExecutionError, match=f"its workflow is {status.name}; it was ended"):
            await _ended(handle, "r1")
    else:  # under way (RUNNING), or gone on in a new execution (CONTINUED_AS_NEW): read it
        assert await _ended(handle, "r1") is None
