"""The SQLite store's connection: where each statement runs, and SQLite's errors as `StoreError`s.

`SQLiteConnection` is the base of `store.sqlite.SQLiteStore`. It opens one `sqlite3` connection
lazily in the process that uses it (never across `fork()`; the file itself is made private,
configured and migrated by `store.sqlite_file`), and runs each statement in one of two places,
never both at once:

- **Inline, on the event loop's thread** (`_w`: one statement; `_tx`: one `BEGIN IMMEDIATE …
  COMMIT` transaction): the runtime's short writes. They are tried with a busy timeout of
  zero, so they never wait for a lock: a write either takes the write lock at once and runs
  (its statements, their triggers, and at `synchronous: full` one fsync of the WAL), or fails
  with `SQLITE_BUSY` having written nothing, and goes to the worker thread.
- **On the store's worker thread** (`_q`): reads, opening and closing, checkpoints, a write
  another connection holds the lock against (it waits there, up to the busy timeout, without
  holding up the loop), and a write larger than `_INLINE_BYTES`.

The connection is only ever used by one thread at a time: a statement runs inline only when
the worker has nothing queued or running, and otherwise it queues behind the worker's jobs
(which also keeps this process's writes in the order they were made). SQLite's automatic
checkpoints are off (a checkpoint copies the WAL into the database and fsyncs it, which can
take long); the store instead queues a passive checkpoint on the worker thread after about as
many WAL pages as SQLite's default (1,000) have been written inline. So what a write can hold
the loop for is bounded: one statement or transaction of at most `_INLINE_BYTES` of
parameters, and at `full` one fsync.

Checkpoints go through a second connection of the worker thread's own, so the loop's writes
go on while one runs (a WAL checkpoint does not lock writers out). But SQLite only starts the
WAL over from its beginning once a checkpoint has copied every frame, and writes made while
one runs keep that from happening: when a checkpoint finds the WAL longer than
`_WAL_PAGES_MAX` frames, the next one runs on the main connection instead, with this process's
writes waiting for it, so the WAL stays bounded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from pytest_harness.errors import StoreError
from pytest_harness.store.sql_base import SQLStoreBase
from pytest_harness.store.sqlite_file import check_sqlite, connect, create_file, make_private
from pytest_harness.store.sqlite_file import migrate as migrate_file
from pytest_harness.store.sqlite_statements import _ACQUIRE as ACQUIRE
from pytest_harness.store.sqlite_statements import _RELEASE as RELEASE
from pytest_harness.store.sqlite_statements import _RENEW as RENEW
from pytest_harness.store.sqlite_statements import _Row

__all__ = ["SQLiteConnection", "Synchronous"]

Synchronous = Literal["full", "normal"]
T = TypeVar("T")

_INLINE_BYTES = 64 * 1024
"""A write whose text and blob parameters are longer than this runs on the worker thread."""
_CHECKPOINT_PAGES = 1000
"""Queue a passive checkpoint after about this many WAL pages (SQLite's own default)."""
_WAL_PAGES_MAX = 2 * _CHECKPOINT_PAGES
"""A checkpoint that finds more frames than this has the next one run on the main connection."""
_PAGES_PER_WRITE = 5
"""The pages a small write is counted as: about what a runtime commit writes (4.9 WAL frames
measured on the bench app: the run's row, an event and its `events_run` entry, and now and
then a split b-tree page, the file's first page when it grows, or the `runs_status` entry
when the status changes)."""


def _is_busy(exc: sqlite3.Error) -> bool:
    name: str = getattr(exc, "sqlite_errorname", "")
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))


def _text_bytes(params: Sequence[Any] | Mapping[str, Any]) -> int:
    """The length of the text and blob parameters of a statement."""
    size = 0
    for value in params.values() if isinstance(params, Mapping) else params:
        if isinstance(value, str | bytes):
            size += len(value)
    return size


class SQLiteConnection(SQLStoreBase):
    """One SQLite file and its lazily opened connection: the base of `SQLiteStore`."""

    _MARK = "?"
    _ACQUIRE = ACQUIRE
    _RENEW = RENEW
    _RELEASE = RELEASE

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
        self._conn: sqlite3.Connection | None = None
        self._cursor: sqlite3.Cursor | None = None
        """The connection's cursor for writes: one for every write, not a new one each."""
        self._worker: concurrent.futures.ThreadPoolExecutor | None = None
        self._checkpointer: sqlite3.Connection | None = None
        """The worker thread's own connection, for checkpoints only."""
        self._checkpointing: concurrent.futures.Future[None] | None = None
        self._wal_behind = False
        """Whether the last checkpoint left the WAL longer than `_WAL_PAGES_MAX`."""
        self._last: concurrent.futures.Future[Any] | None = None
        """The job last given to the worker; the worker is idle once it is done (FIFO)."""
        self._busy_ms = 0
        """The busy timeout set on the connection now, by whoever is using it."""
        self._page_size = 4096
        self._wal_pages = 0
        """WAL pages written inline since the last checkpoint was queued (an estimate)."""
        self._statuses: dict[str, str] = {}
        """The status this store last wrote, by run id: which commit statement to try first."""
        self._pid = 0
        self._closed = False
        self._opening = asyncio.Lock()

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r}, synchronous={self.synchronous!r})"

    # -- connection ----------------------------------------------------------------------

    async def open(self) -> None:
        """Create the file if needed, connect and migrate; idempotent."""
        self._closed = False
        await self._db()

    async def close(self) -> None:
        """Close the connection; idempotent. Later calls raise `StoreError` until `open()`."""
        self._closed = True
        conn, self._conn = self._conn, None
        self._cursor = None
        worker, self._worker = self._worker, None
        checkpointer, self._checkpointer = self._checkpointer, None
        self._last = self._checkpointing = None
        if conn is None or worker is None or self._pid != os.getpid():
            # Never opened, or inherited across fork(): the connection is the parent's.
            return

        def close_both() -> None:
            try:
                if checkpointer is not None:
                    checkpointer.close()
            finally:
                conn.close()

        try:
            await asyncio.wrap_future(worker.submit(close_both))
        except sqlite3.Error as exc:
            raise self._error("close the database", exc) from exc
        finally:
            worker.shutdown(wait=False)

    async def _db(self) -> sqlite3.Connection:
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
                worker = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="harness-sqlite"
                )
                job = worker.submit(self._connect)
                try:
                    conns = await asyncio.wrap_future(job)
                except BaseException:
                    # cancelled: the thread goes on opening, for nobody; close what it opens
                    job.add_done_callback(_close_opened)
                    worker.shutdown(wait=False)
                    raise
                self._conn, self._checkpointer = conns
                self._cursor = conns[0].cursor()
                self._worker, self._last, self._checkpointing = worker, None, None
                self._wal_pages, self._wal_behind = 0, False
                self._busy_ms = round(self.busy_timeout * 1000)
                self._pid = os.getpid()
            return self._conn

    def _connect(self) -> tuple[sqlite3.Connection, sqlite3.Connection]:
        """Open, configure and migrate the file, and open the checkpoints' connection."""
        check_sqlite(self.path)
        create_file(self.path)
        make_private(self.path)
        try:
            conn = connect(self.path, self.synchronous, self.busy_timeout)
        except sqlite3.Error as exc:
            raise self._error("open the database", exc) from exc
        try:
            try:
                migrate_file(conn, self.path)
            except sqlite3.Error as exc:
                raise self._error("migrate the database schema", exc, write=True) from exc
            self._page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
            try:
                checkpointer = connect(self.path, self.synchronous, self.busy_timeout)
            except sqlite3.Error as exc:
                raise self._error("open the database", exc) from exc
            make_private(self.path)  # the -wal and -shm files opening made
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
            raise
        return conn, checkpointer

    # -- where statements run ------------------------------------------------------------

    def _submit(self, job: Callable[[sqlite3.Connection], T]) -> concurrent.futures.Future[T]:
        """Queue `job` on the worker thread, with the configured busy timeout set.

        The future returned may be cancelled (its caller was); a job cancelled before it
        started is skipped when the worker reaches it. `_last` is a future of the worker's
        own, done only once the worker has reached the job (run or skipped): the future
        returned is done at once when cancelled, while the job before it may still be
        running, and the loop then used the connection inline at the same time as the
        worker ('Recursive use of cursors not allowed', 'SQL statements in progress', or a
        statement inside the worker's open transaction).
        """
        conn, worker = self._conn, self._worker
        if conn is None or worker is None:  # pragma: no cover - callers open first
            raise StoreError(f"sqlite store {self.path} is not open")
        wanted = round(self.busy_timeout * 1000)
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return  # its caller stopped waiting before it started
            try:
                if self._busy_ms != wanted:
                    conn.execute(f"PRAGMA busy_timeout = {wanted}")
                    self._busy_ms = wanted
                result = job(conn)
            except BaseException as exc:  # the caller's to judge, as in a pool's worker
                future.set_exception(exc)
            else:
                future.set_result(result)

        self._last = worker.submit(run)
        return future

    def _idle(self) -> bool:
        """Whether the worker thread has nothing queued or running (the loop may use `_conn`).

        A job seen done is forgotten, so the next write need not ask its future again (asking
        takes the future's lock).
        """
        last = self._last
        if last is None:
            return True
        if last.done():
            self._last = None
            return True
        return False

    def _inline(self, size: int) -> bool:
        """Whether a write of `size` bytes may run inline on the loop's thread.

        Not while a checkpoint lags behind the writes (another `_CHECKPOINT_PAGES` written
        since it was queued): the write then queues on the worker thread behind it, so a
        checkpoint slowed by a busy disk holds writers back instead of letting the WAL grow.
        """
        if size > _INLINE_BYTES or not self._idle():
            return False
        pending = self._checkpointing
        if pending is None:
            return True
        if pending.done():
            self._checkpointing = None
            return True
        return self._wal_pages < _CHECKPOINT_PAGES

    async def _q(
        self,
        what: str,
        sql: str,
        params: Sequence[Any] | Mapping[str, Any] = (),
        *,
        write: bool = False,
    ) -> list[_Row]:
        """Run one statement on the worker thread (waiting out locks) and fetch its rows."""
        if self._conn is None or self._pid != os.getpid():
            await self._db()
        future = self._submit(lambda conn: conn.execute(sql, params).fetchall())
        try:
            rows = await asyncio.wrap_future(future)
        except sqlite3.Error as exc:
            raise self._error(what, exc, write=write) from exc
        if write:
            self._wrote(_text_bytes(params))
        return cast(list[_Row], rows)

    async def _w(
        self,
        what: str,
        sql: str,
        params: Sequence[Any] | Mapping[str, Any],
        *,
        size: int | None = None,
    ) -> list[_Row]:
        """Run one write statement inline if it can take the lock at once, else as `_q` does.

        `size` is the length of the statement's text and blob parameters, when the caller
        knows it. A statement that fails with `SQLITE_BUSY` in autocommit mode has written
        nothing (a write statement takes the write lock before it changes anything), so
        running it again on the worker thread neither loses nor doubles it.
        """
        if self._conn is None or self._pid != os.getpid():
            await self._db()
        if size is None:
            size = _text_bytes(params)
        cursor = self._cursor
        if cursor is not None and self._inline(size):
            try:
                if self._busy_ms:
                    cursor.execute("PRAGMA busy_timeout = 0")
                    self._busy_ms = 0
                rows = cursor.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                if not _is_busy(exc):
                    raise self._error(what, exc, write=True) from exc
                if cursor.connection.in_transaction:  # pragma: no cover - autocommit rolls back
                    cursor.execute("ROLLBACK")
            else:
                self._wrote(size)
                return cast(list[_Row], rows)
        return await self._q(what, sql, params, write=True)

    async def _tx(self, what: str, work: Callable[[sqlite3.Cursor], T], *, size: int) -> T:
        """Run `work(cursor)` in one `BEGIN IMMEDIATE … COMMIT` transaction, inline if it can.

        Inline when the write lock can be taken at once, else on the worker thread (waiting up
        to the busy timeout). `work` runs its statements to the end (`fetchall`) and awaits
        nothing, so no other task's statement can slip into the transaction; if it raises, the
        transaction is rolled back and nothing is written. `size` is as in `_w`.
        """
        if self._conn is None or self._pid != os.getpid():
            await self._db()
        cursor = self._cursor
        if cursor is None:  # pragma: no cover - opening makes it
            raise StoreError(f"sqlite store {self.path} is not open")
        if self._inline(size):
            try:
                if self._busy_ms:
                    cursor.execute("PRAGMA busy_timeout = 0")
                    self._busy_ms = 0
                cursor.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                if not _is_busy(exc):
                    raise self._error(what, exc, write=True) from exc
            else:
                try:
                    result = _finish(cursor, work)
                except sqlite3.Error as exc:
                    raise self._error(what, exc, write=True) from exc
                self._wrote(size)
                return result
        future = self._submit(lambda _: _transaction(cursor, work))
        try:
            result = await asyncio.wrap_future(future)
        except sqlite3.Error as exc:
            raise self._error(what, exc, write=True) from exc
        self._wrote(size)
        return result

    def _wrote(self, size: int) -> None:
        """Count a write's WAL pages; queue a passive checkpoint when there are enough."""
        self._wal_pages += _PAGES_PER_WRITE + size // self._page_size
        if self._wal_pages < _CHECKPOINT_PAGES:
            return
        pending, worker = self._checkpointing, self._worker
        if (pending is not None and not pending.done()) or worker is None:
            return  # one at a time; the next write asks again
        self._wal_pages = 0
        # Not awaited. A passive checkpoint never waits for a lock and leaves what it cannot
        # copy for the next one; its failure writes nothing, so it is not reported.
        if self._wal_behind:
            self._checkpointing = self._submit(self._checkpoint)  # writes queue behind it
        else:
            checkpointer = self._checkpointer
            self._checkpointing = worker.submit(self._checkpoint, checkpointer)

    def _checkpoint(self, conn: sqlite3.Connection | None) -> None:
        """Copy what the WAL holds into the file (on the worker thread), never waiting."""
        if conn is None:  # pragma: no cover - closed meanwhile
            return
        with contextlib.suppress(sqlite3.Error):
            _, log, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            # On the main connection no write runs meanwhile: it copies every frame.
            self._wal_behind = conn is not self._conn and log > _WAL_PAGES_MAX

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

    def _store_name(self) -> str:
        return f"sqlite store {self.path}"

    def _any_of(self, values: Sequence[str]) -> tuple[str, Sequence[str]]:
        return f"IN ({', '.join('?' * len(values))})", list(values)


def _close_opened(
    job: concurrent.futures.Future[tuple[sqlite3.Connection, sqlite3.Connection]],
) -> None:
    """Close the connections of an opening whose caller stopped waiting (it was cancelled)."""
    if job.cancelled() or job.exception() is not None:
        return
    for conn in job.result():
        with contextlib.suppress(sqlite3.Error):
            conn.close()


def _transaction(cursor: sqlite3.Cursor, work: Callable[[sqlite3.Cursor], T]) -> T:
    """`BEGIN IMMEDIATE`, `work(cursor)`, `COMMIT` (waiting for the lock per the busy timeout)."""
    cursor.execute("BEGIN IMMEDIATE")
    return _finish(cursor, work)


def _finish(cursor: sqlite3.Cursor, work: Callable[[sqlite3.Cursor], T]) -> T:
    """Run `work` in the open transaction and commit it, or roll it back when anything fails."""
    try:
        result = work(cursor)
        cursor.execute("COMMIT")
    except BaseException:
        if cursor.connection.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                cursor.execute("ROLLBACK")
        raise
    return result
