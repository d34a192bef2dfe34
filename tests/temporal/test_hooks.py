"""`harness_checkpoint` hooks on Temporal: each boundary told once, though a worker replays it."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

import pytest_harness as ph
from tests.temporal.helpers import WorkerProcess, make_spec, taken_over

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]

PROBE = textwrap.dedent(
    """
    import json, os

    from pytest_harness.hookspecs import hookimpl


    @hookimpl
    def harness_checkpoint(run_id, status, phase):
        line = {"run_id": run_id, "status": status, "phase": phase, "pid": os.getpid()}
        with open(os.environ["PROBE_LOG"], "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\\n")
    """
)


def probe_env(root: Path) -> dict[str, str]:
    """A worker's environment with the probe plugin installed (found by its entry point)."""
    site = root / "site"
    info = site / "hook_probe-1.0.dist-info"
    info.mkdir(parents=True)
    (site / "hook_probe.py").write_text(PROBE, encoding="utf-8")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hook-probe\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest_harness]\nprobe = hook_probe\n")
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "PROBE_LOG": str(root / "hooks.jsonl")}


def told(root: Path, run_id: str) -> list[dict[str, Any]]:
    lines = (root / "hooks.jsonl").read_text(encoding="utf-8").splitlines()
    return [line for line in map(json.loads, lines) if line["run_id"] == run_id]


async def test_a_worker_replaying_a_run_does_not_tell_the_hooks_again(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = make_spec(tmp_path, temporal_server)
    env = probe_env(tmp_path)
    async with ph.load(spec) as harness:
        with WorkerProcess(spec, env=env):  # one worker from start to end: what a run tells
            clean = await harness.run("small_refunds", "refund A-1", principal="ann")
        assert clean.status is ph.RunStatus.COMPLETED, clean.error
        # the first worker dies in the tool; the second replays the history and goes on
        expected = [(line["phase"], line["status"]) for line in told(tmp_path, clean.run_id)]
        dispatched = expected.index(("tool.dispatched", "running")) + 1

        def heard(run_id: str) -> bool:  # the hook thread caught up before the kill
            return len(told(tmp_path, run_id)) >= dispatched

        moved = await taken_over(harness, spec, "small_refunds", "refund A-2", env, heard)
    assert moved.status is ph.RunStatus.COMPLETED, moved.error
    assert expected[0] == ("run.started", "running") and expected[-1][1] == "completed"
    lines = told(tmp_path, moved.run_id)
    assert [(line["phase"], line["status"]) for line in lines] == expected
    assert len({line["pid"] for line in lines}) == 2  # told by the first worker, then the second
