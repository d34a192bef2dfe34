"""Several real processes on one SQLite store: racing approvers, a busy run."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import pytest_harness as ph

APPROVER = textwrap.dedent(
    """
    import asyncio, sys, time
    import pytest_harness as ph

    async def main(spec, run_id, approval_id, who, start):
        async with ph.load(spec) as harness:
            await harness.result(run_id)  # open the store before the race starts
            time.sleep(max(0.0, start - time.time()))
            try:
                result = await harness.approve(
                    run_id, approval_id, "approve", approver=ph.Principal(who, ("finance",))
                )
            except ph.ResolutionError as exc:
                print("refused:", exc)
            else:
                print("won:", result.status.value)

    asyncio.run(main(*sys.argv[1:5], float(sys.argv[5])))
    """
)


def sqlite_app(app) -> Path:
    app.write(
        """
rules:
  - {id: R1, when: 'tool == "refund"', then: approve, approvers: [finance]}
tasks:
  t: {prompt: p, tools: [refund]}
state: {use: sqlite, path: state.db}
"""
    )
    script = "[{call: refund, args: {order_id: A-1, amount: 250}}, {say: refunded}]"
    app.spec.write_text(app.spec.read_text().replace("script: []", f"script: {script}", 1))
    return app.spec


@pytest.mark.slow
@pytest.mark.asyncio
async def test_racing_approvers_exactly_one_wins(app) -> None:
    spec = sqlite_app(app)
    async with ph.load(spec) as harness:
        waiting = await harness.run("t", "refund", principal="ann")
    approval_id = waiting.approval.approval_id
    script = app.root / "approver.py"
    script.write_text(APPROVER)
    start = time.time() + 1.0
    env = {**os.environ, "PYTHONPATH": str(app.root)}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(spec), waiting.run_id, approval_id, who, str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for who in ("fiona", "frank", "fay")
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outputs]
    lines = [out.strip() for out, _ in outputs]
    winners = [line for line in lines if line.startswith("won:")]
    assert len(winners) == 1, lines
    assert winners[0] == "won: completed"
    assert sum("already answered: approve by" in line for line in lines) == 2
    async with ph.load(spec) as harness:
        done = await harness.result(waiting.run_id)
    assert done.ok and len(done.trace.tool_calls("refund")) == 1


@pytest.mark.asyncio
async def test_resume_of_a_run_another_worker_holds_is_busy(app) -> None:
    spec = sqlite_app(app)
    async with ph.load(spec) as first, ph.load(spec) as second:
        waiting = await first.run("t", "refund", principal="ann")
        token = await first.store.acquire_lease(waiting.run_id, "someone-else", 30.0)
        with pytest.raises(ph.RunBusy, match="someone-else") as info:
            await second.resume(waiting.run_id)
        assert info.value.run_id == waiting.run_id and info.value.expires_in > 0
        await first.store.release_lease(waiting.run_id, token)
        still = await second.resume(waiting.run_id)
        assert still.status is ph.RunStatus.AWAITING_APPROVAL


@pytest.mark.asyncio
async def test_submit_returns_a_handle_at_once(app) -> None:
    spec = sqlite_app(app)
    async with ph.load(spec) as harness:
        handle = await harness.submit("t", "refund", principal="ann")
        assert handle.run_id.startswith("run_") and handle.session_id.startswith("ses_")
        result = await asyncio.wait_for(handle.result(), 10)
        assert result.run_id == handle.run_id
        assert result.status is ph.RunStatus.AWAITING_APPROVAL
