"""`SQLiteStore`: runs, events and approvals in one SQLite file, shared by processes on one host.

The file is created with mode 0600 (it holds raw prompts, answers and tool arguments), and an
existing one (with its `-wal` and `-shm`) that others may read is tightened to 0600 on open, or
opening fails naming its mode. It is used in WAL mode, with `PRAGMA synchronous` as configured
and a busy timeout, so several processes can use it at once without `database is locked`
reaching them.

Each call is one round trip to aiosqlite's worker thread (that hop, not SQLite, is most of a
call's cost), and every write the runtime makes is a single SQL statement, atomic together
with its triggers:

- `commit` is one fenced `UPDATE runs … WHERE run_id = ? AND lease_token = ? RETURNING
  control`. The events and approval requests of the boundary travel in the `pending_events`
  and `pending_approvals` columns as JSON arrays; an `AFTER UPDATE` trigger moves their items
  into the `events` and `approvals` tables (`json_each`) and clears the columns. A stale token
  updates no row, so the trigger never fires and nothing is written. The `RETURNING` clause
  hands the driver any pending pause or cancel request in the same round trip.
- `request_control` is one `UPDATE runs SET control = …` guarded by the run's status.
- `create_run` is one `INSERT … ON CONFLICT (tenant_key, task, idempotency_key) DO NOTHING`,
  with an `AFTER INSERT` trigger for its first events.
- `decide_approval` is one compare-and-set `UPDATE approvals … WHERE status = 'pending'`, and
  its event travels in `approvals.pending_event` to a trigger the same way.
- Leases are single `UPDATE … RETURNING lease_token` statements.

A single write statement in autocommit mode takes the write lock when it starts, so the busy
timeout applies and no read-then-write upgrade can fail. The only multi-statement writes are
the schema migrations, run in `BEGIN IMMEDIATE … COMMIT` before the connection is handed out.
One statement per write also keeps the connection safe to share between asyncio tasks: a
transaction spread over several awaited calls would let another task's statement slip into
it. (A caller cancelled while it awaits a write does not stop the write: the statement still
runs, whole or not at all.) Event cursors are the `events` table's `AUTOINCREMENT` ids:
writers are serialized, so ids become visible in order.

The connection is opened lazily in the process that uses it and refused in any other (a
connection must never cross `fork()`); make a new store in each process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import stat
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import aiosqlite

from pytest_harness.errors import ResolutionError, RunBusy, StoreError, UnknownRun
from pytest_harness.store.base import (
    JOURNAL_FORMAT,
    ApprovalDecision,
    ApprovalRow,
    Event,
    EventDraft,
    JournalDraft,
    JournalEntry,
    NewApproval,
    NewRun,
    RunRecord,
    Sample,
    StoredArtifact,
    already_answered,
    artifact_sha256,
    check_control,
    check_decision,
    check_limit,
    check_samples,
    encode_json,
    parse_cursor,
    stale_token,
)

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

Synchronous = Literal["full", "normal"]
_Row = tuple[Any, ...]
_loads = json.loads

_MAX_ID = 2**63 - 1
"""The largest SQLite integer; a cursor beyond it reads nothing."""

_MIN_SQLITE = (3, 35, 0)
"""`RETURNING` arrived in SQLite 3.35."""

_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # version 1
    (
        """
        CREATE TABLE runs (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL UNIQUE,
            session_id TEXT NOT NULL,
            task TEXT NOT NULL,
            tenant TEXT,
            tenant_key TEXT NOT NULL,
            principal TEXT NOT NULL,
            input TEXT NOT NULL,
            labels TEXT NOT NULL,
            idempotency_key TEXT,
            status TEXT NOT NULL,
            state TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            lease_owner TEXT,
            lease_token INTEGER NOT NULL DEFAULT 0,
            lease_expires REAL,
            pending_events TEXT,
            pending_approvals TEXT
        )
        """,
        "CREATE UNIQUE INDEX runs_idempotency ON runs (tenant_key, task, idempotency_key)",
        "CREATE INDEX runs_session ON runs (session_id, seq)",
        "CREATE INDEX runs_status ON runs (status, seq)",
        """
        CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            data TEXT NOT NULL,
            at REAL NOT NULL
        )
        """,
        "CREATE INDEX events_run ON events (run_id, id)",
        """
        CREATE TABLE approvals (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            approval_id TEXT NOT NULL UNIQUE,
            run_id TEXT NOT NULL,
            execution_key TEXT NOT NULL,
            args_digest TEXT NOT NULL,
            tool TEXT NOT NULL,
            args TEXT NOT NULL,
            rule_id TEXT NOT NULL,
            approvers TEXT NOT NULL,
            requested_by TEXT NOT NULL,
            self_approve INTEGER NOT NULL,
            requested_at REAL NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'approve', 'decline')),
            approver TEXT,
            approver_roles TEXT NOT NULL DEFAULT '[]',
            reason TEXT,
            decided_at REAL,
            pending_event TEXT
        )
        """,
        "CREATE INDEX approvals_run ON approvals (run_id, seq)",
        # The first events of a new run.
        """
        CREATE TRIGGER runs_created AFTER INSERT ON runs
        WHEN NEW.pending_events IS NOT NULL
        BEGIN
            INSERT INTO events (run_id, kind, data, at)
                SELECT NEW.run_id, json_extract(value, '$.kind'), json_extract(value, '$.data'),
                       NEW.updated_at
                FROM json_each(NEW.pending_events) ORDER BY key;
            UPDATE runs SET pending_events = NULL WHERE seq = NEW.seq;
        END
        """,
        # The events and approval requests of a commit.
        """
        CREATE TRIGGER runs_committed AFTER UPDATE OF pending_events, pending_approvals ON runs
        WHEN NEW.pending_events IS NOT NULL OR NEW.pending_approvals IS NOT NULL
        BEGIN
            INSERT INTO events (run_id, kind, data, at)
                SELECT NEW.run_id, json_extract(value, '$.kind'), json_extract(value, '$.data'),
                       NEW.updated_at
                FROM json_each(NEW.pending_events) ORDER BY key;
            INSERT INTO approvals (
                approval_id, run_id, execution_key, args_digest, tool, args, rule_id,
                approvers, requested_by, self_approve, requested_at
            )
                SELECT json_extract(value, '$.approval_id'), NEW.run_id,
                       json_extract(value, '$.execution_key'),
                       json_extract(value, '$.args_digest'), json_extract(value, '$.tool'),
                       json_extract(value, '$.args'), json_extract(value, '$.rule_id'),
                       json_extract(value, '$.approvers'),
                       json_extract(value, '$.requested_by'),
                       json_extract(value, '$.self_approve'), NEW.updated_at
                FROM json_each(NEW.pending_approvals) ORDER BY key;
            UPDATE runs SET pending_events = NULL, pending_approvals = NULL WHERE seq = NEW.seq;
        END
        """,
        # The event of an approval's decision.
        """
        CREATE TRIGGER approvals_decided AFTER UPDATE OF pending_event ON approvals
        WHEN NEW.pending_event IS NOT NULL
        BEGIN
            INSERT INTO events (run_id, kind, data, at)
                VALUES (NEW.run_id, json_extract(NEW.pending_event, '$.kind'),
                        json_extract(NEW.pending_event, '$.data'), NEW.decided_at);
            UPDATE approvals SET pending_event = NULL WHERE seq = NEW.seq;
        END
        """,
    ),
    # version 2: a pending pause or cancel request, written by any process, read by commits
    ("ALTER TABLE runs ADD COLUMN control TEXT",),
    # version 3: online eval samples, one per run and grader
    (
        """
        CREATE TABLE samples (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL,
            task TEXT NOT NULL,
            grader TEXT NOT NULL,
            score REAL,
            passed INTEGER NOT NULL,
            detail TEXT,
            error TEXT,
            created_at REAL NOT NULL,
            UNIQUE (run_id, grader)
        )
        """,
        "CREATE INDEX samples_created ON samples (created_at, seq)",
        "CREATE INDEX samples_task_grader ON samples (task, grader, created_at)",
    ),
    # version 4: the flight recorder's journal and artifacts (DESIGN §12)
    (
        "ALTER TABLE runs ADD COLUMN record INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE runs ADD COLUMN pending_journal TEXT",
        "ALTER TABLE approvals ADD COLUMN pending_journal TEXT",
        "UPDATE runs SET record = 1 WHERE json_extract(state, '$.rec') IS NOT NULL",
        """
        CREATE TABLE journal (
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            id TEXT NOT NULL,
            session_id TEXT NOT NULL,
            step INTEGER NOT NULL,
            attempt_id TEXT,
            ts REAL NOT NULL,
            execution_key TEXT,
            kind TEXT NOT NULL,
            payload TEXT NOT NULL,
            PRIMARY KEY (run_id, seq),
            UNIQUE (run_id, id)
        )
        """,
        """
        CREATE TABLE artifacts (
            sha256 TEXT PRIMARY KEY,
            media_type TEXT NOT NULL,
            name TEXT,
            data BLOB NOT NULL
        )
        """,
        # The journal entries of a write travel in `pending_journal`; each gets the run's next
        # seq, and an id the run already journaled (a retried write) is skipped.
        *(
            f"""
            CREATE TRIGGER {name} AFTER {event} ON {table}
            WHEN NEW.pending_journal IS NOT NULL
            BEGIN
                INSERT INTO journal (run_id, seq, id, session_id, step, attempt_id, ts,
                                     execution_key, kind, payload)
                    SELECT NEW.run_id, base.n + row_number() OVER (ORDER BY j.key), j.id,
                           {session}, json_extract(j.value, '$.step'),
                           json_extract(j.value, '$.attempt_id'), json_extract(j.value, '$.ts'),
                           json_extract(j.value, '$.execution_key'),
                           json_extract(j.value, '$.kind'), json_extract(j.value, '$.payload')
                    FROM (SELECT key, value, json_extract(value, '$.id') AS id
                          FROM json_each(NEW.pending_journal)) AS j,
                         (SELECT coalesce(max(seq), 0) AS n FROM journal
                          WHERE run_id = NEW.run_id) AS base
                    WHERE NOT EXISTS (SELECT 1 FROM journal
                                      WHERE run_id = NEW.run_id AND id = j.id)
                    ORDER BY j.key;
                UPDATE {table} SET pending_journal = NULL WHERE seq = NEW.seq;
            END
            """
            for name, event, table, session in (
                ("runs_created_journal", "INSERT", "runs", "NEW.session_id"),
                ("runs_journaled", "UPDATE OF pending_journal", "runs", "NEW.session_id"),
                (
                    "approvals_journaled",
                    "UPDATE OF pending_journal",
                    "approvals",
                    "(SELECT session_id FROM runs WHERE run_id = NEW.run_id)",
                ),
            )
        ),
    ),
)

SCHEMA_VERSION = len(_MIGRATIONS)
"""The schema version this code writes; a file with a newer one is refused."""

_RUN = (
    "run_id, session_id, task, tenant, principal, input, labels, idempotency_key, status, "
    "state, created_at, updated_at, lease_owner, lease_token, lease_expires, control, record"
)
_JOURNAL = "id, seq, session_id, run_id, step, attempt_id, ts, execution_key, kind, payload"
_APPROVAL = (
    "approval_id, run_id, execution_key, args_digest, tool, args, rule_id, approvers, "
    "requested_by, self_approve, status, approver, approver_roles, reason, decided_at"
)

_CREATE = (
    "INSERT INTO runs (run_id, session_id, task, tenant, tenant_key, principal, input, labels, "
    "idempotency_key, status, state, created_at, updated_at, pending_events, lease_owner, "
    "lease_token, lease_expires, record, pending_journal) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (tenant_key, task, idempotency_key) DO NOTHING RETURNING seq"
)
_COMMIT = (
    "UPDATE runs SET status = :status, state = :state, updated_at = :now, "
    "pending_events = :events, pending_approvals = :approvals, pending_journal = :journal, "
    "lease_expires = CASE WHEN :release THEN NULL "
    "WHEN :expires IS NULL OR lease_owner IS NULL THEN lease_expires ELSE :expires END, "
    "lease_owner = CASE WHEN :release THEN NULL ELSE lease_owner END, "
    "control = CASE WHEN control = :clear_control THEN NULL ELSE control END "
    "WHERE run_id = :run_id AND lease_token = :token RETURNING control"
)
_CONTROL = (
    "UPDATE runs SET control = CASE WHEN control = 'cancel' THEN 'cancel' ELSE :control END, "
    "updated_at = :now "
    f"WHERE run_id = :run_id AND status IN (SELECT value FROM json_each(:wanted)) RETURNING {_RUN}"
)
_ACQUIRE = (
    "UPDATE runs SET lease_token = lease_token + 1, lease_owner = :owner, lease_expires = :expires "
    "WHERE run_id = :run_id AND (lease_owner IS NULL OR lease_owner = :owner "
    "OR lease_expires IS NULL OR lease_expires <= :now) RETURNING lease_token"
)
_CLAIMABLE = (
    "(r.lease_owner IS NULL OR r.lease_expires IS NULL OR r.lease_expires <= :now) "
    "AND r.task IN (SELECT value FROM json_each(:tasks)) "
    "AND r.run_id NOT IN (SELECT value FROM json_each(:exclude)) "
    "AND (r.status = 'running' OR (r.status = 'awaiting_approval' "
    "AND NOT EXISTS (SELECT 1 FROM approvals p WHERE p.run_id = r.run_id "
    "AND p.status = 'pending' AND NOT EXISTS (SELECT 1 FROM approvals d "
    "WHERE d.run_id = p.run_id AND d.execution_key = p.execution_key "
    "AND d.status = 'decline')) "
    "AND (SELECT max(a.decided_at) FROM approvals a WHERE a.run_id = r.run_id) "
    "<= :now - :grace))"
)
"""A run `claim_run` may take: `running` with no live lease, or `awaiting_approval` with every
approval answered (none open: a request pending for a call another request declined is moot;
at least one answered: `max` of none is NULL) long enough ago."""
_CLAIM_PICK = (
    f"SELECT r.seq, CASE WHEN r.lease_owner IS NULL THEN NULL ELSE r.lease_expires END "
    f"FROM runs r WHERE {_CLAIMABLE} ORDER BY r.seq LIMIT 1"
)
_CLAIM = (
    "UPDATE runs SET lease_token = lease_token + 1, lease_owner = :owner, "
    f"lease_expires = :expires WHERE seq = :seq AND seq IN (SELECT r.seq FROM runs r "
    f"WHERE {_CLAIMABLE}) RETURNING {_RUN}"
)
"""Take the picked run, if it is still claimable (another writer may have taken it since)."""
_RENEW = (
    "UPDATE runs SET lease_expires = ? "
    "WHERE run_id = ? AND lease_token = ? AND lease_owner IS NOT NULL RETURNING 1"
)
_RELEASE = (
    "UPDATE runs SET lease_owner = NULL, lease_expires = NULL "
    "WHERE run_id = ? AND lease_token = ? RETURNING 1"
)
_DECIDE = (
    "UPDATE approvals SET status = ?, approver = ?, approver_roles = ?, reason = ?, "
    "decided_at = ?, pending_event = ?, pending_journal = ? "
    f"WHERE approval_id = ? AND run_id = ? AND status = 'pending' RETURNING {_APPROVAL}"
)


def _text(value: str) -> str:
    """Return a plain `str` for `value` (a `str` Enum member gives its value)."""
    return value if type(value) is str else str.__str__(value)


def _record(row: _Row) -> RunRecord:
    return RunRecord(
        run_id=row[0],
        session_id=row[1],
        task=row[2],
        tenant=row[3],
        principal=_loads(row[4]),
        input=row[5],
        labels=_loads(row[6]),
        idempotency_key=row[7],
        status=row[8],
        state=_loads(row[9]),
        created_at=row[10],
        updated_at=row[11],
        lease_owner=row[12],
        lease_token=row[13],
        lease_expires=row[14],
        control=row[15],
        record=bool(row[16]),
    )


def _journal_json(run_id: str, drafts: Sequence[JournalDraft]) -> str | None:
    if not drafts:
        return None
    return encode_json(
        [
            {
                "id": d.id,
                "kind": d.kind,
                "step": d.step,
                "ts": d.ts,
                "attempt_id": d.attempt_id,
                "execution_key": d.execution_key,
                "payload": d.payload,
            }
            for d in drafts
        ],
        f"the journal of run {run_id}",
    )


def _entry(row: _Row) -> JournalEntry:
    return JournalEntry(
        id=row[0],
        seq=row[1],
        format=JOURNAL_FORMAT,
        session_id=row[2],
        run_id=row[3],
        step=row[4],
        attempt_id=row[5],
        ts=row[6],
        execution_key=row[7],
        kind=row[8],
        payload=_loads(row[9]),
    )


def _approval(row: _Row) -> ApprovalRow:
    return ApprovalRow(
        approval_id=row[0],
        run_id=row[1],
        execution_key=row[2],
        args_digest=row[3],
        tool=row[4],
        args=_loads(row[5]),
        rule_id=row[6],
        approvers=tuple(_loads(row[7])),
        requested_by=row[8],
        self_approve=bool(row[9]),
        status=row[10],
        approver=row[11],
        approver_roles=tuple(_loads(row[12])),
        reason=row[13],
        decided_at=row[14],
    )


class SQLiteStore:
    """Runs in a SQLite file; several processes on one host may share it."""

    kind = "sqlite"

    def __init__(
        self,
        path: Path | str,
        *,
        synchronous: Synchronous = "full",
        busy_timeout: float = 5.0,
    ) -> None:
        if synchronous not in ("full", "normal"):
            raise ValueError(f"synchronous must be 'full' or 'normal', got {synchronous!r}")
        if not busy_timeout >= 0:
            raise ValueError(f"busy_timeout must be zero or more seconds, got {busy_timeout!r}")
        self.path = Path(path)
        self.synchronous: Synchronous = synchronous
        self.busy_timeout = float(busy_timeout)
        self._conn: aiosqlite.Connection | None = None
        self._pid = 0
        self._closed = False
        self._opening = asyncio.Lock()

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r}, synchronous={self.synchronous!r})"

    # -- connection -------------------------------------------------------------------------

    async def open(self) -> None:
        """Create the file if needed, connect and migrate; idempotent."""
        self._closed = False
        await self._db()

    async def close(self) -> None:
        """Close the connection; idempotent. Later calls raise `StoreError` until `open()`."""
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is None or self._pid != os.getpid():
            # Never opened, or inherited across fork(): the connection is the parent's.
            return
        try:
            await conn.close()
        except sqlite3.Error as exc:
            raise self._error("close the database", exc) from exc

    async def _db(self) -> aiosqlite.Connection:
        conn = self._conn
        if conn is not None:
            if self._pid != os.getpid():
                raise StoreError(
                    f"sqlite store {self.path}: opened in process {self._pid}, used from "
                    f"process {os.getpid()}; a connection must not cross fork(): make a new "
                    "SQLiteStore in each process"
                )
            return conn
        if self._closed:
            raise StoreError(
                f"sqlite store {self.path} is closed; call open() before using it again"
            )
        async with self._opening:
            if self._conn is None:
                self._conn = await self._connect()
                self._pid = os.getpid()
            return self._conn

    async def _connect(self) -> aiosqlite.Connection:
        if sqlite3.sqlite_version_info < _MIN_SQLITE:
            raise StoreError(
                f"sqlite store {self.path}: needs SQLite 3.35 or newer, but this Python uses "
                f"SQLite {sqlite3.sqlite_version}; use a newer Python build or the memory store"
            )
        self._create_file()
        self._make_private()
        conn = aiosqlite.connect(self.path, isolation_level=None, timeout=self.busy_timeout)
        try:
            await conn
        except sqlite3.Error as exc:
            raise self._error("open the database", exc) from exc
        try:
            await self._configure(conn)
            await self._migrate(conn)
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                await conn.close()
            raise
        try:
            self._make_private()  # the -wal and -shm files opening made
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                await conn.close()
            raise
        return conn

    def _create_file(self) -> bool:
        """Create the folder and an empty file readable by its owner only; whether it is new."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                return False
            try:
                if hasattr(os, "fchmod"):
                    os.fchmod(fd, 0o600)  # exactly 0600, whatever the umask
            finally:
                os.close(fd)
        except OSError as exc:
            raise StoreError(
                f"sqlite store {self.path}: cannot create the file: {exc.strerror or exc}; "
                "check that its folder can be created and written"
            ) from exc
        return True

    def _make_private(self) -> None:
        """Tighten the file and its `-wal` and `-shm` to 0600 (DESIGN §10: the store is private).

        A file others may read or write (say 0644, made by another tool or an older version)
        is tightened; when that fails, opening fails with a `StoreError` naming its mode.
        """
        if os.name != "posix":  # pragma: no cover - permission bits are POSIX
            return
        for name in (str(self.path), f"{self.path}-wal", f"{self.path}-shm"):
            try:
                mode = stat.S_IMODE(os.stat(name).st_mode)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise StoreError(
                    f"sqlite store {self.path}: cannot read the mode of {name}: "
                    f"{exc.strerror or exc}"
                ) from exc
            if not mode & 0o077:
                continue
            try:
                os.chmod(name, 0o600)
            except OSError as exc:
                raise StoreError(
                    f"sqlite store {self.path}: {name} has mode {mode:04o}, readable or "
                    f"writable by others, and cannot be tightened to 0600 "
                    f"({exc.strerror or exc}); run `chmod 600 {name}` as its owner"
                ) from exc

    async def _configure(self, conn: aiosqlite.Connection) -> None:
        try:
            await self._retry_busy(conn, "PRAGMA journal_mode = WAL")
            await conn.execute_fetchall(f"PRAGMA synchronous = {self.synchronous.upper()}")
        except sqlite3.Error as exc:
            raise self._error("open the database", exc) from exc
        try:
            await conn.execute_fetchall("SELECT json_valid('[]')")
        except sqlite3.Error as exc:
            raise StoreError(
                f"sqlite store {self.path}: this Python's SQLite {sqlite3.sqlite_version} lacks "
                "the JSON functions the store needs; use a Python build with JSON1, or the "
                "memory store"
            ) from exc

    async def _retry_busy(self, conn: aiosqlite.Connection, sql: str) -> None:
        """Run `sql`, retrying while another process holds a lock, up to the busy timeout.

        Changing the journal mode does not always wait through SQLite's busy handler (two
        processes opening a new file at once), so it is retried here.
        """
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                await conn.execute_fetchall(sql)
                return
            except sqlite3.OperationalError as exc:
                busy = getattr(exc, "sqlite_errorname", "").startswith("SQLITE_BUSY")
                if not busy or time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(0.005)

    async def _migrate(self, conn: aiosqlite.Connection) -> None:
        try:
            version = await self._version(conn)
            self._check_version(version)
            if version == SCHEMA_VERSION:
                return
            await conn.execute_fetchall("BEGIN IMMEDIATE")
            try:
                await conn.execute_fetchall(
                    "CREATE TABLE IF NOT EXISTS schema_version "
                    "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
                )
                version = await self._version(conn)  # another process may have migrated
                self._check_version(version)
                for number in range(version + 1, SCHEMA_VERSION + 1):
                    for statement in _MIGRATIONS[number - 1]:
                        await conn.execute_fetchall(statement)
                    await conn.execute_fetchall(
                        "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                        (number, time.time()),
                    )
                await conn.execute_fetchall("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    await conn.execute_fetchall("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise self._error("migrate the database schema", exc, write=True) from exc

    @staticmethod
    async def _version(conn: aiosqlite.Connection) -> int:
        rows = list(
            await conn.execute_fetchall(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
            )
        )
        if not rows:
            return 0
        rows = list(await conn.execute_fetchall("SELECT max(version) FROM schema_version"))
        return int(rows[0][0] or 0)

    def _check_version(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"sqlite store {self.path}: the file has schema version {version}, newer than "
                f"version {SCHEMA_VERSION} that this pytest-harness knows; upgrade "
                "pytest-harness, or point state.path at another file"
            )

    def _error(self, what: str, exc: sqlite3.Error, *, write: bool = False) -> StoreError:
        """Build a `StoreError` naming the file, what failed and what to do about it."""
        name: str = getattr(exc, "sqlite_errorname", "") or type(exc).__name__
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
            hint = (
                f"the database stayed locked for longer than the busy timeout "
                f"({self.busy_timeout:g}s) while another connection held a write transaction; "
                "retry, raise state.busy_timeout, or stop the process that holds the lock"
            )
        elif name.startswith("SQLITE_FULL"):
            hint = "the disk or the file system quota is full; free some space and retry"
        elif name.startswith("SQLITE_READONLY"):
            hint = "the file is read-only; check the permissions of the file and its folder"
        elif name.startswith(("SQLITE_NOTADB", "SQLITE_CORRUPT")):
            hint = (
                "the file is not a SQLite database, or it is damaged; point state.path at "
                "another file, or move this one away"
            )
        elif name.startswith("SQLITE_CANTOPEN"):
            hint = "the file cannot be opened; check that its folder exists and can be written"
        elif name.startswith("SQLITE_IOERR"):
            hint = "the operating system reported an I/O error; check the disk"
        else:
            hint = ""
        message = f"sqlite store {self.path}: cannot {what}: {exc} ({name})"
        if hint:
            message += f"; {hint}"
        if write:
            message += "; nothing was written"
        return StoreError(message)

    async def _q(
        self,
        what: str,
        sql: str,
        params: Sequence[Any] | Mapping[str, Any] = (),
        *,
        write: bool = False,
    ) -> list[_Row]:
        """Run one statement (one hop to the connection's thread) and fetch its rows."""
        conn = self._conn
        if conn is None or self._pid != os.getpid():
            conn = await self._db()
        try:
            rows = await conn.execute_fetchall(sql, params)
        except sqlite3.Error as exc:
            raise self._error(what, exc, write=write) from exc
        return cast(list[_Row], rows)

    async def _require_run(self, run_id: str) -> None:
        """Raise `UnknownRun` unless the run exists (after a write or read found nothing)."""
        if not await self._q(
            f"read run {run_id}", "SELECT 1 FROM runs WHERE run_id = ?", (run_id,)
        ):
            raise UnknownRun(run_id)

    # -- runs -------------------------------------------------------------------------------

    async def create_run(self, run: NewRun) -> tuple[RunRecord, bool]:
        """Insert a run with its first events, or return the run its idempotency key names."""
        what = f"run {run.run_id}"
        principal = encode_json(run.principal, f"the principal of {what}")
        labels = encode_json(run.labels, f"the labels of {what}")
        state = encode_json(run.state, f"the state of {what}")
        events = (
            encode_json(
                [{"kind": e.kind, "data": e.data} for e in run.events], f"the events of {what}"
            )
            if run.events
            else None
        )
        journal = _journal_json(run.run_id, run.journal)
        tenant_key = run.tenant or ""
        status = _text(run.status)
        now = time.time()
        inserted = await self._q(
            f"create {what}",
            _CREATE,
            (
                run.run_id,
                run.session_id,
                run.task,
                run.tenant,
                tenant_key,
                principal,
                run.input,
                labels,
                run.idempotency_key,
                status,
                state,
                now,
                now,
                events,
                run.lease_owner,
                1 if run.lease_owner is not None else 0,
                now + (run.lease_ttl or 0.0) if run.lease_owner is not None else None,
                1 if run.record else 0,
                journal,
            ),
            write=True,
        )
        if inserted:
            record = RunRecord(
                run_id=run.run_id,
                session_id=run.session_id,
                task=run.task,
                tenant=run.tenant,
                principal=_loads(principal),
                input=run.input,
                labels=_loads(labels),
                idempotency_key=run.idempotency_key,
                status=status,
                state=_loads(state),
                created_at=now,
                updated_at=now,
                lease_owner=run.lease_owner,
                lease_token=1 if run.lease_owner is not None else 0,
                lease_expires=now + (run.lease_ttl or 0.0) if run.lease_owner is not None else None,
                record=bool(run.record),
            )
            return record, True
        rows = await self._q(
            f"read the run of idempotency key {run.idempotency_key!r}",
            f"SELECT {_RUN} FROM runs WHERE tenant_key = ? AND task = ? AND idempotency_key = ?",
            (tenant_key, run.task, run.idempotency_key),
        )
        if not rows:  # pragma: no cover - rows are never deleted
            raise StoreError(
                f"sqlite store {self.path}: cannot create {what}: its idempotency key "
                f"{run.idempotency_key!r} is taken, but no run holds it; retry"
            )
        return _record(rows[0]), False

    async def get_run(self, run_id: str) -> RunRecord:
        """Return the stored run; `UnknownRun` when there is none."""
        rows = await self._q(
            f"read run {run_id}", f"SELECT {_RUN} FROM runs WHERE run_id = ?", (run_id,)
        )
        if not rows:
            raise UnknownRun(run_id)
        return _record(rows[0])

    # -- leases -----------------------------------------------------------------------------

    async def acquire_lease(self, run_id: str, owner: str, ttl: float) -> int:
        """Take the lease unless another owner's is live; the new fencing token."""
        if not ttl > 0:
            raise ValueError(f"lease ttl must be a positive number of seconds, got {ttl!r}")
        what = f"take the lease of run {run_id}"
        for _ in range(3):
            now = time.time()
            rows = await self._q(
                what,
                _ACQUIRE,
                {"owner": owner, "expires": now + ttl, "run_id": run_id, "now": now},
                write=True,
            )
            if rows:
                return int(rows[0][0])
            held = await self._q(
                what, "SELECT lease_owner, lease_expires FROM runs WHERE run_id = ?", (run_id,)
            )
            if not held:
                raise UnknownRun(run_id)
            holder, expires = held[0]
            now = time.time()
            if holder is not None and expires is not None and expires > now:
                raise RunBusy(run_id, holder, expires - now)
            # The lease was released or expired between the two statements: try again.
        raise StoreError(  # pragma: no cover - needs three lost races in a row
            f"sqlite store {self.path}: cannot {what}: its lease kept changing hands; retry"
        )

    async def renew_lease(self, run_id: str, token: int, ttl: float) -> None:
        """Extend the lease held with `token`; `StoreError` when it is stale or released."""
        if not ttl > 0:
            raise ValueError(f"lease ttl must be a positive number of seconds, got {ttl!r}")
        what = f"renew the lease of run {run_id}"
        if await self._q(what, _RENEW, (time.time() + ttl, run_id, token), write=True):
            return
        await self._raise_stale(run_id, token)

    async def release_lease(self, run_id: str, token: int) -> None:
        """Give the lease up; nothing happens when `token` is stale."""
        what = f"release the lease of run {run_id}"
        if not await self._q(what, _RELEASE, (run_id, token), write=True):
            await self._require_run(run_id)

    async def _raise_stale(self, run_id: str, token: int) -> None:
        rows = await self._q(
            f"read run {run_id}",
            "SELECT lease_token, lease_owner FROM runs WHERE run_id = ?",
            (run_id,),
        )
        if not rows:
            raise UnknownRun(run_id)
        raise stale_token(run_id, token, rows[0][0], rows[0][1])

    # -- the boundary write -----------------------------------------------------------------

    async def commit(
        self,
        run_id: str,
        token: int,
        *,
        status: str,
        state: Mapping[str, Any],
        events: Sequence[EventDraft] = (),
        approvals: Sequence[NewApproval] = (),
        lease_ttl: float | None = None,
        release: bool = False,
        clear_control: str | None = None,
        journal: Sequence[JournalDraft] = (),
    ) -> str | None:
        """Write status, state, events, approvals and journal in one fenced statement.

        Return the pending control request as of the write (cleared when it is `clear_control`).
        """
        state_json = encode_json(state, f"the state of run {run_id}")
        events_json = (
            encode_json(
                [{"kind": e.kind, "data": e.data} for e in events], f"the events of run {run_id}"
            )
            if events
            else None
        )
        approvals_json = (
            encode_json(
                [
                    {
                        "approval_id": a.approval_id,
                        "execution_key": a.execution_key,
                        "args_digest": a.args_digest,
                        "tool": a.tool,
                        "args": a.args,
                        "rule_id": a.rule_id,
                        "approvers": a.approvers,
                        "requested_by": a.requested_by,
                        "self_approve": bool(a.self_approve),
                    }
                    for a in approvals
                ],
                f"approval requests of run {run_id}",
            )
            if approvals
            else None
        )
        now = time.time()
        expires = None if lease_ttl is None else now + lease_ttl
        params = {
            "status": _text(status),
            "state": state_json,
            "now": now,
            "events": events_json,
            "approvals": approvals_json,
            "journal": _journal_json(run_id, journal),
            "expires": expires,
            "run_id": run_id,
            "token": token,
            "release": release,
            "clear_control": clear_control,
        }
        try:
            written = await self._q(f"commit run {run_id}", _COMMIT, params, write=True)
        except StoreError as exc:
            if approvals and isinstance(exc.__cause__, sqlite3.IntegrityError):
                await self._raise_taken(run_id, [a.approval_id for a in approvals])
            raise
        if not written:
            await self._raise_stale(run_id, token)
        control: str | None = written[0][0]
        return control

    async def request_control(
        self, run_id: str, control: str, *, statuses: Collection[str]
    ) -> RunRecord:
        """Ask the run's driver to pause or cancel it (a pending cancel is kept)."""
        check_control(control)
        wanted = encode_json([_text(s) for s in statuses], "run statuses")
        rows = await self._q(
            f"request {control} of run {run_id}",
            _CONTROL,
            {"control": control, "now": time.time(), "run_id": run_id, "wanted": wanted},
            write=True,
        )
        if rows:
            return _record(rows[0])
        return await self.get_run(run_id)

    async def _raise_taken(self, run_id: str, approval_ids: list[str]) -> None:
        """Name the approval id that made a commit fail, if one is already taken."""
        marks = ", ".join("?" * len(approval_ids))
        rows = await self._q(
            f"commit run {run_id}",
            f"SELECT approval_id FROM approvals WHERE approval_id IN ({marks})",
            approval_ids,
        )
        taken = {row[0] for row in rows}
        seen: set[str] = set()
        for approval_id in approval_ids:
            if approval_id in taken or approval_id in seen:
                raise StoreError(
                    f"sqlite store {self.path}: cannot commit run {run_id}: approval "
                    f"{approval_id!r} already exists; nothing was written"
                )
            seen.add(approval_id)

    # -- approvals --------------------------------------------------------------------------

    async def decide_approval(
        self,
        run_id: str,
        approval_id: str,
        *,
        decision: ApprovalDecision,
        approver: str,
        approver_roles: tuple[str, ...],
        reason: str | None,
        event: EventDraft | None = None,
        journal: JournalDraft | None = None,
    ) -> ApprovalRow:
        """Answer a pending approval once; `ResolutionError` for a second answer."""
        check_decision(decision)
        journal_json = _journal_json(run_id, [journal] if journal is not None else [])
        event_json = (
            encode_json({"kind": event.kind, "data": event.data}, f"the events of run {run_id}")
            if event is not None
            else None
        )
        roles = encode_json(list(approver_roles), f"the roles of approver {approver!r}")
        what = f"answer approval {approval_id} of run {run_id}"
        rows = await self._q(
            what,
            _DECIDE,
            (
                decision,
                approver,
                roles,
                reason,
                time.time(),
                event_json,
                journal_json,
                approval_id,
                run_id,
            ),
            write=True,
        )
        if rows:
            return _approval(rows[0])
        await self._require_run(run_id)
        found = await self._q(
            what,
            "SELECT status, approver FROM approvals WHERE approval_id = ? AND run_id = ?",
            (approval_id, run_id),
        )
        if not found:
            raise ResolutionError(f"run {run_id} has no approval {approval_id!r}")
        raise already_answered(run_id, approval_id, found[0][0], found[0][1])

    async def approvals(self, run_id: str) -> list[ApprovalRow]:
        """Every approval request of the run, oldest first."""
        rows = await self._q(
            f"read the approvals of run {run_id}",
            f"SELECT {_APPROVAL} FROM approvals WHERE run_id = ? ORDER BY seq",
            (run_id,),
        )
        if not rows:
            await self._require_run(run_id)
        return [_approval(row) for row in rows]

    # -- reading ----------------------------------------------------------------------------

    async def session_runs(self, session_id: str, *, before: str | None = None) -> list[RunRecord]:
        """Return the session's runs in creation order; with `before`, those created before it."""
        what = f"read the runs of session {session_id}"
        if before is None:
            rows = await self._q(
                what,
                f"SELECT {_RUN} FROM runs WHERE session_id = ? ORDER BY seq",
                (session_id,),
            )
        else:
            rows = await self._q(
                what,
                f"SELECT {_RUN} FROM runs WHERE session_id = ? "
                "AND seq < (SELECT seq FROM runs WHERE run_id = ?) ORDER BY seq",
                (session_id, before),
            )
            if not rows:
                await self._require_run(before)
        return [_record(row) for row in rows]

    async def list_runs(
        self,
        *,
        status: str | None = None,
        task: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        """Return runs, newest first, filtered by status, task and tenant."""
        if limit < 0:
            raise ValueError(f"limit must be zero or more, got {limit}")
        where: list[str] = []
        params: list[Any] = []
        for column, value in (("status", status), ("task", task), ("tenant", tenant)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(_text(value))
        sql = f"SELECT {_RUN} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY seq DESC LIMIT ?"
        params.append(limit)
        return [_record(row) for row in await self._q("list runs", sql, params)]

    async def events(
        self, run_id: str, *, after: str = "0", limit: int | None = None
    ) -> list[Event]:
        """Return the run's events with a cursor after `after`, in order."""
        position = min(parse_cursor(after), _MAX_ID)
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be zero or more, got {limit}")
        rows = await self._q(
            f"read the events of run {run_id}",
            "SELECT id, kind, data, at FROM events WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?",
            (run_id, position, -1 if limit is None else limit),
        )
        if not rows:
            await self._require_run(run_id)
        return [
            Event(run_id=run_id, cursor=str(i), kind=kind, data=_loads(data), at=at)
            for i, kind, data, at in rows
        ]

    async def claim_run(
        self,
        owner: str,
        ttl: float,
        *,
        tasks: Collection[str],
        exclude: Collection[str] = (),
        now: float | None = None,
        grace: float = 0.0,
    ) -> tuple[RunRecord, float | None] | None:
        """Lease the oldest claimable run of `tasks` to `owner`; or None.

        The pick is read first, then taken by one `UPDATE` that checks again that it is
        claimable (SQLite serializes writers, so a run is never taken twice).
        """
        if not ttl > 0:
            raise ValueError(f"lease ttl must be a positive number of seconds, got {ttl!r}")
        for _ in range(10):
            params = {
                "owner": owner,
                "expires": time.time() + ttl,
                "now": time.time() if now is None else now,
                "tasks": encode_json([_text(t) for t in tasks], "task names"),
                "exclude": encode_json(list(exclude), "run ids"),
                "grace": grace,
            }
            picked = await self._q("claim an interrupted run", _CLAIM_PICK, params)
            if not picked:
                return None
            params["seq"], previous = picked[0]
            rows = await self._q("claim an interrupted run", _CLAIM, params, write=True)
            if rows:
                return _record(rows[0]), previous
        raise StoreError(  # pragma: no cover - needs ten lost races in a row
            f"sqlite store {self.path}: cannot claim a run: other workers kept taking them; retry"
        )

    async def journal(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[JournalEntry]:
        """The run's journal entries after `seq` `after`, in order."""
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be zero or more, got {limit}")
        rows = await self._q(
            f"read the journal of run {run_id}",
            f"SELECT {_JOURNAL} FROM journal WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (run_id, min(max(after, 0), _MAX_ID), -1 if limit is None else limit),
        )
        if not rows:
            await self._require_run(run_id)
        return [_entry(row) for row in rows]

    async def put_artifact(self, artifact: StoredArtifact) -> None:
        """Keep the artifact's bytes by hash (write-once: a second put is a no-op)."""
        artifact_sha256(artifact)
        await self._q(
            f"store artifact {artifact.sha256}",
            "INSERT INTO artifacts (sha256, media_type, name, data) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (sha256) DO NOTHING",
            (artifact.sha256, artifact.media_type, artifact.name, artifact.data),
            write=True,
        )

    async def artifact(self, sha256: str) -> StoredArtifact | None:
        """The artifact kept under `sha256`, or None."""
        rows = await self._q(
            f"read artifact {sha256}",
            "SELECT sha256, media_type, name, data FROM artifacts WHERE sha256 = ?",
            (sha256,),
        )
        if not rows:
            return None
        digest, media_type, name, data = rows[0]
        return StoredArtifact(sha256=digest, media_type=media_type, name=name, data=bytes(data))

    async def expired_runs(self, *, now: float | None = None) -> list[str]:
        """Ids of `running` runs whose lease expired or that nobody holds, oldest first."""
        rows = await self._q(
            "list expired runs",
            "SELECT run_id FROM runs WHERE status = 'running' AND (lease_owner IS NULL "
            "OR lease_expires IS NULL OR lease_expires <= ?) ORDER BY seq",
            (time.time() if now is None else now,),
        )
        return [row[0] for row in rows]

    # -- online eval samples ----------------------------------------------------------------

    async def add_samples(self, samples: Sequence[Sample]) -> None:
        """Insert the samples in one statement; a `(run_id, grader)` already stored is skipped."""
        if not samples:
            return
        check_samples(samples)
        rows = ", ".join("(?, ?, ?, ?, ?, ?, ?, ?)" for _ in samples)
        params: list[Any] = []
        for s in samples:
            score = None if s.score is None else float(s.score)
            params += [s.run_id, s.task, s.grader, score, int(bool(s.passed))]
            params += [s.detail, s.error, s.created_at]
        await self._q(
            f"store {len(samples)} eval sample(s)",
            "INSERT INTO samples (run_id, task, grader, score, passed, detail, error, created_at) "
            f"VALUES {rows} ON CONFLICT (run_id, grader) DO NOTHING",
            params,
            write=True,
        )

    async def samples(
        self,
        *,
        task: str | None = None,
        grader: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = 100,
    ) -> list[Sample]:
        """Stored samples, newest first, filtered."""
        check_limit(limit)
        where: list[str] = []
        params: list[Any] = []
        for clause, value in (
            ("task = ?", task),
            ("grader = ?", grader),
            ("created_at >= ?", since),
            ("created_at < ?", until),
        ):
            if value is not None:
                where.append(clause)
                params.append(value)
        sql = "SELECT run_id, task, grader, score, passed, detail, error, created_at FROM samples"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, seq DESC LIMIT ?"
        params.append(-1 if limit is None else limit)
        return [
            Sample(
                run_id=row[0],
                task=row[1],
                grader=row[2],
                score=row[3],
                passed=bool(row[4]),
                detail=row[5],
                error=row[6],
                created_at=row[7],
            )
            for row in await self._q("read eval samples", sql, params)
        ]
