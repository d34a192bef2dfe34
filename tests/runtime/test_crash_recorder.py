"""The flight recorder after a crash: SIGKILL a recording worker at each boundary, export the
run from the store alone, verify the archive, recover the run, and replay the complete one."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

import pytest_harness as ph

from .test_crash import SPEC, CrashApp

pytestmark = pytest.mark.slow

RECORDING_SPEC = SPEC.replace("synchronous: full}", "synchronous: full, record: true}")


@pytest.fixture
def crash(tmp_path: Path) -> CrashApp:
    app = CrashApp(tmp_path)
    assert RECORDING_SPEC != SPEC
    app.spec.write_text(RECORDING_SPEC, encoding="utf-8")
    return app


def session_of(app: CrashApp, run_id: str) -> str:
    with closing(sqlite3.connect(app.db)) as conn:
        (session,) = conn.execute(
            "SELECT session_id FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
    return str(session)


async def export(app: CrashApp, run_id: str, dest: Path, *, payloads: bool = True) -> Path:
    async with ph.open_store(app.db) as store:
        return await ph.export_incident(
            store,
            session_of(app, run_id),
            run_id,
            dest,
            policy=ph.ExportPolicy(include_payloads=payloads, include_artifacts=True),
        )


@pytest.mark.parametrize(
    ("point", "outstanding"),
    [("model0", "model"), ("tool", "tool"), ("model1", "model")],
)
def test_a_killed_run_exports_verifies_recovers_and_replays(
    crash: CrashApp, tmp_path: Path, point: str, outstanding: str
) -> None:
    run_id = crash.kill_at(point, "run", "refund 5")
    crashed = asyncio.run(export(crash, run_id, tmp_path / "crashed.hx"))
    report = ph.verify_archive(crashed)
    assert report.valid and not report.complete, report.issues
    codes = {issue.code for issue in report.issues}
    assert codes == {"not_terminal", "outstanding_attempt"}, report.issues
    (lost,) = [i for i in report.issues if i.code == "outstanding_attempt"]
    (unresolved,) = report.manifest["unresolved"]  # type: ignore[index]
    assert unresolved["kind"] == outstanding
    assert unresolved["attempt_id"] in lost.message
    if outstanding == "tool":
        assert unresolved["execution_key"] in lost.message
    played = ph.playback(crashed)
    assert played.records[lost.seq - 1]["attempt_id"] == unresolved["attempt_id"]  # type: ignore[operator]

    # another worker recovers the run; its journal says what the crash interrupted
    (recovered,) = crash.recover()
    assert recovered["status"] == "completed"
    done = asyncio.run(export(crash, run_id, tmp_path / "done.hx"))
    report = ph.verify_archive(done)
    assert report.valid and report.complete, report.issues
    records = ph.playback(done).records
    interrupted = [r for r in records if r["kind"] == f"{outstanding}.interrupted"]
    assert [r["attempt_id"] for r in interrupted] == [unresolved["attempt_id"]]
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))

    async def replay() -> ph.ReplayReport:
        async with ph.load(crash.spec, store="memory") as harness:
            return await harness.replay(done)

    replayed = asyncio.run(replay())
    assert replayed.same, replayed.render()


def test_export_incident_refuses_the_wrong_session_and_an_existing_file(
    crash: CrashApp, tmp_path: Path
) -> None:
    run_id = crash.kill_at("tool", "run", "refund 5")

    async def attempts() -> None:
        async with ph.open_store(crash.db) as store:
            with pytest.raises(ph.HarnessError, match="does not belong to session"):
                await ph.export_incident(store, "ses_other", run_id, tmp_path / "x.hx")
            dest = tmp_path / "exists.hx"
            dest.write_bytes(b"keep me")
            with pytest.raises(FileExistsError):
                await ph.export_incident(store, session_of(crash, run_id), run_id, dest)
            assert dest.read_bytes() == b"keep me"

    asyncio.run(attempts())
    assert not (tmp_path / "x.hx").exists()
    with pytest.raises(ph.StoreError, match="no such file"):
        asyncio.run(_open_missing(tmp_path))


async def _open_missing(tmp_path: Path) -> None:
    async with ph.open_store(tmp_path / "missing.db"):
        pass
