"""Temporal runs exported as `.hx` incident archives, verified, played back and replayed."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import pytest_harness as ph
from tests.temporal.helpers import WorkerProcess, cli, make_spec, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]

RECEIPT = b"order,amount\nA-1,250\n"

RECEIPT_TOOL = f'''
import pytest_harness as ph


def receipt(order_id: str) -> object:
    """The receipt of an order, as a CSV file."""
    csv = ph.Artifact({RECEIPT!r}, "text/csv", name="receipt.csv")
    return {{"order_id": order_id, "file": csv}}
'''


def records_spec(folder: Path, address: str) -> Path:
    """`make_spec`'s desk on a shared sqlite store, plus a receipt tool that returns an artifact.

    `receipts` completes; `broken` gets the receipt, then its model fails (a failed run).
    """
    spec = make_spec(folder, address)
    (folder / "rtools.py").write_text(RECEIPT_TOOL)
    text = spec.read_text()
    text = text.replace(
        "tools:\n",
        "  fragile:\n"
        "    use: scripted\n"
        "    retries: 0\n"
        "    script:\n"
        "      - call: receipt\n"
        "        args: {order_id: A-1}\n"
        "      - error: server\n"
        "  receipter:\n"
        "    use: scripted\n"
        "    script:\n"
        "      - call: receipt\n"
        "        args: {order_id: A-1}\n"
        "      - say: Here is the receipt.\n"
        "tools:\n"
        '  receipt: {call: "rtools:receipt", replay: safe}\n',
        1,
    )
    text = text.replace(
        "tasks:\n",
        "tasks:\n"
        "  receipts: {model: receipter, prompt: Desk., tools: [receipt]}\n"
        "  broken: {model: fragile, prompt: Desk., tools: [receipt]}\n",
        1,
    )
    text = text.replace("state: {use: memory,", "state: {use: sqlite, path: state.db,")
    spec.write_text(text)
    return spec


def members(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as archive:
        return archive.namelist()


def replay_as_tests(spec: Path, folder: Path) -> subprocess.CompletedProcess[str]:
    """`pytest --replay-recordings FOLDER` in a process of its own."""
    (folder / "pytest.ini").write_text("[pytest]\n")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "--replay-recordings",
            str(folder),
            f"--harness-spec={spec}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=folder,
    )


async def test_a_completed_run_exports_as_an_archive_that_verifies_and_replays(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = records_spec(tmp_path, temporal_server)
    worker = WorkerProcess(spec)
    try:
        async with ph.load(spec) as harness:
            done = await harness.run("receipts", "my receipt", principal="ann")
            assert done.status is ph.RunStatus.COMPLETED, done.error
            full = await harness.export(
                done.run_id,
                tmp_path / "out" / "full.hx",
                policy=ph.ExportPolicy(include_payloads=True, include_artifacts=True),
            )
            meta = await harness.export(done.run_id, tmp_path / "out" / "meta.hx")
            with pytest.raises(FileExistsError):
                await harness.export(done.run_id, meta)
            report = await harness.replay(full)
            journal = (await harness.recording(done.run_id)).run_id
    finally:
        worker.stop()
    assert journal == done.run_id
    assert report.same, report.render()
    verified = ph.verify_archive(full)
    assert verified.valid and verified.complete, verified.issues
    assert verified.manifest is not None
    assert verified.manifest["run_id"] == done.run_id
    assert verified.manifest["final_state"]["output"] == "Here is the receipt."
    sha = hashlib.sha256(RECEIPT).hexdigest()
    (entry,) = verified.manifest["artifacts"]
    assert (entry["sha256"], entry["status"], entry["name"]) == (sha, "included", "receipt.csv")
    played = ph.playback(full)
    assert played.artifacts == {sha: RECEIPT}
    kinds = [r["kind"] for r in played.records]
    assert kinds[0] == "run.started" and kinds[-1] == "checkpoint"
    assert {"model.started", "tool.dispatched", "tool.returned"} <= set(kinds)
    assert [r["seq"] for r in played.records] == list(range(1, len(kinds) + 1))
    meta_report = ph.verify_archive(meta)
    assert meta_report.valid and not meta_report.complete
    assert f"artifacts/{sha}" not in members(meta)
    assert {i.code for i in meta_report.issues} >= {"payloads_omitted"}
    for command, expected in (("verify", "valid, complete"), ("playback", "tool.returned")):
        said = cli(command, str(full))
        assert said.returncode == 0, said.stderr
        assert expected in said.stdout
    replayed = cli("replay", str(full), str(spec))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert replayed.stdout.startswith("same:"), replayed.stdout


async def test_the_export_command_writes_an_archive_of_a_temporal_run(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = records_spec(tmp_path, temporal_server)
    worker = WorkerProcess(spec)
    try:
        async with ph.load(spec) as harness:
            done = await harness.run("receipts", "my receipt", principal="ann")
        dest = tmp_path / "incidents" / "receipt.hx"
        exported = cli(
            "export",
            done.run_id,
            str(dest),
            "--spec",
            str(spec),
            "--include-payloads",
            "--include-artifacts",
        )
        assert exported.returncode == 0, exported.stderr
        again = cli("export", done.run_id, str(dest), "--spec", str(spec))
        unknown = cli("export", "run_nope", str(tmp_path / "nope.hx"), "--spec", str(spec))
    finally:
        worker.stop()
    assert f"wrote {dest}" in exported.stdout
    assert ph.verify_archive(dest).complete
    assert again.returncode != 0 and "exists" in again.stderr
    assert unknown.returncode != 0 and "run_nope" in unknown.stderr
    assert not (tmp_path / "nope.hx").exists()
    gate = replay_as_tests(spec, dest.parent)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "1 passed" in gate.stdout


async def test_a_failed_run_is_a_complete_archive_that_replays_as_a_regression_test(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = records_spec(tmp_path, temporal_server)
    worker = WorkerProcess(spec)
    try:
        async with ph.load(spec) as harness:
            failed = await harness.run("broken", "my receipt", principal="ann")
            assert failed.status is ph.RunStatus.FAILED
            assert failed.error is not None and failed.error["type"] == "ModelError"
            incident = await harness.export(
                failed.run_id,
                tmp_path / "incidents" / "broken.hx",
                policy=ph.ExportPolicy(include_payloads=True, include_artifacts=True),
            )
            report = await harness.replay(incident)
    finally:
        worker.stop()
    verified = ph.verify_archive(incident)
    assert verified.valid and verified.complete, verified.issues
    assert verified.manifest is not None
    assert verified.manifest["final_state"]["status"] == "failed"
    assert verified.manifest["final_state"]["error_type"] == "ModelError"
    assert report.same and report.status == ("failed", "failed"), report.render()
    gate = replay_as_tests(spec, incident.parent)
    assert gate.returncode == 0, gate.stdout + gate.stderr


async def test_a_crashed_run_exports_incomplete_then_complete_once_resolved(
    tmp_path: Path, temporal_server: str
) -> None:
    """The worker dies inside a manual tool: the archive says what is unresolved."""
    spec = records_spec(tmp_path, temporal_server)
    first = WorkerProcess(spec, env={"HANG_FIRST": "1"})
    second = None
    try:
        async with ph.load(spec) as harness:
            handle = await harness.submit("charges", "charge A-1", principal="ann")
            wait_for(tmp_path / "effects", "hanging-*")
            first.kill()
            second = WorkerProcess(spec)
            waiting = await handle.result()
            assert waiting.status is ph.RunStatus.AWAITING_RESOLUTION
            (pending,) = waiting.pending
            crashed = await harness.export(
                waiting.run_id,
                tmp_path / "crashed.hx",
                policy=ph.ExportPolicy(include_payloads=True),
            )
            done = await harness.resolve(
                waiting.run_id, pending.execution_key, result="charged (checked)", resolver="ops"
            )
            assert done.status is ph.RunStatus.COMPLETED, done.error
            fixed = await harness.export(
                done.run_id,
                tmp_path / "incidents" / "charge.hx",
                policy=ph.ExportPolicy(include_payloads=True),
            )
    finally:
        first.stop()
        if second is not None:
            second.stop()
    before = ph.verify_archive(crashed)
    assert before.valid and not before.complete, before.issues
    assert before.manifest is not None
    assert before.manifest["final_state"]["status"] == "awaiting_resolution"
    assert "not_terminal" in {i.code for i in before.issues}, before.issues
    after = ph.verify_archive(fixed)
    assert after.valid and after.complete, after.issues
    kinds = [r["kind"] for r in ph.playback(fixed).records]
    assert "tool.interrupted" in kinds and "tool.resolved" in kinds
    gate = replay_as_tests(spec, fixed.parent)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "1 passed" in gate.stdout
