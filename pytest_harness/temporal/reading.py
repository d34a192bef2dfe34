"""Reading a run from its `HarnessRun` workflow: its snapshot in pages, its head, its rest.

A run's snapshot (state, events, journal) can be larger than one Temporal payload, so it is
read with the `snapshot_page` query, a page at a time (`paging.read_pages`); a query writes
nothing to the workflow's history. A workflow's result is only the run's head (ids, status,
times: `head`), enough to list the run. A worker of an earlier version answers neither: its
result and its `snapshot` query are the whole snapshot, which is read as it is (upgrade
clients before workers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from temporalio.client import (
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowHistoryEventFilterType,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from pytest_harness.errors import ExecutionError, UnknownRun
from pytest_harness.runtime.results import RunSummary
from pytest_harness.temporal.checks import RESTING
from pytest_harness.temporal.paging import read_pages
from pytest_harness.temporal.records import ENDED_OUTSIDE, failed_outside, summary_of

__all__ = ["ended_outside", "head", "listed_run", "read_run", "until_rested", "whole"]


def whole(answer: Mapping[str, Any]) -> bool:
    """Whether a workflow's result or an update's answer holds the run's state (else: read it)."""
    return "state" in answer


async def _pages(
    handle: WorkflowHandle[Any, Any], keys: Sequence[str] | None = None
) -> dict[str, Any]:
    """The run's snapshot (its `keys` only, when given), read in pages.

    A worker of an earlier version answers it whole.
    """
    want: dict[str, Any] = {} if keys is None else {"keys": list(keys)}

    async def fetch(offset: int, rev: int | None) -> Mapping[str, Any]:
        answer: dict[str, Any] = await handle.query(
            "snapshot_page", {"offset": offset, "rev": rev, **want}, result_type=dict
        )
        return answer

    try:
        snap: dict[str, Any] = await read_pages(fetch)
    except ExecutionError as exc:  # pages that do not add up
        raise ExecutionError(f"run {handle.id}: {exc}") from None
    except WorkflowQueryFailedError as exc:
        if "snapshot_page" not in str(exc):  # not a worker that lacks the query
            raise
        snap = await handle.query("snapshot", result_type=dict)
    return snap


async def _ended(handle: WorkflowHandle[Any, Any], run_id: str) -> Any:
    """The workflow's result when it completed (else None); errors for the other ends.

    A failed workflow's error is its failure's; the other ends the harness never chooses
    (`records.ENDED_OUTSIDE`) say how it ended (`ended_outside`).
    """
    desc = await handle.describe()
    if desc.status is WorkflowExecutionStatus.COMPLETED:
        return await handle.result()
    if desc.status is WorkflowExecutionStatus.FAILED:
        try:
            await handle.result()
        except WorkflowFailureError as exc:
            raise ExecutionError(
                f"run {run_id}: its workflow failed on a worker: {exc.cause}; when this "
                "is a NondeterminismError, the workflow code changed while the run was "
                "under way and its history no longer replays: run the old code's "
                "worker until its runs end"
            ) from None
    if desc.status in ENDED_OUTSIDE:
        raise ExecutionError(await ended_outside(handle, run_id, desc.status))
    return None


_HISTORY_LIMIT = "history size exceeds limit"
"""How the server words the reason it terminates a workflow whose history outgrew its limit."""


async def ended_outside(
    handle: WorkflowHandle[Any, Any], run_id: str, status: WorkflowExecutionStatus | None
) -> str:
    """Why a run's workflow ended without pytest-harness ending it, for an `ExecutionError`.

    A terminated workflow's reason comes from its close event: the server's own (a history
    over its size limit) is explained, any other (`temporal workflow terminate --reason`) is
    quoted.
    """
    name = status.name if status else "?"
    reason = ""
    if status is WorkflowExecutionStatus.TERMINATED:
        try:
            async for event in handle.fetch_history_events(
                event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT
            ):
                if event.HasField("workflow_execution_terminated_event_attributes"):
                    reason = event.workflow_execution_terminated_event_attributes.reason
        except RPCError:
            pass  # the reason is a nicety: the status alone still says what happened
    if _HISTORY_LIMIT in reason.lower():
        return (
            f"run {run_id}: the Temporal server terminated its workflow ({reason!r}): the "
            "history (every tool result, model answer and request the run carried) outgrew "
            "the server's limit (limit.historySize.error, 50 MB by default); the run cannot "
            "go on: return less from tools (store big data as an artifact and return a "
            "reference to it)"
        )
    said = f" (reason: {reason!r})" if reason else ""
    return (
        f"run {run_id}: its workflow is {name}{said}; it was ended outside pytest-harness "
        "(temporal workflow terminate?)"
    )


async def read_run(
    handle: WorkflowHandle[Any, Any],
    run_id: str,
    *,
    rested: bool = False,
    head_only: bool = False,
    keys: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The workflow's snapshot of the run (with `rested`, once it ends or suspends).

    With `head_only`, an ended run's head may stand for it (no state, events or journal);
    with `keys`, the snapshot may hold those keys only.
    `UnknownRun` when there is no such workflow, `ExecutionError` when it failed, was ended
    outside pytest-harness or the server answered an error.
    """
    done: Any = None
    try:
        if rested:
            await until_rested(handle)
        done = await _ended(handle, run_id)
        if isinstance(done, dict) and (whole(done) or head_only):
            return done
        return await _pages(handle, keys)
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise UnknownRun(run_id) from None
        if done is not None:  # an ended run's pages are answered by a worker replaying it
            raise ExecutionError(
                f"run {run_id} has ended, and its state, events and journal are read from a "
                f"worker that replays its history; none answered ({exc}): start one "
                "(`pytest-harness worker harness.yaml`) on the run's task queue"
            ) from None
        raise ExecutionError(f"run {run_id}: Temporal answered {exc}") from None
    except WorkflowQueryFailedError as exc:
        raise ExecutionError(f"run {run_id}: its workflow could not be read: {exc}") from None


async def head(handle: WorkflowHandle[Any, Any], run_id: str) -> dict[str, Any]:
    """The run's head: an ended run's result, else its snapshot.

    The head holds `run_id`, `session_id`, `task`, `status`, `tenant`, `principal`,
    `created_at` and `updated_at`.
    """
    return await read_run(handle, run_id, head_only=True)


async def until_rested(handle: WorkflowHandle[Any, Any]) -> None:
    """Return once the run ends or suspends.

    The `wait` update blocks while the run is under way; at rest it is refused, which
    leaves nothing in the workflow's history (however often a run is read). A run that
    rested and went on again before this reads it is waited for again.
    """
    while True:
        try:
            answer = await handle.execute_update("wait")
            if answer is not None:  # a worker of an earlier version answers with the run
                return
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError) and cause.type == RESTING:
                return
            # The workflow ended while the update waited (a terminate, the server's history
            # limit): the caller's `describe` says how. Anything else is the run's error.
            desc = await handle.describe()
            if desc.status is not WorkflowExecutionStatus.RUNNING:
                return
            raise ExecutionError(
                f"run {handle.id}: waiting for it failed: {cause or exc}"
            ) from None
        except RPCError as exc:
            # The workflow ended as the update arrived (its wording varies by server and
            # by race): the caller's `describe` says which end, or that there is none.
            if exc.status is not RPCStatusCode.NOT_FOUND:
                raise
            return


async def listed_run(
    handle: WorkflowHandle[Any, Any], wf: WorkflowExecution, memo: Mapping[str, Any]
) -> RunSummary | None:
    """A listed execution's line of `runs()`, or None for a workflow gone since it was listed.

    From the run's head; `failed` (from its memo) when its workflow ended outside the harness.
    An execution a reset closed stands for the run as it is now, its workflow's latest
    execution: the list is eventually consistent and may not show that one yet (`runs()`
    lists each workflow id once).
    """
    unread: ExecutionError | None = None
    if wf.status not in ENDED_OUTSIDE:
        try:
            return summary_of(await head(handle, wf.id))
        except ExecutionError as exc:
            unread = exc  # the list is eventually consistent: the workflow may have ended since
    try:
        latest = await handle.describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return None
        raise ExecutionError(f"run {wf.id}: Temporal answered {exc}") from None
    if latest.status in ENDED_OUTSIDE:
        return failed_outside(latest, memo)
    if unread is not None and latest.run_id == wf.run_id:
        raise unread  # the head could not be read for another reason
    return summary_of(await head(handle, wf.id))
