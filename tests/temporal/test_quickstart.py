from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import pytest_harness as ph
from tests.temporal.helpers import WorkerProcess, cli, make_spec

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]


async def test_run_waits_for_approval_answered_from_another_process(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = make_spec(tmp_path, temporal_server)
    worker = WorkerProcess(spec)
    try:
        async with ph.load(spec) as harness:
            result = await harness.run("refunds", "refund A-1", principal="ann")
            assert result.status is ph.RunStatus.AWAITING_APPROVAL
            pending = result.approval
            assert pending is not None
            answered = cli(
                "approve",
                result.run_id,
                pending.approval_id,
                "approve",
                "--spec",
                str(spec),
                "--approver",
                "fin",
                "--role",
                "finance",
            )
            assert answered.returncode == 0, answered.stderr
            assert "completed" in answered.stdout
            done = await harness.result(result.run_id)
            assert done.status is ph.RunStatus.COMPLETED
            assert done.output == "Refunded."
            assert [d.kind for d in done.trace].count("approval") == 1
            summaries = await harness.runs()
            assert [s.run_id for s in summaries] == [result.run_id]
            incident = await harness.export(
                result.run_id,
                tmp_path / "incident.hx",
                policy=ph.ExportPolicy(include_payloads=True),
            )
            verified = ph.verify_archive(incident)
            assert verified.valid and verified.complete, verified.issues
            kinds = [r["kind"] for r in ph.playback(incident).records]
            assert [k for k in kinds if k.startswith("approval.")] == [
                "approval.requested",
                "approval.answered",
            ]
            exported = await harness.export(result.run_id, tmp_path / "golden.yaml")
            report = await harness.replay(exported)
            assert not report.differences and report.diverged is None, report
    finally:
        worker.stop()
    applied = (tmp_path / "effects" / "applied.log").read_text().split()
    assert len(applied) == 1


async def test_deadline_is_paused_while_the_run_waits_for_approval(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = make_spec(tmp_path, temporal_server)
    spec.write_text(spec.read_text().replace("tools: [refund]}", "tools: [refund], deadline: 2s}"))
    worker = WorkerProcess(spec)
    try:
        async with ph.load(spec) as harness:
            waiting = await harness.run("refunds", "refund A-1", principal="ann")
            assert waiting.approval is not None
            await asyncio.sleep(2.5)  # longer than the deadline, spent waiting for a person
            fin = ph.Principal("fin", roles=("finance",))
            done = await harness.approve(
                waiting.run_id, waiting.approval.approval_id, "approve", approver=fin
            )
    finally:
        worker.stop()
    assert done.status is ph.RunStatus.COMPLETED, (done.limit, done.error)


async def test_a_session_carries_the_conversation_of_its_completed_runs(
    tmp_path: Path, temporal_server: str
) -> None:
    """A run started the moment the session's last run completed sees it (no visibility lag)."""
    spec = make_spec(tmp_path, temporal_server)
    worker = WorkerProcess(spec)
    try:
        async with ph.load(spec) as harness, ph.load(spec) as elsewhere:
            first = await harness.run("small_refunds", "refund A-1", principal="ann")
            assert first.ok, first.error
            # at once, from another harness (nothing shared but the server)
            second = await elsewhere.run(
                "small_refunds", "and A-2?", principal="ann", session_id=first.session_id
            )
            third = await harness.run(
                "small_refunds", "and A-3?", principal="ann", session_id=first.session_id
            )
            # two runs started at the same moment in one session both start, one after another
            racing = await asyncio.gather(
                *(
                    harness.submit(
                        "small_refunds", f"and B-{i}?", principal="ann", session_id="ses_race"
                    )
                    for i in range(3)
                )
            )
            raced = [await h.result() for h in racing]
            alone = await harness.run("small_refunds", "refund A-3", principal="ann")
            recorded = [await harness.recording(r.run_id) for r in (second, third)]
            fresh = await harness.recording(alone.run_id)
    finally:
        worker.stop()
    assert second.session_id == third.session_id == first.session_id
    contents = [[m.get("content") for m in r.history] for r in recorded]
    assert contents[0][0] == "refund A-1" and contents[0][-1] == "Refunded."
    assert contents[1][: len(contents[0])] == contents[0]
    assert contents[1][len(contents[0])] == "and A-2?" and contents[1][-1] == "Refunded."
    assert fresh.history == ()
    assert len({r.run_id for r in raced}) == 3
    assert all(r.ok and r.session_id == "ses_race" for r in raced), raced
