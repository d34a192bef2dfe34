"""`.hx` incident archives as replay items: one exported with payloads is a regression test;
a metadata-only one is an error item that says how to export one that replays."""

from __future__ import annotations

import asyncio

import pytest_harness as ph

from .conftest import Project

FIONA = ph.Principal("fiona", ("finance",))


async def export_incidents(project: Project) -> str:
    """Run the big refund on the project's spec, recorded; export it twice into incidents/."""
    folder = project.path / "incidents"
    async with ph.load(project.spec, record=True, store="memory") as harness:
        waiting = await harness.run("orders", "Refund $250 on A-1", principal="ann")
        done = await harness.approve(
            waiting.run_id, waiting.approval.approval_id, "approve", approver=FIONA
        )
        policy = ph.ExportPolicy(include_payloads=True, include_artifacts=True)
        await harness.export(done.run_id, folder / "refund.hx", policy=policy)
        await harness.export(done.run_id, folder / "metadata.hx")
    return done.run_id


def test_incident_archives_replay_as_regression_tests(project: Project) -> None:
    project.tests()
    asyncio.run(export_incidents(project))
    result = project.run("--replay-recordings", "incidents")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of replay incidents/metadata.hx*",
            "cannot replay incidents/metadata.hx: *metadata.hx has no payloads to replay: it was "
            "exported metadata-only*--include-payloads*",
            "*2 recordings replayed: 1 same, 0 drifted, 0 diverged, 1 error",
        ]
    )
    # a stricter rule drifts the incident like any golden file
    project.change_spec("args.amount > 100", "args.amount > 1000")
    result = project.run("--replay-recordings", "incidents/refund.hx")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*changed: recording incidents/refund.hx (orders)*", "*never rewritten*"]
    )
    before = (project.path / "incidents" / "refund.hx").read_bytes()
    result = project.run("--update-recordings", "incidents/refund.hx")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*never rewritten (not updated)*"])
    assert (project.path / "incidents" / "refund.hx").read_bytes() == before
