"""A run whose workflow history no longer replays on the worker's code.

The run loop runs in the workflow, so a change to it that starts other activities or timers
than the history holds (here: a timer before the first model call) is one too, and so is one
that ends the run where the history goes on.
"""

from __future__ import annotations

import asyncio
import importlib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import WorkflowExecutionStatus

import pytest_harness as ph
import pytest_harness.temporal.dispatch as dispatch
from pytest_harness.temporal.client import connect
from tests.temporal.helpers import WorkerProcess, make_spec

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]


async def _changed_step(self: Any, op: dict[str, Any]) -> None:
    # "new code": a different first activity than the one the run's history has
    from temporalio import workflow

    await workflow.execute_activity(
        "harness_renamed_step", op, start_to_close_timeout=timedelta(seconds=5)
    )


async def _waiting_first(self: Any) -> Any:
    # "new engine code": the run loop, which runs in the workflow, now waits before it starts
    await asyncio.sleep(0.01)
    return await _REPLACED["_check_input"](self)


_REPLACED: dict[str, Any] = {}
"""The code a test replaced, by name."""


@pytest.mark.parametrize(
    ("owner", "name", "changed"),
    [
        ("pytest_harness.temporal.workflow:HarnessRun", "_step", _changed_step),
        ("pytest_harness.runtime.engine:Driver", "_check_input", _waiting_first),
    ],
    ids=["workflow", "run-loop"],
)
async def test_history_that_no_longer_replays_is_an_execution_error_naming_the_run(
    tmp_path: Path,
    temporal_server: str,
    monkeypatch: pytest.MonkeyPatch,
    owner: str,
    name: str,
    changed: Any,
) -> None:
    spec = make_spec(tmp_path, temporal_server)
    worker = WorkerProcess(spec)
    try:
        async with ph.load(spec) as harness:
            waiting = await harness.run("refunds", "refund A-1", principal="ann")
    finally:
        worker.stop()
    assert waiting.approval is not None
    module, _, cls = owner.partition(":")
    target = getattr(importlib.import_module(module), cls)
    _REPLACED[name] = getattr(target, name)
    monkeypatch.setattr(target, name, changed)
    async with ph.load(spec) as harness:
        changed = ph.temporal.Worker(harness)
        hosting = asyncio.ensure_future(changed.run())
        try:
            fin = ph.Principal("fin", roles=("finance",))
            with pytest.raises(ph.ExecutionError) as caught:
                async with asyncio.timeout(30):
                    await harness.approve(
                        waiting.run_id, waiting.approval.approval_id, "approve", approver=fin
                    )
            with pytest.raises(ph.ExecutionError) as again:
                await harness.result(waiting.run_id)
        finally:
            changed.stop()
            await hosting
    for error in (caught.value, again.value):
        assert waiting.run_id in str(error)
        assert "Nondeterminism" in str(error)


def _two_approvals(tmp_path: Path, address: str) -> Path:
    """A spec whose refunds run asks for two approvals (two refunds over 100)."""
    spec = make_spec(tmp_path, address)
    second = '- {call: refund, args: {order_id: A-2, amount: 300}}\n      - say: "Refunded."'
    spec.write_text(spec.read_text().replace('- say: "Refunded."', second, 1))
    return spec


async def _refusing(handoff: Any, snap: Any, **_: Any) -> Any:
    # "new code": every tool call ends the run, where the history ran the first one
    raise dispatch.RunFails("Refused", "the new code refuses the call")


async def test_new_code_that_ends_the_run_inside_an_update_fails_its_workflow(
    tmp_path: Path, temporal_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first approval's update ran the refund in the history; the new code ends the run
    # in that update instead. Its workflow fails (it no longer retries its task forever), and
    # the next approval says why at once.
    spec = _two_approvals(tmp_path, temporal_server)
    fin = ph.Principal("fin", roles=("finance",))
    with WorkerProcess(spec):
        async with ph.load(spec) as harness:
            first = await harness.run("refunds", "refund A-1 and A-2", principal="ann")
            assert first.approval is not None
            second = await harness.approve(
                first.run_id, first.approval.approval_id, "approve", approver=fin
            )
    assert second.approval is not None and second.approval.args["order_id"] == "A-2"
    monkeypatch.setattr(dispatch, "call_tool", _refusing)
    async with ph.load(spec) as harness:
        changed = ph.temporal.Worker(harness)
        hosting = asyncio.ensure_future(changed.run())
        try:
            with pytest.raises(ph.ExecutionError) as caught:
                async with asyncio.timeout(30):
                    await harness.approve(
                        second.run_id, second.approval.approval_id, "approve", approver=fin
                    )
            assert second.run_id in str(caught.value)
            assert "Nondeterminism" in str(caught.value)  # before: "update was aborted", 8 s
            with pytest.raises(ph.ExecutionError, match=f"{second.run_id}.*Nondeterminism"):
                await harness.result(second.run_id)
            handle = (await connect(harness.spec)).get_workflow_handle(second.run_id)
            assert (await handle.describe()).status is WorkflowExecutionStatus.FAILED
            listed = {row.run_id: row.status for row in await harness.runs()}
        finally:
            changed.stop()
            await hosting
    assert listed == {second.run_id: ph.RunStatus.FAILED}


async def test_a_run_started_before_its_workflow_ended_apart_still_replays(
    tmp_path: Path, temporal_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A run of the previous version (no `harness-end-apart` patch) completed by an update;
    # a worker of this version replays its history (the query of a closed workflow) as it is.
    spec = make_spec(tmp_path, temporal_server)
    fin = ph.Principal("fin", roles=("finance",))
    with monkeypatch.context() as old:
        old.setattr(workflow, "patched", lambda patch_id: False)
        async with ph.load(spec) as harness:
            before = ph.temporal.Worker(harness)
            hosting = asyncio.ensure_future(before.run())
            try:
                waiting = await harness.run("refunds", "refund A-1", principal="ann")
                assert waiting.approval is not None
                done = await harness.approve(
                    waiting.run_id, waiting.approval.approval_id, "approve", approver=fin
                )
            finally:
                before.stop()
                await hosting
    assert done.status is ph.RunStatus.COMPLETED
    async with ph.load(spec) as harness:
        handle = (await connect(harness.spec)).get_workflow_handle(waiting.run_id)
        history = await handle.fetch_history()
        assert not any(e.HasField("marker_recorded_event_attributes") for e in history.events)
        now = ph.temporal.Worker(harness)
        hosting = asyncio.ensure_future(now.run())
        try:
            async with asyncio.timeout(30):
                page = await handle.query("snapshot_page", {"offset": 0}, result_type=dict)
        finally:
            now.stop()
            await hosting
    assert '"status":"completed"' in page["text"]
