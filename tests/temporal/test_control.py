"""Pause, cancel, streams and two workers sharing one task queue, on Temporal."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

import pytest_harness as ph
from tests.temporal.helpers import WorkerProcess, make_spec

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]


async def test_two_workers_on_one_queue_share_the_runs(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = make_spec(tmp_path, temporal_server)
    workers = [WorkerProcess(spec), WorkerProcess(spec)]
    try:
        async with ph.load(spec) as harness:
            handles = [
                await harness.submit("small_refunds", f"refund {i}", principal="ann")
                for i in range(6)
            ]
            results = await asyncio.gather(*(h.result() for h in handles))
    finally:
        for worker in workers:
            worker.stop()
    assert {r.status for r in results} == {ph.RunStatus.COMPLETED}
    pids = {
        line.split()[3] for line in (tmp_path / "effects" / "calls.log").read_text().splitlines()
    }
    assert len((tmp_path / "effects" / "applied.log").read_text().split()) == 6
    assert pids  # every call ran in one of the two workers
    assert pids <= {str(w.proc.pid) for w in workers}


async def test_pause_resume_and_cancel_a_waiting_run(tmp_path: Path, temporal_server: str) -> None:
    spec = make_spec(tmp_path, temporal_server)
    worker = WorkerProcess(spec)
    try:
        async with ph.load(spec) as harness:
            key = f"k-{uuid.uuid4().hex}"
            waiting = await harness.run(
                "refunds", "refund A-1", principal="ann", idempotency_key=key
            )
            assert waiting.status is ph.RunStatus.AWAITING_APPROVAL
            paused = await harness.pause(waiting.run_id)
            assert paused.status is ph.RunStatus.PAUSED
            resumed = await harness.resume(waiting.run_id)
            assert resumed.status is ph.RunStatus.AWAITING_APPROVAL
            cancelled = await harness.cancel(waiting.run_id)
            assert cancelled.status is ph.RunStatus.CANCELLED
            events = [e.kind async for e in harness.stream(waiting.run_id)]
            assert events[0] == "run_started"
            assert "approval_required" in events
            assert events[-1] == "run_result"
            again = await harness.cancel(waiting.run_id)
            assert again.status is ph.RunStatus.CANCELLED
            same = await harness.run("refunds", "refund A-1", principal="ann", idempotency_key=key)
            assert (same.run_id, same.status) == (waiting.run_id, ph.RunStatus.CANCELLED)
            with pytest.raises(ph.UnknownRun):
                await harness.result("run_" + "0" * 32)
            other = await harness.run("refunds", "refund A-2", principal="ann")
            await harness.pause(other.run_id)
            assert other.approval is not None
            fin = ph.Principal("fin", roles=("finance",))
            answered = await harness.approve(
                other.run_id, other.approval.approval_id, "approve", approver=fin
            )
            assert answered.status is ph.RunStatus.PAUSED  # takes the answer, stays paused
            finished = await harness.resume(other.run_id)
            assert finished.status is ph.RunStatus.COMPLETED, finished.error
    finally:
        worker.stop()
    assert len((tmp_path / "effects" / "calls.log").read_text().splitlines()) == 1
