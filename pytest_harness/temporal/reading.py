"""Reading a run from its `HarnessRun` workflow: its snapshot in pages, its head, its rest.

A run's snapshot (state, events, journal) can be larger than one Temporal payload, so it is
read with the `snapshot_page` query, a page at a time (`paging.read_pages`); a query writes
nothing to the workflow's history. A workflow's result is only the run's head (ids, status,
times: `head`), enough to list the run. A worker of an earlier version answers neither: its
result and its `snapshot` query are the whole snapshot, which is read as it is (upgrade
clients before workers).

`runs()` lists a spec's runs from Temporal's list of workflows and their heads
(`listed_runs`): a run whose head cannot be read is listed from its workflow's memo, with a
status that its workflow's says (`records.unread_run`), and logged with the reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution as Execution
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    GetWorkflowExecutionHistoryReverseRequest,
)
from temporalio.client import (
    Client,
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
from pytest_harness.runtime.results import RunStatus, RunSummary
from pytest_harness.temporal.checks import RESTING
from pytest_harness.temporal.paging import read_pages
from pytest_harness.temporal.records import (
    ENDED_OUTSIDE,
    failed_outside,
    summary_of,
    unread_run,
)

__all__ = [
    "HEAD",
    "HEAD_WAIT",
    "Listing",
    "ended_outside",
    "head",
    "listed_run",
    "listed_runs",
    "memo_of",
    "read_run",
    "until_rested",
    "whole",
]

log = logging.getLogger("pytest_harness.temporal")


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
        if done is not None and not isinstance(done, dict):
            raise ExecutionError(
                f"run {run_id}: its workflow completed with a {type(done).__name__}, not a "
                "run: a workflow of another program, named HarnessRun?"
            )
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


HEAD = ("run_id", "session_id", "task", "status", "tenant", "principal", "created_at", "updated_at")
"""What a run's head holds: enough to list it."""


async def head(handle: WorkflowHandle[Any, Any], run_id: str) -> dict[str, Any]:
    """The run's head (`HEAD`): an ended run's result, else those keys of its snapshot."""
    return await read_run(handle, run_id, head_only=True, keys=HEAD)


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


# -- listing: `runs()` --------------------------------------------------------------------------

HEAD_WAIT = 10.0
"""How long `runs()` waits for one run's head (a worker answers a running run's) before it
lists the run from its workflow's memo (`records.unread_run`)."""
_AT_ONCE = 16
"""How many runs' heads `runs()` reads at once."""


class Listing:
    """What the runs of one `runs()` call share: the client, and whether a worker polls."""

    def __init__(self, client: Client, queue: str) -> None:
        self.client = client
        self.queue = queue
        self._polled: bool | None = None
        self._lock = asyncio.Lock()

    async def polled(self) -> bool:
        """Whether the server saw a worker poll the task queue lately (asked once, if needed).

        With none, a running run's head is not asked for: the server would wait about 30 s
        for a worker and then fail. One that stopped a moment ago is still seen (for some
        minutes): its runs' reads are cut short by `HEAD_WAIT`. When the server does not say,
        the heads are read.
        """
        async with self._lock:
            if self._polled is None:
                try:
                    described = await self.client.workflow_service.describe_task_queue(
                        DescribeTaskQueueRequest(
                            namespace=self.client.namespace,
                            task_queue=TaskQueue(name=self.queue),
                            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
                        )
                    )
                    self._polled = bool(described.pollers)
                except RPCError:
                    self._polled = True
            return self._polled

    async def last_event_at(self, wf: WorkflowExecution) -> float | None:
        """When the execution's workflow last recorded an event (None if the server won't say)."""
        try:
            page = await self.client.workflow_service.get_workflow_execution_history_reverse(
                GetWorkflowExecutionHistoryReverseRequest(
                    namespace=self.client.namespace,
                    execution=Execution(workflow_id=wf.id, run_id=wf.run_id),
                    maximum_page_size=1,
                )
            )
        except RPCError:
            return None
        events = page.history.events
        return events[0].event_time.ToDatetime(tzinfo=UTC).timestamp() if events else None


async def memo_of(wf: WorkflowExecution) -> dict[str, Any]:
    """The execution's memo: each value this client decodes.

    Another program may start a `HarnessRun` with a memo value in an encoding this client
    does not know: that value is left out (logged), so a memo without `spec` is not listed.
    """
    memo: dict[str, Any] = {}
    for key in wf.raw_info.memo.fields:
        try:
            memo[key] = await wf.memo_value(key)
        except Exception as exc:  # the converter's error for an unknown or broken payload
            log.warning(
                "workflow %s: its memo's %r cannot be decoded (%s: %s): read without it",
                wf.id,
                key,
                type(exc).__name__,
                exc,
            )
    return memo


async def _read_head(handle: WorkflowHandle[Any, Any], run_id: str) -> RunSummary | str | None:
    """The run's line from its head; None when its workflow is gone; else why it is unread."""
    try:
        async with asyncio.timeout(HEAD_WAIT):
            return summary_of(await head(handle, run_id))
    except UnknownRun:
        return None
    except TimeoutError:
        return (
            f"its workflow answered no read within {HEAD_WAIT:g} s (a worker answers a "
            "running run's: is one polling its task queue?)"
        )
    except ExecutionError as exc:
        return str(exc).removeprefix(f"run {run_id}: ")
    except Exception as exc:  # an answer that is not a run's head: another program's workflow
        return f"its workflow's answer is not a run's head ({type(exc).__name__}: {exc})"


async def listed_run(
    handle: WorkflowHandle[Any, Any],
    wf: WorkflowExecution,
    memo: Mapping[str, Any],
    listing: Listing | None = None,
) -> RunSummary | None:
    """A listed execution's line of `runs()`, or None for a workflow gone since it was listed.

    From the run's head; `failed` (from its memo) when its workflow ended outside the harness.
    An execution a reset closed stands for the run as it is now, its workflow's latest
    execution: the list is eventually consistent and may not show that one yet (`runs()`
    lists each workflow id once). A run whose head cannot be read (no worker answers for a
    running run, a workflow task that fails, an answer that is not a run's) is listed from
    its memo (`records.unread_run`) and logged with the reason; only an error of the server
    itself raises (`ExecutionError`).
    """
    why: str | None = None
    if wf.status not in ENDED_OUTSIDE and (listing is None or await listing.polled()):
        got = await _read_head(handle, wf.id)
        if not isinstance(got, str):
            return got
        why = got  # the list is eventually consistent: the workflow may have ended since
    try:
        latest = await handle.describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return None
        raise ExecutionError(f"run {wf.id}: Temporal answered {exc}") from None
    if latest.status in ENDED_OUTSIDE:
        return failed_outside(latest, memo)
    running = latest.status is WorkflowExecutionStatus.RUNNING
    if why is None or latest.run_id != wf.run_id:  # not read yet, or gone on in a new execution
        if running and listing is not None and not await listing.polled():
            why = (
                f"no worker has polled its task queue {latest.task_queue!r} lately, and a "
                "running run's state is read from one"
            )
        else:
            got = await _read_head(handle, wf.id)
            if not isinstance(got, str):
                return got
            why = got
    status = RunStatus.RUNNING if running else RunStatus.FAILED
    at = latest.close_time.timestamp() if latest.close_time else None
    if at is None and listing is not None:
        at = await listing.last_event_at(latest)
    log.warning(
        "run %s: listed %s from its workflow's memo (its workflow is %s): its head could "
        "not be read: %s",
        wf.id,
        status.value,
        latest.status.name if latest.status else "?",
        why,
    )
    return unread_run(latest, memo, status, at)


async def listed_runs(
    listing: Listing,
    spec: str,
    *,
    task: str | None,
    status: str | None,
    tenant: str | None,
    limit: int,
) -> list[RunSummary]:
    """The runs of `spec` on the listing's task queue, newest first (`TemporalHarness.runs`).

    Read `_AT_ONCE` at a time, each in at most `HEAD_WAIT` s (`listed_run`): one run that
    cannot be read is listed from its memo, never the end of the listing. `ExecutionError`
    when the server does not answer the list itself.
    """
    queue = listing.queue
    found: list[RunSummary] = []
    seen: set[str] = set()
    batch: list[tuple[WorkflowExecution, dict[str, Any]]] = []

    async def take() -> bool:
        """Read the batch's runs at once and keep those wanted; whether `limit` are found."""
        client = listing.client
        try:
            async with asyncio.TaskGroup() as group:
                reads = [
                    group.create_task(
                        listed_run(client.get_workflow_handle(wf.id), wf, memo, listing)
                    )
                    for wf, memo in batch
                ]
        except ExceptionGroup as failed:  # the server's error: the first one says it
            raise failed.exceptions[0] from None
        batch.clear()
        for read in reads:
            summary = read.result()
            if summary is None or (status is not None and summary.status.value != status):
                continue
            if tenant is not None and summary.tenant != tenant:
                continue
            found.append(summary)
            if len(found) >= limit:
                return True
        return False

    query = f"WorkflowType = 'HarnessRun' AND TaskQueue = '{queue}'"
    try:
        async for wf in listing.client.list_workflows(query):
            if wf.id in seen:  # a reset's earlier execution: the run is listed once
                continue
            seen.add(wf.id)
            memo = await memo_of(wf)
            if memo.get("spec") != spec or (task is not None and memo.get("task") != task):
                continue
            batch.append((wf, memo))
            if len(batch) >= _AT_ONCE and await take():
                break
        else:
            await take()
    except RPCError as exc:
        raise ExecutionError(
            f"the runs on task queue {queue!r} cannot be listed: Temporal answered {exc}"
        ) from None
    found.sort(key=lambda s: s.created_at, reverse=True)
    return found
