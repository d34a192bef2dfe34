"""`runs()` on Temporal when a run's head cannot be read: the run is listed, never the end.

A running run's head is answered by a worker (a query): with none, the server waits about
30 s and fails; a workflow whose task fails answers no query; another program may start a
`HarnessRun` with garbage input, an undecodable memo, or complete it with another result.
Each such run is listed from its workflow's memo, `running` while its workflow runs and
`failed` once it ended, and logged with its id and why.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.api.common.v1 import Memo, Payload, WorkflowType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import StartWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

import pytest_harness as ph
from pytest_harness.temporal import reading
from tests.temporal.conftest import dev_server
from tests.temporal.helpers import WorkerProcess, cli, make_spec

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]

FIN = ph.Principal("fin", roles=("finance",))


def _queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


async def _visible(client: Client, queue: str, run_ids: set[str], within: float = 30.0) -> None:
    """Once Temporal's (eventually consistent) list of workflows shows `run_ids`."""
    deadline = time.monotonic() + within
    while True:
        query = f"TaskQueue = '{queue}'"
        if run_ids <= {wf.id async for wf in client.list_workflows(query)}:
            return
        assert time.monotonic() < deadline, f"{run_ids} never listed"
        await asyncio.sleep(0.1)


def _warned(caplog: pytest.LogCaptureFixture, run_id: str) -> str:
    said = [r.getMessage() for r in caplog.records if run_id in r.getMessage()]
    assert said, f"nothing logged about {run_id}: {caplog.text}"
    return "\n".join(said)


async def test_runs_no_worker_ever_polled_for_are_listed_running_at_once(
    tmp_path: Path, temporal_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: the first running run's query waited ~30 s for a worker, then runs() raised.
    queue = _queue()
    spec = make_spec(tmp_path, temporal_server, queue=queue)
    async with ph.load(spec) as harness:
        started = [
            await harness.submit("refunds", f"refund A-{n}", principal="ann", tenant="acme")
            for n in (1, 2)
        ]
        client = await Client.connect(temporal_server)
        await _visible(client, queue, {h.run_id for h in started})
        began = time.monotonic()
        listed = await harness.runs()
        took = time.monotonic() - began
        running = await harness.runs(status="running", tenant="acme")
        waiting = await harness.runs(status="awaiting_approval")
        shown = cli("runs", str(spec), "--task", "refunds")  # the CLI lists them, says why
        for handle in started:  # else closing the harness waits for them to rest
            await client.get_workflow_handle(handle.run_id).terminate()
    assert took < 5, f"runs() took {took:.1f} s"
    assert {(s.run_id, s.status) for s in listed} == {
        (h.run_id, ph.RunStatus.RUNNING) for h in started
    }
    assert {s.run_id for s in running} == {h.run_id for h in started}
    assert waiting == []
    for handle in started:
        (summary,) = [s for s in listed if s.run_id == handle.run_id]
        assert (summary.task, summary.session_id, summary.principal, summary.tenant) == (
            "refunds",
            handle.session_id,
            "ann",
            "acme",
        )
        assert summary.updated_at >= summary.created_at > 0
        said = _warned(caplog, handle.run_id)
        assert "listed running" in said and f"no worker has polled its task queue '{queue}'" in said
    assert shown.returncode == 0, shown.stderr
    assert all(h.run_id in shown.stdout for h in started)
    assert "no worker has polled" in shown.stderr


async def test_runs_of_a_stopped_worker_are_listed_running_within_the_wait(
    tmp_path: Path,
    temporal_server: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The server still counts a worker that stopped a moment ago as polling: each head is
    # waited for `HEAD_WAIT` at most, all at once. Before: ~30 s, then runs() raised.
    monkeypatch.setattr(reading, "HEAD_WAIT", 2.0, raising=False)
    spec = make_spec(tmp_path, temporal_server)
    async with ph.load(spec) as harness:
        with WorkerProcess(spec):
            done = await harness.run("small_refunds", "refund 5", principal="ann")
            waiting = [
                await harness.run("refunds", f"refund A-{n}", principal="ann") for n in (1, 2, 3)
            ]
        assert done.status is ph.RunStatus.COMPLETED, done.error
        assert all(w.status is ph.RunStatus.AWAITING_APPROVAL for w in waiting)
        queue = harness.spec.document.execution.task_queue
        client = await Client.connect(temporal_server)
        await _visible(client, queue, {done.run_id} | {w.run_id for w in waiting})
        began = time.monotonic()
        listed = {s.run_id: s.status for s in await harness.runs()}
        took = time.monotonic() - began
        with WorkerProcess(spec):  # readable again: the runs are listed as they are
            again = {s.run_id: s.status for s in await harness.runs()}
            for w in waiting:
                await harness.cancel(w.run_id)
    assert took < 5, f"runs() took {took:.1f} s"
    assert listed == {
        done.run_id: ph.RunStatus.COMPLETED,  # an ended run's head needs no worker
        **{w.run_id: ph.RunStatus.RUNNING for w in waiting},
    }
    assert again == {
        done.run_id: ph.RunStatus.COMPLETED,
        **{w.run_id: ph.RunStatus.AWAITING_APPROVAL for w in waiting},
    }
    for w in waiting:
        assert "answered no read within 2 s" in _warned(caplog, w.run_id)


async def test_harness_runs_another_program_started_do_not_break_the_listing(
    tmp_path: Path,
    temporal_server: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A `HarnessRun` whose input is not a run's start fails its workflow task on every
    # worker, and answers no query; memo values in an encoding this client does not know.
    # Before: runs() raised ExecutionError for the first, KeyError for the others.
    monkeypatch.setattr(reading, "HEAD_WAIT", 3.0, raising=False)
    queue = _queue()
    spec = make_spec(tmp_path, temporal_server, queue=queue)
    client = await Client.connect(temporal_server)
    memo = {"spec": "tdesk", "task": "refunds", "session": "s-1", "principal": "mallory"}
    garbage = await client.start_workflow(
        "HarnessRun",
        {"garbage": True},
        id=f"run_{uuid.uuid4().hex}",
        task_queue=queue,
        memo={**memo, "tenant": "acme"},
    )
    weird = Payload(metadata={"encoding": b"binary/unknown"}, data=b"\x00")
    unnamed, odd = f"run_{uuid.uuid4().hex}", f"run_{uuid.uuid4().hex}"
    for run_id, fields in (
        (unnamed, {"spec": weird}),  # no spec this client can read: not this spec's run
        (odd, {"spec": Payload(metadata={"encoding": b"json/plain"}, data=b'"tdesk"')}),
    ):
        await client.workflow_service.start_workflow_execution(
            StartWorkflowExecutionRequest(
                namespace=client.namespace,
                workflow_id=run_id,
                workflow_type=WorkflowType(name="HarnessRun"),
                task_queue=TaskQueue(name=queue),
                request_id=str(uuid.uuid4()),
                memo=Memo(fields={**fields, "principal": weird}),
            )
        )
    try:
        with WorkerProcess(spec):
            async with ph.load(spec) as harness:
                done = await harness.run("small_refunds", "refund 5", principal="ann")
                await _visible(client, queue, {done.run_id, garbage.id, odd, unnamed})
                listed = await harness.runs()
                theirs = await harness.runs(tenant="acme")
    finally:
        for run_id in (garbage.id, unnamed, odd):
            await client.get_workflow_handle(run_id).terminate()
    assert done.status is ph.RunStatus.COMPLETED, done.error
    rows = {s.run_id: s for s in listed}
    assert set(rows) == {done.run_id, garbage.id, odd}
    assert rows[done.run_id].status is ph.RunStatus.COMPLETED
    assert rows[garbage.id].status is rows[odd].status is ph.RunStatus.RUNNING
    assert (rows[garbage.id].principal, rows[garbage.id].tenant) == ("mallory", "acme")
    assert (rows[odd].principal, rows[odd].task) == ("", "")
    assert [s.run_id for s in theirs] == [garbage.id]
    assert "its head could not be read" in _warned(caplog, garbage.id)
    assert "'principal' cannot be decoded" in _warned(caplog, odd)
    assert "'spec' cannot be decoded" in _warned(caplog, unnamed)


@workflow.defn(name="HarnessRun")
class NotARun:
    """Another program's workflow of the same name: it completes with what is no run's head."""

    @workflow.run
    async def run(self, start: dict[str, object]) -> str:
        return "not a run"


async def test_a_harness_run_completed_by_another_program_is_listed_failed(
    tmp_path: Path, temporal_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: runs() raised TypeError (its result is no head) for every caller, and result()
    # waited ~30 s for a worker to query.
    queue = _queue()
    spec = make_spec(tmp_path, temporal_server, queue=queue)
    client = await Client.connect(temporal_server)
    memo = {"spec": "tdesk", "task": "refunds", "session": "s-1", "principal": "mallory"}
    async with Worker(
        client,
        task_queue=queue,
        workflows=[NotARun],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await client.start_workflow(
            NotARun.run, {}, id=f"run_{uuid.uuid4().hex}", task_queue=queue, memo=memo
        )
        assert await handle.result() == "not a run"
    await _visible(client, queue, {handle.id})
    async with ph.load(spec) as harness:
        (listed,) = await harness.runs()
        with pytest.raises(ph.ExecutionError, match=f"run {handle.id}: .* with a str, not a run"):
            await harness.result(handle.id)
    assert (listed.run_id, listed.status, listed.principal) == (
        handle.id,
        ph.RunStatus.FAILED,
        "mallory",
    )
    assert listed.updated_at >= listed.created_at
    assert "its workflow completed with a str, not a run" in _warned(caplog, handle.id)


async def test_a_server_gone_after_connecting_fails_the_listing_typed(tmp_path: Path) -> None:
    # Before: the list call's RPCError reached the caller as it was.
    queue = _queue()
    harness: ph.Harness | None = None
    try:
        with dev_server(tmp_path) as address:
            harness = ph.load(make_spec(tmp_path / "app", address, queue=queue))
            assert await harness.runs() == []
        with pytest.raises(ph.ExecutionError, match=f"runs on task queue '{queue}' cannot be"):
            await harness.runs()
    finally:
        if harness is not None:
            await harness.aclose()
