"""A worker SIGKILLed in the middle of a tool call, and a new worker finishing the run."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import pytest_harness as ph
from tests.temporal.helpers import WorkerProcess, make_spec, taken_over, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]


def _calls(folder: Path) -> list[list[str]]:
    return [line.split() for line in (folder / "effects" / "calls.log").read_text().splitlines()]


async def test_idempotent_call_is_retried_with_the_same_key_and_takes_effect_once(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = make_spec(tmp_path, temporal_server)
    async with ph.load(spec) as harness:
        result = await taken_over(harness, spec, "small_refunds", "refund A-1")
    assert result.status is ph.RunStatus.COMPLETED, result.error
    calls = _calls(tmp_path)
    assert [c[0] for c in calls] == ["refund", "refund"]
    assert calls[0][1] == calls[1][1]  # the same execution key
    assert [c[2] for c in calls] == ["1", "2"]  # attempt 1 (lost), attempt 2
    assert calls[0][3] != calls[1][3]  # in two worker processes
    assert (tmp_path / "effects" / "applied.log").read_text().split() == [calls[0][1]]
    (outcome,) = [d for d in result.trace if d.kind == "tool"]
    assert outcome.detail["outcome"] == "ok"


async def test_lost_manual_calls_become_uncertain_and_resolve_finishes_the_runs(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = make_spec(tmp_path, temporal_server)
    first = WorkerProcess(spec, env={"HANG_FIRST": "1"})
    second = None
    try:
        async with ph.load(spec) as harness:
            handles = [
                await harness.submit("charges", f"charge A-{i}", principal="ann") for i in (1, 2)
            ]
            wait_for(tmp_path / "effects", "hanging-*", count=2)
            first.kill()
            second = WorkerProcess(spec)
            waiting = [await h.result() for h in handles]
            keys = []
            for result in waiting:
                assert result.status is ph.RunStatus.AWAITING_RESOLUTION
                (pending,) = result.pending
                assert (pending.call.name, pending.status) == ("charge", "uncertain")
                keys.append(pending.execution_key)
            run_a, run_b = (h.run_id for h in handles)
            with pytest.raises(ph.ResolutionError, match="exactly one"):
                await harness.resolve(run_a, keys[0])
            with pytest.raises(ph.UnknownExecutionKey):
                await harness.resolve(run_a, "exk_nope", abort=True)
            # two operators at once: one resolution is applied, the other refused
            answers = await asyncio.gather(
                harness.resolve(run_a, keys[0], result="charged (checked by hand)", resolver="ops"),
                harness.resolve(run_a, keys[0], abort=True, resolver="bob"),
                return_exceptions=True,
            )
            refused = [a for a in answers if isinstance(a, ph.ResolutionError)]
            (by_hand,) = [a for a in answers if isinstance(a, ph.RunResult)]
            assert len(refused) == 1, answers
            retried = await harness.resolve(run_b, keys[1], retry=True, resolver="ops")
    finally:
        first.stop()
        if second is not None:
            second.stop()
    for done in (by_hand, retried):
        assert done.status is ph.RunStatus.COMPLETED, done.error
        assert done.output == "Charged."
    (resolved,) = [d for d in by_hand.trace if d.kind == "tool"]
    assert resolved.detail["outcome"] in ("resolved", "aborted")
    calls = _calls(tmp_path)
    # run a: never invoked again; run b: invoked again with the same key, attempt 2
    assert sorted((c[1], c[2]) for c in calls) == sorted(
        [(keys[0], "1"), (keys[1], "1"), (keys[1], "2")]
    )
