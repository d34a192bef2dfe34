"""Runs whose workflow ends without the harness: terminated by hand, or by the server's limit.

The server terminates a workflow whose history outgrows `limit.historySize.error` (50 MB by
default; 4 MB on this module's own dev server). Such a run is read as a typed
`ExecutionError` that says why, and `runs()` lists it as `failed` instead of failing whole.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.client import WorkflowExecution as TemporalExecution

import pytest_harness as ph
from pytest_harness.temporal.reading import listed_run
from tests.temporal.conftest import dev_server
from tests.temporal.helpers import WorkerProcess
from tests.temporal.test_payloads import big_spec

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]


async def listed_at_rest(harness: ph.Harness, within: float = 60.0) -> list[ph.RunSummary]:
    """`runs()` once it lists a run and none is `running` (a reset run replays to where it
    waited)."""
    deadline = time.monotonic() + within
    while True:
        listed = await harness.runs()
        if listed and all(s.status is not ph.RunStatus.RUNNING for s in listed):
            return listed
        if time.monotonic() > deadline:
            return listed
        await asyncio.sleep(0.2)


@pytest.fixture(scope="module")
def small_history_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A dev server that terminates a workflow once its history is over 4 MB."""
    with dev_server(
        tmp_path_factory.mktemp("temporal-small-history"),
        "--dynamic-config-value",
        "limit.historySize.error=4000000",
        "--dynamic-config-value",
        "limit.historySize.warn=2000000",
    ) as address:
        yield address


@pytest.mark.timeout(240)
async def test_a_run_whose_history_outgrows_the_server_limit_fails_typed_and_is_listed(
    tmp_path: Path, small_history_server: str
) -> None:
    spec = big_spec(tmp_path, small_history_server, 700_000, calls=8)  # 5.6 MB of results
    with WorkerProcess(spec):
        async with ph.load(spec) as harness:
            handle = await harness.submit("t", "go", principal="ann", tenant="acme")
            with pytest.raises(ph.ExecutionError) as waited:
                await handle.result()
            with pytest.raises(ph.ExecutionError) as read:
                await harness.result(handle.run_id)
            listed = await harness.runs()
            failed = await harness.runs(status="failed", tenant="acme")
            none = await harness.runs(status="completed")
    for error in (waited.value, read.value):
        message = str(error)
        assert f"run {handle.run_id}: the Temporal server terminated its workflow" in message
        assert "history size exceeds limit" in message.lower()
        assert "limit.historySize.error" in message
    assert [(s.run_id, s.status) for s in listed] == [(handle.run_id, ph.RunStatus.FAILED)]
    (summary,) = failed
    assert (summary.task, summary.session_id, summary.principal, summary.tenant) == (
        "t",
        handle.session_id,
        "ann",
        "acme",
    )
    assert summary.updated_at >= summary.created_at > 0
    assert none == []


@pytest.mark.timeout(240)
async def test_a_run_terminated_by_hand_names_the_reason_and_the_rest_are_still_listed(
    tmp_path: Path, small_history_server: str
) -> None:
    spec = big_spec(tmp_path, small_history_server, 7, calls=1)  # n == 7 needs finance
    with WorkerProcess(spec):
        async with ph.load(spec) as harness:
            waiting = await harness.run("t", "go", principal="ann")
            other = await harness.run("t", "again", principal="bob")
            assert waiting.status is other.status is ph.RunStatus.AWAITING_APPROVAL
            client = await Client.connect(small_history_server)
            await client.get_workflow_handle(waiting.run_id).terminate(reason="ops: stuck")
            with pytest.raises(ph.ExecutionError, match=r"TERMINATED \(reason: 'ops: stuck'\)"):
                await harness.result(waiting.run_id)
            still_waiting = await harness.runs(status="awaiting_approval")
            failed = await harness.runs(status="failed")
    assert [s.run_id for s in still_waiting] == [other.run_id]
    assert [(s.run_id, s.principal, s.tenant) for s in failed] == [(waiting.run_id, "ann", None)]


@pytest.mark.timeout(240)
async def test_a_reset_run_is_listed_once_with_its_live_status(
    tmp_path: Path, small_history_server: str
) -> None:
    # `temporal workflow reset` closes the execution as TERMINATED and goes on in a new one
    # under the same id: the closed one is not a failed run of its own
    spec = big_spec(tmp_path, small_history_server, 7, calls=1)
    with WorkerProcess(spec):
        async with ph.load(spec) as harness:
            waiting = await harness.run("t", "go", principal="ann")
            assert waiting.status is ph.RunStatus.AWAITING_APPROVAL
            client = await Client.connect(small_history_server)
            handle = client.get_workflow_handle(waiting.run_id)
            completed = [
                e.event_id
                async for e in handle.fetch_history_events()
                if e.HasField("workflow_task_completed_event_attributes")
            ]
            old = await handle.describe()
            await client.workflow_service.reset_workflow_execution(
                ResetWorkflowExecutionRequest(
                    namespace=client.namespace,
                    workflow_execution=WorkflowExecution(
                        workflow_id=waiting.run_id, run_id=old.run_id
                    ),
                    reason="ops: replay from the start",
                    workflow_task_finish_event_id=completed[0],
                    request_id=str(uuid.uuid4()),
                )
            )
            settled = await listed_at_rest(harness)
            failed = await harness.runs(status="failed")
            # the list may show the closed execution before the new one: it stands for the run
            closed = await closed_execution(client, waiting.run_id, old.run_id)
            standing = await listed_run(handle, closed, await closed.memo())
    assert [(s.run_id, s.status) for s in settled] == [
        (waiting.run_id, ph.RunStatus.AWAITING_APPROVAL)
    ]
    assert failed == []
    assert standing is not None
    assert (standing.run_id, standing.status) == (
        waiting.run_id,
        ph.RunStatus.AWAITING_APPROVAL,
    )


async def closed_execution(
    client: Client, workflow_id: str, run_id: str, within: float = 60.0
) -> TemporalExecution:
    """The listed (closed) execution `run_id` of `workflow_id`, once the list shows it."""
    deadline = time.monotonic() + within
    query = f"WorkflowId = '{workflow_id}' AND RunId = '{run_id}'"
    while True:
        async for wf in client.list_workflows(query):
            if wf.status is not WorkflowExecutionStatus.RUNNING:
                return wf
        assert time.monotonic() < deadline, f"{run_id} never listed as closed"
        await asyncio.sleep(0.2)
