"""What happens on bad input: no server, a worker for another spec, refused answers."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import pytest_harness as ph
from tests.temporal.helpers import WorkerProcess, cli, make_spec

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


async def test_unreachable_server_is_a_clear_error(tmp_path: Path) -> None:
    address = _closed_port()
    spec = make_spec(tmp_path, address)
    harness = ph.load(spec)
    with pytest.raises(ph.ExecutionError, match=f"cannot reach the Temporal server at {address}"):
        await harness.run("refunds", "refund A-1", principal="ann")
    await harness.aclose()
    worker = cli("worker", str(spec))
    assert worker.returncode == 2
    assert f"execution.address: cannot reach the Temporal server at {address}" in worker.stderr


async def test_run_for_another_spec_digest_fails_naming_both_unless_accepted(
    tmp_path: Path, temporal_server: str
) -> None:
    ours = make_spec(tmp_path / "ours", temporal_server, queue="shared-q")
    theirs = make_spec(tmp_path / "theirs", temporal_server, queue="shared-q", prompt="Other.")
    async with ph.load(ours) as mine, ph.load(theirs) as other:
        assert mine.spec.digest != other.spec.digest
        worker = WorkerProcess(theirs)
        try:
            failed = await mine.run("small_refunds", "refund A-1", principal="ann")
        finally:
            worker.stop()
        assert failed.status is ph.RunStatus.FAILED
        assert failed.error is not None
        assert failed.error["type"] == "SpecDigestMismatch"
        assert mine.spec.digest in failed.error["message"]
        assert other.spec.digest in failed.error["message"]
        assert "--accept" in failed.error["message"]
        worker = WorkerProcess(theirs, "--accept", mine.spec.digest)
        try:
            accepted = await mine.run("small_refunds", "refund A-1", principal="ann")
        finally:
            worker.stop()
        assert accepted.status is ph.RunStatus.COMPLETED, accepted.error


async def test_refused_answers_raise_like_locally_and_never_reach_history(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = make_spec(tmp_path, temporal_server)
    with WorkerProcess(spec):
        async with ph.load(spec) as harness:
            waiting = await harness.run("refunds", "refund A-1", principal="ann", tenant="t1")
            assert waiting.approval is not None
            run_id, approval = waiting.run_id, waiting.approval.approval_id
            with pytest.raises(ph.ApprovalDenied, match="needs one of the roles finance"):
                await harness.approve(run_id, approval, "approve", approver="bob")
            ann = ph.Principal("ann", roles=("finance",))
            with pytest.raises(ph.ApprovalDenied, match="may not approve its own request"):
                await harness.approve(run_id, approval, "approve", approver=ann)
            outsider = ph.Principal("eve", roles=("finance",), tenant="t2")
            with pytest.raises(ph.ApprovalDenied, match="tenant"):
                await harness.approve(run_id, approval, "approve", approver=outsider)
            with pytest.raises(ph.ResolutionError, match="has no approval 'apr_nope'"):
                await harness.approve(run_id, "apr_nope", "approve", approver=outsider)
            fin = ph.Principal("fin", roles=("finance",), tenant="t1")
            declined = await harness.approve(run_id, approval, "decline", approver=fin)
            assert declined.status is ph.RunStatus.COMPLETED
            with pytest.raises(ph.ResolutionError):
                await harness.approve(run_id, approval, "approve", approver=fin)
            history = await harness._handle(run_id)
            events = [e async for e in history.fetch_history_events()]
    accepted = [
        e for e in events if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]
    # the run's own `wait` and the one decline: none of the refused answers
    names = [
        e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        for e in accepted
    ]
    assert names.count("approve") == 1
    assert (tmp_path / "effects" / "applied.log").exists() is False


async def test_unknown_execution_is_a_spec_error_naming_the_key(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "127.0.0.1:1")
    spec.write_text(spec.read_text().replace("use: temporal", "use: temporl"))
    with pytest.raises(ph.SpecError, match=r"execution\.use"):
        ph.load(spec)
    spec.write_text(spec.read_text().replace("use: temporl", "use: temporal, adress: x"))
    with pytest.raises(ph.SpecError, match="adress"):
        ph.load(spec)
