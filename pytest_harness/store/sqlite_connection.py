"""The SQLite store's connection: the private file, opening, configuring, migrating, errors.

`SQLiteConnection` is the base of `store.sqlite.SQLiteStore`: it creates the file (0600),
opens one connection lazily in the process that uses it (never across `fork()`), puts it in
WAL mode, migrates the schema, runs each statement in one hop (`_q`) and turns SQLite's errors
into `StoreError`s that say what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import stat
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import aiosqlite

from pytest_harness.errors import StoreError, UnknownRun
from pytest_harness.store.sqlite_schema import _MIGRATIONS, _MIN_SQLITE, SCHEMA_VERSION
from pytest_harness.store.sqlite_statements import _Row

__all__ = ["SQLiteConnection", "Synchronous"]

Synchronous = Literal["full", "normal"]


class SQLiteConnection:
    """One SQLite file and its lazily opened connection: the base of `SQLiteStore`."""

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

    # -- connection ----------------------------------------------------------------------

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
