"""What only the sqlite store promises: the file, its schema, locks, processes and fork."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any, Literal

import pytest
import pytest_asyncio

from pytest_harness.errors import StoreError
from pytest_harness.store import EventDraft, NewApproval, NewRun, SQLiteStore, sqlite_file
from pytest_harness.store.base import Sample
from pytest_harness.store.sqlite import SCHEMA_VERSION
from pytest_harness.store.sqlite_connection import (
    _CHECKPOINT_PAGES,
    _WAL_PAGES_MAX,
    SQLiteConnection,
)

pytestmark = pytest.mark.asyncio


def new_run(**fields: Any) -> NewRun:
    values: dict[str, Any] = {
        "run_id": f"run_{uuid.uuid4().hex}",
        "session_id": "ses_1",
        "task": "orders",
        "tenant": None,
        "principal": {"id": "ann"},
        "input": "hello",
        "labels": {},
        "idempotency_key": None,
        "status": "running",
        "state": {"steps": 0},
        "events": (EventDraft("run_started", {"task": "orders"}),),
    }
    values.update(fields)
    return NewRun(**values)


@contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        yield conn


@pytest_asyncio.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    made = SQLiteStore(tmp_path / "state.db", synchronous="normal")
    await made.open()
    try:
        yield made
    finally:
        await made.close()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- the file ---------------------------------------------------------------------------------


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
async def test_file_and_folder_are_created_readable_by_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "state.db"
    old_umask = os.umask(0o022)
    try:
        store = SQLiteStore(path)
        try:
            await store.create_run(new_run())
            assert mode(path) == 0o600
            sidecars = [Path(f"{path}{suffix}") for suffix in ("-wal", "-shm")]
            assert any(p.exists() for p in sidecars)
            for sidecar in sidecars:
                if sidecar.exists():
                    assert mode(sidecar) == 0o600, sidecar
        finally:
            await store.close()
    finally:
        os.umask(old_umask)
    assert mode(path) == 0o600


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
async def test_an_existing_file_readable_by_others_is_tightened_on_open(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SQLiteStore(path)
    try:
        await store.create_run(new_run())
    finally:
        await store.close()
    sidecars = [Path(f"{path}{suffix}") for suffix in ("-wal", "-shm")]
    for name in (path, *sidecars):
        name.touch()
        os.chmod(name, 0o644)
    again = SQLiteStore(path)
    try:
        assert len(await again.list_runs()) == 1
        for name in (path, *sidecars):
            if name.exists():
                assert mode(name) == 0o600, name
    finally:
        await again.close()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
async def test_a_file_that_cannot_be_tightened_fails_to_open_naming_its_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    path.touch()
    os.chmod(path, 0o664)

    def refuse(name: object, mode: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "chmod", refuse)
    store = SQLiteStore(path)
    with pytest.raises(
        StoreError, match=r"state\.db has mode 0664, readable or writable by others"
    ):
        await store.open()
    await store.close()
    assert mode(path) == 0o664


async def test_pragmas(tmp_path: Path) -> None:
    settings: tuple[tuple[Literal["full", "normal"], int], ...] = (("full", 2), ("normal", 1))
    for synchronous, level in settings:
        store = SQLiteStore(tmp_path / f"{synchronous}.db", synchronous=synchronous)
        try:
            assert await store._q("t", "PRAGMA journal_mode") == [("wal",)]
            assert await store._q("t", "PRAGMA synchronous") == [(level,)]
            assert await store._q("t", "PRAGMA busy_timeout") == [(5000,)]
        finally:
            await store.close()


async def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="'off'"):
        SQLiteStore("x.db", synchronous="off")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="busy_timeout"):
        SQLiteStore("x.db", busy_timeout=-1)


async def test_reopening_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    first = SQLiteStore(path)
    try:
        record, _ = await first.create_run(new_run(idempotency_key="k"))
        token = await first.acquire_lease(record.run_id, "w1", 30)
        await first.commit(
            record.run_id,
            token,
            status="awaiting_approval",
            state={"steps": 3},
            events=[EventDraft("step", {"n": 1})],
            approvals=[
                NewApproval(
                    approval_id="apr_1",
                    execution_key="exk",
                    args_digest="d",
                    tool="refund",
                    args={"amount": 250},
                    rule_id="R1",
                    approvers=("finance",),
                    requested_by="ann",
                )
            ],
        )
        events = await first.events(record.run_id)
        stored = await first.get_run(record.run_id)
    finally:
        await first.close()
    second = SQLiteStore(path)
    try:
        assert await second.get_run(record.run_id) == stored
        assert await second.events(record.run_id) == events
        assert [a.approval_id for a in await second.approvals(record.run_id)] == ["apr_1"]
        again, created = await second.create_run(new_run(idempotency_key="k"))
        assert (again.run_id, created) == (record.run_id, False)
        await second.commit(
            record.run_id, token, status="running", state={}, events=[EventDraft("more")]
        )
        after = await second.events(record.run_id, after=events[-1].cursor)
        assert [e.kind for e in after] == ["more"]
        assert int(after[0].cursor) > int(events[-1].cursor)
    finally:
        await second.close()


async def test_commit_leaves_no_payload_in_the_outbox_columns(store: SQLiteStore) -> None:
    record, _ = await store.create_run(new_run())
    await store.commit(
        record.run_id,
        0,
        status="awaiting_approval",
        state={},
        events=[EventDraft("e")],
        approvals=[
            NewApproval(
                approval_id="apr_1",
                execution_key="exk",
                args_digest="d",
                tool="t",
                args={},
                rule_id="R1",
                approvers=(),
                requested_by="ann",
            )
        ],
    )
    await store.decide_approval(
        record.run_id,
        "apr_1",
        decision="approve",
        approver="fiona",
        approver_roles=(),
        reason=None,
        event=EventDraft("answered"),
    )
    with raw(store.path) as conn:
        assert conn.execute("SELECT pending_events, pending_approvals FROM runs").fetchall() == [
            (None, None)
        ]
        assert conn.execute("SELECT pending_event FROM approvals").fetchall() == [(None,)]
        assert conn.execute("SELECT kind FROM events ORDER BY id").fetchall() == [
            ("run_started",),
            ("e",),
            ("answered",),
        ]


async def test_a_status_another_connection_wrote_is_not_taken_for_the_last_one_written(
    tmp_path: Path,
) -> None:
    """A store remembers the status it last wrote for a run only to pick which statement to
    try first: a run committed meanwhile through another connection (token 0: nobody leases
    it) still gets the status and state of each commit, and every statement's index entry."""
    path = tmp_path / "state.db"
    first, second = SQLiteStore(path), SQLiteStore(path)
    try:
        record, _ = await first.create_run(new_run())
        for n, (writer, status) in enumerate(
            [(first, "running"), (second, "paused"), (first, "running"), (second, "running")]
        ):
            await writer.commit(record.run_id, 0, status=status, state={"n": n})
            got = await first.get_run(record.run_id)
            assert (got.status, got.state) == (status, {"n": n})
            assert [r.run_id for r in await second.list_runs(status=status)] == [record.run_id]
        await second.commit(record.run_id, 0, status="paused", state={"n": 9})
        await first.commit(record.run_id, 0, status="running", state={"n": 10})
        assert (await second.get_run(record.run_id)).status == "running"
        with raw(path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        await first.close()
        await second.close()


# -- the schema -------------------------------------------------------------------------------


async def test_schema_version_is_recorded(store: SQLiteStore) -> None:
    with raw(store.path) as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM schema_version")]
    assert versions == list(range(1, SCHEMA_VERSION + 1))


def drop_journal(conn: sqlite3.Connection) -> None:
    """Undo schema version 4 (the flight recorder's journal and artifacts)."""
    for trigger in ("runs_created_journal", "runs_journaled", "approvals_journaled"):
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("DROP TABLE journal")
    conn.execute("DROP TABLE artifacts")
    for table, column in (
        ("runs", "record"),
        ("runs", "pending_journal"),
        ("approvals", "pending_journal"),
    ):
        conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")


async def test_a_version_1_file_is_migrated_and_keeps_its_runs(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SQLiteStore(path)
    record, _ = await store.create_run(new_run())
    await store.close()
    with raw(path) as conn:  # what version 1 wrote: no control column, no samples, no journal
        drop_journal(conn)
        conn.execute("DROP TABLE samples")
        conn.execute("ALTER TABLE runs DROP COLUMN control")
        conn.execute("DELETE FROM schema_version WHERE version > 1")
    migrated = SQLiteStore(path)
    try:
        got = await migrated.get_run(record.run_id)
        assert (got.state, got.control) == ({"steps": 0}, None)
        paused = await migrated.request_control(record.run_id, "pause", statuses=("running",))
        assert paused.control == "pause"
    finally:
        await migrated.close()
    with raw(path) as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM schema_version")]
    assert versions == list(range(1, SCHEMA_VERSION + 1))


async def test_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SQLiteStore(path)
    await store.open()
    await store.close()
    with raw(path) as conn:
        conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (99, 0)")
    newer = SQLiteStore(path)
    with pytest.raises(StoreError) as info:
        await newer.open()
    message = str(info.value)
    assert str(path) in message
    assert "schema version 99" in message
    assert f"version {SCHEMA_VERSION} that this pytest-harness knows" in message
    await newer.close()


async def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 200)
    store = SQLiteStore(path)
    with pytest.raises(StoreError) as info:
        await store.get_run("run_1")
    assert str(path) in str(info.value)
    assert "not a SQLite database" in str(info.value)
    await store.close()
    assert path.read_text().startswith("these are my notes")


async def test_a_folder_that_cannot_be_created_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = SQLiteStore(blocker / "state.db")
    with pytest.raises(StoreError, match="cannot create the file"):
        await store.open()
    await store.close()


# -- locks, full disks and processes ----------------------------------------------------------


async def test_a_locked_database_is_a_store_error_and_nothing_is_written(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SQLiteStore(path, busy_timeout=0.2)
    try:
        record, _ = await store.create_run(new_run())
        with raw(path) as other:
            other.execute("BEGIN EXCLUSIVE")
            started = time.monotonic()
            with pytest.raises(StoreError) as info:
                await store.commit(
                    record.run_id, 0, status="completed", state={"x": 1}, events=[EventDraft("e")]
                )
            assert time.monotonic() - started >= 0.15
            message = str(info.value)
            assert str(path) in message
            assert "locked" in message
            assert "busy timeout (0.2s)" in message
            assert "nothing was written" in message
            with pytest.raises(StoreError, match="locked"):
                await store.create_run(new_run())
            with pytest.raises(StoreError, match="locked"):
                await store.acquire_lease(record.run_id, "w1", 30)
            # WAL: reads go on while another connection writes
            assert (await store.get_run(record.run_id)).status == "running"
            other.execute("ROLLBACK")
        got = await store.get_run(record.run_id)
        assert (got.status, got.state, got.lease_owner) == ("running", {"steps": 0}, None)
        assert [e.kind for e in await store.events(record.run_id)] == ["run_started"]
        assert len(await store.list_runs()) == 1
        await store.commit(record.run_id, 0, status="completed", state={})  # usable again
    finally:
        await store.close()


@pytest.mark.parametrize("synchronous", ["full", "normal"])
async def test_a_write_another_connection_locks_out_waits_and_lands_once(
    tmp_path: Path, synchronous: Literal["full", "normal"]
) -> None:
    """A write that finds the lock held (its inline try fails at once) waits off the loop.

    The other connection is a real one holding `BEGIN EXCLUSIVE`; while it does, the commit
    waits on the worker thread (the loop keeps running other tasks), a second write queues
    behind it, and once the lock is released both land once, in the order they were made.
    """
    path = tmp_path / "state.db"
    store = SQLiteStore(path, synchronous=synchronous, busy_timeout=30)
    try:
        record, _ = await store.create_run(new_run())
        token = await store.acquire_lease(record.run_id, "w1", 30)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        with raw(path) as other:
            other.execute("BEGIN EXCLUSIVE")
            other.execute("UPDATE runs SET labels = '{\"held\":1}'")
            commit = asyncio.create_task(
                store.commit(
                    record.run_id,
                    token,
                    status="running",
                    state={"steps": 1},
                    events=[EventDraft("first", {"n": 1})],
                    lease_ttl=30,
                )
            )
            ticking = asyncio.create_task(ticker())
            await asyncio.sleep(0.3)
            assert not commit.done()  # waiting for the lock, not failed with SQLITE_BUSY
            assert ticks >= 5  # and the loop went on meanwhile
            second = asyncio.create_task(store.create_run(new_run(session_id="ses_2")))
            await asyncio.sleep(0.05)
            assert not second.done()  # queued behind the waiting write
            other.execute("COMMIT")
            ticking.cancel()
            assert await commit is None
            created, new = await second
        assert new
        got = await store.get_run(record.run_id)
        assert (got.state, got.labels) == ({"steps": 1}, {"held": 1})
        first_events = await store.events(record.run_id)
        assert [e.kind for e in first_events] == ["run_started", "first"]
        second_events = await store.events(created.run_id)
        assert [e.kind for e in second_events] == ["run_started"]
        assert int(second_events[0].cursor) > int(first_events[-1].cursor)
        # The lock is free again: the next write runs inline and lands.
        await store.commit(record.run_id, token, status="completed", state={"steps": 2})
        assert (await store.get_run(record.run_id)).status == "completed"
    finally:
        await store.close()


async def test_a_write_locked_out_past_the_busy_timeout_is_not_applied_later(
    tmp_path: Path,
) -> None:
    """The waiting write gives up at the busy timeout and is not retried behind the caller."""
    path = tmp_path / "state.db"
    store = SQLiteStore(path, busy_timeout=0.1)
    try:
        record, _ = await store.create_run(new_run())
        with raw(path) as other:
            other.execute("BEGIN EXCLUSIVE")
            with pytest.raises(StoreError, match="nothing was written"):
                await store.commit(
                    record.run_id, 0, status="failed", state={}, events=[EventDraft("late")]
                )
            other.execute("ROLLBACK")
        await store.commit(record.run_id, 0, status="running", state={"steps": 1})
        got = await store.get_run(record.run_id)
        assert (got.status, got.state) == ("running", {"steps": 1})
        assert [e.kind for e in await store.events(record.run_id)] == ["run_started"]
    finally:
        await store.close()


async def test_inline_writes_are_checkpointed_off_the_loop_and_the_wal_stays_bounded(
    tmp_path: Path,
) -> None:
    """Automatic checkpoints are off; the store queues passive ones as the WAL grows.

    Writes made while a checkpoint runs keep SQLite from starting the WAL over, so without
    the occasional checkpoint on the main connection the WAL would grow with every write.
    """
    path = tmp_path / "state.db"
    store = SQLiteStore(path, synchronous="normal")
    try:
        record, _ = await store.create_run(new_run())
        assert await store._q("t", "PRAGMA wal_autocheckpoint") == [(0,)]
        await store._q("t", "PRAGMA wal_checkpoint(TRUNCATE)")
        before = path.stat().st_size
        count = 1500
        for step in range(count):
            await store.commit(
                record.run_id,
                0,
                status="running",
                state={"step": step, "pad": "x" * 3000},
                events=[EventDraft("step", {"step": step})],
            )
        await store._q("t", "SELECT 1")  # after whatever the worker had queued
        assert path.stat().st_size > before  # pages were copied from the WAL into the file
        (page_size,) = (await store._q("t", "PRAGMA page_size"))[0]
        frames = Path(f"{path}-wal").stat().st_size // (page_size + 24)
        assert frames < _WAL_PAGES_MAX + 2 * _CHECKPOINT_PAGES < count * 3
        events = await store.events(record.run_id)
        assert [e.data for e in events[1:]] == [{"step": step} for step in range(count)]
    finally:
        await store.close()


async def test_a_stalled_checkpoint_holds_writers_back_instead_of_growing_the_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first checkpoint stalls (a busy disk): later writes queue behind it."""
    checkpoint = SQLiteConnection._checkpoint
    stalls = [1.0]

    def stalled(self: SQLiteConnection, conn: sqlite3.Connection | None) -> None:
        if stalls:
            time.sleep(stalls.pop())
        checkpoint(self, conn)

    monkeypatch.setattr(SQLiteConnection, "_checkpoint", stalled)
    path = tmp_path / "state.db"
    store = SQLiteStore(path, synchronous="normal")
    try:
        record, _ = await store.create_run(new_run())
        count = 3000
        for step in range(count):
            await store.commit(
                record.run_id, 0, status="running", state={"step": step, "pad": "x" * 3000}
            )
        await store._q("t", "SELECT 1")
        (page_size,) = (await store._q("t", "PRAGMA page_size"))[0]
        frames = Path(f"{path}-wal").stat().st_size // (page_size + 24)
        assert not stalls and frames < _WAL_PAGES_MAX + 2 * _CHECKPOINT_PAGES < count * 2
    finally:
        await store.close()


async def test_opening_waits_for_a_lock_on_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with raw(path) as other:  # a rollback-journal file another process is writing
        other.execute("CREATE TABLE unrelated (x)")
        other.execute("BEGIN EXCLUSIVE")
        other.execute("INSERT INTO unrelated VALUES (1)")
        waiting = SQLiteStore(path, busy_timeout=0.2)
        with pytest.raises(StoreError, match="locked"):
            await waiting.open()
        await waiting.close()
        patient = SQLiteStore(path, busy_timeout=5)
        opening = asyncio.create_task(patient.open())
        await asyncio.sleep(0.3)
        assert not opening.done()
        other.execute("COMMIT")
        await opening
    try:
        record, _ = await patient.create_run(new_run())
        assert (await patient.get_run(record.run_id)).run_id == record.run_id
    finally:
        await patient.close()


async def test_an_open_cancelled_while_it_waits_for_a_lock_closes_what_it_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker thread goes on opening after the cancellation; what it opens is closed.

    Each connection the store makes is kept here, so that one dropped unclosed (freed without
    a word on 3.11, a ResourceWarning on 3.13) is seen.
    """
    made: list[sqlite3.Connection] = []
    connect = sqlite3.connect

    def keep(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        made.append(conn)
        return conn

    path = tmp_path / "state.db"
    with raw(path) as other:  # a file another process is writing: migrating it waits
        other.execute("CREATE TABLE unrelated (x)")
        other.execute("BEGIN EXCLUSIVE")
        monkeypatch.setattr(sqlite_file.sqlite3, "connect", keep)
        store = SQLiteStore(path, busy_timeout=30)
        opening = asyncio.create_task(store.open())
        await asyncio.sleep(0.1)
        assert not opening.done() and made  # the worker thread is opening
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        other.execute("COMMIT")  # the thread's opening now completes, for nobody
    deadline = time.monotonic() + 10
    while any(t.name.startswith("harness-sqlite") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the store's thread never ended"
        await asyncio.sleep(0.01)
    open_ones = []
    for conn in made:
        try:
            conn.execute("SELECT 1")
        except sqlite3.ProgrammingError:  # closed
            continue
        open_ones.append(conn)
    assert open_ones == []  # before: both connections of the cancelled opening stayed open
    await store.close()


@pytest.mark.parametrize("size", [200_000, 100], ids=["on the worker thread", "inline"])
async def test_a_full_disk_is_a_store_error_and_nothing_is_written(
    store: SQLiteStore, size: int
) -> None:
    """A write too big for the disk fails whole, wherever it runs (its events need new pages)."""
    record, _ = await store.create_run(new_run())
    (pages,) = (await store._q("t", "PRAGMA page_count"))[0]
    await store._q("t", f"PRAGMA max_page_count = {pages}")  # as if the disk were full
    with pytest.raises(StoreError) as info:
        await store.commit(
            record.run_id,
            0,
            status="completed",
            state={"big": "x" * size},
            events=[EventDraft("e", {"n": n, "big": "y" * 1000}) for n in range(50)],
        )
    message = str(info.value)
    assert str(store.path) in message and "full" in message and "nothing was written" in message
    got = await store.get_run(record.run_id)
    assert (got.status, got.state) == ("running", {"steps": 0})
    assert [e.kind for e in await store.events(record.run_id)] == ["run_started"]


async def test_use_from_another_process_is_refused(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    record, _ = await store.create_run(new_run())
    real = os.getpid()
    with monkeypatch.context() as patch:
        patch.setattr(os, "getpid", lambda: real + 1)
        with pytest.raises(StoreError) as info:
            await store.get_run(record.run_id)
        message = str(info.value)
        assert f"opened in process {real}, used from process {real + 1}" in message
        assert "fork()" in message
        with pytest.raises(StoreError, match="fork"):
            await store.commit(record.run_id, 0, status="running", state={})
        with pytest.raises(StoreError, match="fork"):
            await store.open()
    assert (await store.get_run(record.run_id)).run_id == record.run_id


WORKER = textwrap.dedent(
    """
    import asyncio, json, os, sys, time, uuid
    from pytest_harness.store import EventDraft, NewRun, SQLiteStore

    async def main(path, count, start_at):
        store = SQLiteStore(path, synchronous="normal", busy_timeout=30)
        created = 0
        try:
            while time.time() < start_at:
                await asyncio.sleep(0.001)
            for i in range(count):
                for key in (f"shared-{i}", None):
                    run = NewRun(
                        run_id=f"run_{uuid.uuid4().hex}", session_id=f"ses_{os.getpid()}",
                        task="orders", tenant=None, principal={"id": "w"}, input=str(i),
                        labels={}, idempotency_key=key, status="running", state={"i": i},
                        events=[EventDraft("run_started")],
                    )
                    record, new = await store.create_run(run)
                    if not new:
                        continue
                    created += 1
                    token = await store.acquire_lease(record.run_id, str(os.getpid()), 30)
                    await store.commit(
                        record.run_id, token, status="completed", state={"i": i, "done": True},
                        events=[EventDraft("step", {"i": i}), EventDraft("run_result")],
                        lease_ttl=30,
                    )
                    await store.release_lease(record.run_id, token)
        finally:
            await store.close()
        print(json.dumps({"created": created}))

    asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
    """
)


@pytest.mark.slow
async def test_two_processes_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "shared" / "state.db"  # neither process finds the file: both create it
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    count = 200
    start_at = time.time() + 1.0
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(path), str(count), str(start_at)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = []
    for proc in procs:
        out, err = await asyncio.to_thread(proc.communicate, timeout=180)
        assert proc.returncode == 0, err
        assert err == ""
        outputs.append(json.loads(out))
    created = sum(o["created"] for o in outputs)
    assert created == count + 2 * count  # one run per shared key, one unkeyed run per process
    with raw(path) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (created,)
        assert conn.execute(
            "SELECT count(*) FROM runs WHERE status = 'completed' AND lease_owner IS NULL"
        ).fetchone() == (created,)
        assert conn.execute(
            "SELECT count(DISTINCT idempotency_key) FROM runs WHERE idempotency_key IS NOT NULL"
        ).fetchone() == (count,)
        assert conn.execute("SELECT count(*), count(DISTINCT id) FROM events").fetchone() == (
            3 * created,
            3 * created,
        )
        per_run = conn.execute(
            "SELECT group_concat(kind, ',') FROM (SELECT run_id, kind FROM events ORDER BY id) "
            "GROUP BY run_id"
        ).fetchall()
        assert {row[0] for row in per_run} == {"run_started,step,run_result"}
    assert mode(path) == 0o600


async def test_many_tasks_on_one_store(store: SQLiteStore) -> None:
    async def one(i: int) -> None:
        record, _ = await store.create_run(new_run(session_id="ses_many"))
        token = await store.acquire_lease(record.run_id, f"w{i}", 30)
        for step in range(3):
            await store.commit(
                record.run_id,
                token,
                status="running",
                state={"step": step},
                events=[EventDraft("step", {"step": step})],
                lease_ttl=30,
            )
        await store.release_lease(record.run_id, token)

    await asyncio.gather(*(one(i) for i in range(50)))
    runs = await store.session_runs("ses_many")
    assert len(runs) == 50
    for run in runs:
        assert [e.kind for e in await store.events(run.run_id)] == ["run_started"] + ["step"] * 3


async def test_a_version_2_file_gets_the_samples_table(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SQLiteStore(path)
    record, _ = await store.create_run(new_run())
    await store.close()
    with raw(path) as conn:  # what version 2 wrote: no samples table, no journal
        drop_journal(conn)
        conn.execute("DROP TABLE samples")
        conn.execute("DELETE FROM schema_version WHERE version > 2")
    migrated = SQLiteStore(path)
    try:
        assert (await migrated.get_run(record.run_id)).run_id == record.run_id
        graded = Sample(
            run_id=record.run_id,
            task="orders",
            grader="polite",
            score=1.0,
            passed=True,
            created_at=5.0,
        )
        await migrated.add_samples([graded])
        assert await migrated.samples() == [graded]
    finally:
        await migrated.close()
    with raw(path) as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM schema_version")]
    assert versions == list(range(1, SCHEMA_VERSION + 1)) and SCHEMA_VERSION >= 3


async def test_a_version_4_file_gets_events_without_autoincrement_and_keeps_its_cursors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    with monkeypatch.context() as patch:  # this code's store, on what version 4 made
        patch.setattr(sqlite_file, "_MIGRATIONS", sqlite_file._MIGRATIONS[:4])
        patch.setattr(sqlite_file, "SCHEMA_VERSION", 4)
        old = SQLiteStore(path)
        try:
            runs = [(await old.create_run(new_run()))[0] for _ in range(3)]
            for n, run in enumerate(runs):
                await old.commit(
                    run.run_id,
                    0,
                    status="awaiting_approval",
                    state={"n": n},
                    events=[EventDraft("step", {"n": n})],
                    approvals=[
                        NewApproval(
                            approval_id=f"apr_{n}",
                            execution_key="exk",
                            args_digest="d",
                            tool="refund",
                            args={},
                            rule_id="R1",
                            approvers=(),
                            requested_by="ann",
                        )
                    ],
                )
            before = {run.run_id: await old.events(run.run_id) for run in runs}
        finally:
            await old.close()
    with raw(path) as conn:
        assert conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchall()
    migrated = SQLiteStore(path)
    try:
        for run in runs:
            assert await migrated.events(run.run_id) == before[run.run_id]
        last = max(int(e.cursor) for events in before.values() for e in events)
        await migrated.decide_approval(
            runs[0].run_id,
            "apr_0",
            decision="approve",
            approver="fiona",
            approver_roles=(),
            reason=None,
            event=EventDraft("answered"),
        )
        await migrated.commit(
            runs[1].run_id, 0, status="running", state={}, events=[EventDraft("more")]
        )
        answered = (await migrated.events(runs[0].run_id, after=str(last)))[0]
        more = (await migrated.events(runs[1].run_id, after=str(last)))[0]
        assert (answered.kind, more.kind) == ("answered", "more")
        assert last < int(answered.cursor) < int(more.cursor)
    finally:
        await migrated.close()
    with raw(path) as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM schema_version")]
        assert versions == list(range(1, SCHEMA_VERSION + 1))
        assert not conn.execute("SELECT 1 FROM sqlite_sequence WHERE name = 'events'").fetchall()
        (table,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchone()
        assert "AUTOINCREMENT" not in table
        names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master")}
        assert {"events_run", "runs_created", "runs_committed", "approvals_decided"} <= names
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
