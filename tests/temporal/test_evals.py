"""Online evals grade Temporal runs once, when they end, into the `state:` store."""

from __future__ import annotations

from pathlib import Path

import pytest

import pytest_harness as ph
from tests.temporal.helpers import WorkerProcess, cli, make_spec

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]

GRADERS = """
import os
from pathlib import Path


def counted(result) -> bool:
    \"\"\"Passes; notes each time it grades a run, in the worker's effects folder.\"\"\"
    with (Path(os.environ["EFFECTS"]) / "graded.log").open("a") as log:
        log.write(f"{result.run_id} {os.getpid()}\\n")
    return True


def broken(result) -> bool:
    raise RuntimeError("the grader broke")
"""

EVALS = """evals:
  online:
    sample: 1
    graders:
      - {id: polite, check: regex, pattern: '(?i)refunded', tasks: [refunds, small_refunds]}
      - {id: counted, check: callable, call: 'tgraders:counted', tasks: [refunds, small_refunds]}
      - {id: broken, check: callable, call: 'tgraders:broken', tasks: [small_refunds]}
"""


def evals_spec(folder: Path, address: str) -> Path:
    """`make_spec`'s desk on a shared sqlite store, with graders for the refund tasks."""
    spec = make_spec(folder, address)
    (folder / "tgraders.py").write_text(GRADERS)
    text = spec.read_text().replace("state: {use: memory,", "state: {use: sqlite, path: state.db,")
    spec.write_text(text + EVALS)
    return spec


def graded_log(folder: Path) -> list[str]:
    log = folder / "effects" / "graded.log"
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


async def test_ended_runs_are_graded_once_into_the_state_store(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = evals_spec(tmp_path, temporal_server)
    worker = WorkerProcess(spec)
    try:
        async with ph.load(spec) as harness:
            done = await harness.run("small_refunds", "refund A-1", principal="ann")
            assert done.status is ph.RunStatus.COMPLETED, done.error
            charged = await harness.run("charges", "charge A-1", principal="ann")
            assert charged.ok, charged.error
            waiting = await harness.run("refunds", "refund A-2", principal="ann")
            assert waiting.status is ph.RunStatus.AWAITING_APPROVAL
            await harness.flush_evals()  # the waiting run is graded when it ends
            early = {(s.run_id, s.grader) for s in await harness.samples(limit=None)}
            assert waiting.approval is not None
            answered = cli(
                "approve",
                waiting.run_id,
                waiting.approval.approval_id,
                "approve",
                "--spec",
                str(spec),
                "--approver",
                "fin",
                "--role",
                "finance",
            )
            assert answered.returncode == 0, answered.stderr
            # reading an ended run, in this process or another, grades nothing again
            for _ in range(3):
                assert (await harness.result(done.run_id)).ok
            await harness.runs()
        # `aclose()` (the end of `async with`) waited for the grade of the approved run
        async with ph.load(spec) as reader:
            samples = await reader.samples(limit=None)
        report = cli("eval", "report", str(spec))
        gate = cli("eval", "report", str(spec), "--min-pass", "0.9")
    finally:
        worker.stop()
    assert early == {
        (done.run_id, "polite"),
        (done.run_id, "counted"),
        (done.run_id, "broken"),
    }
    by = {(s.run_id, s.grader): s for s in samples}
    assert set(by) == early | {(waiting.run_id, "polite"), (waiting.run_id, "counted")}
    assert by[done.run_id, "polite"].passed and by[done.run_id, "polite"].score == 1.0
    assert by[done.run_id, "polite"].task == "small_refunds"
    broken = by[done.run_id, "broken"]
    assert not broken.passed and broken.score is None
    assert broken.error is not None and "the grader broke" in broken.error
    assert by[waiting.run_id, "counted"].task == "refunds"
    assert sorted(graded_log(tmp_path)) == sorted([done.run_id, waiting.run_id])
    assert report.returncode == 0, report.stderr
    for grader in ("polite", "counted", "broken"):
        assert grader in report.stdout
    assert gate.returncode == 1 and "broken" in gate.stdout, gate.stdout + gate.stderr


async def test_a_grader_that_fails_never_changes_the_run(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = evals_spec(tmp_path, temporal_server)
    (tmp_path / "tgraders.py").write_text(
        GRADERS.replace("return True", "raise RuntimeError('down')")
    )
    worker = WorkerProcess(spec)
    try:
        async with ph.load(spec) as harness:
            done = await harness.run("small_refunds", "refund A-1", principal="ann")
            await harness.flush_evals()
            after = await harness.result(done.run_id)
            samples = await harness.samples(limit=None)
    finally:
        worker.stop()
    assert done.status is after.status is ph.RunStatus.COMPLETED
    assert after.output == "Refunded."
    assert {s.grader: s.passed for s in samples} == {
        "polite": True,
        "counted": False,
        "broken": False,
    }
    assert all(s.error for s in samples if s.grader != "polite")
