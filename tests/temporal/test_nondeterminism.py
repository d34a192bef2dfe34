"""A run whose workflow history no longer replays on the worker's code.

The run loop runs in the workflow, so a change to it that starts other activities or timers
than the history holds (here: a timer before the first model call) is one too.
"""

from __future__ import annotations

import asyncio
import importlib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import pytest_harness as ph
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
