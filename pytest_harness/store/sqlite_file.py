"""The SQLite store's file: created private, opened, configured and migrated.

Everything here is blocking and runs on the store's worker thread (`store.sqlite_connection`),
where waiting for another process's lock does not hold up the event loop. `sqlite3.Error`s
propagate as they are; `SQLiteConnection` turns them into `StoreError`s naming the file.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import time
from pathlib import Path

from pytest_harness.errors import StoreError
from pytest_harness.store.sqlite_schema import _MIGRATIONS, _MIN_SQLITE, SCHEMA_VERSION

__all__ = ["check_sqlite", "check_store_file", "connect", "create_file", "make_private", "migrate"]


def check_sqlite(path: Path) -> None:
    """Refuse a Python whose SQLite lacks `RETURNING` (3.35)."""
    if sqlite3.sqlite_version_info < _MIN_SQLITE:
        raise StoreError(
            f"sqlite store {path}: needs SQLite 3.35 or newer, but this Python uses "
            f"SQLite {sqlite3.sqlite_version}; use a newer Python build or the memory store"
        )


def create_file(path: Path) -> bool:
    """Create the folder and an empty file readable by its owner only; whether it is new."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return False
        try:
            if hasattr(os, "fchmod"):
                os.fchmod(fd, 0o600)  # exactly 0600, whatever the umask
        finally:
            os.close(fd)
    except OSError as exc:
        raise StoreError(
            f"sqlite store {path}: cannot create the file: {exc.strerror or exc}; "
            "check that its folder can be created and written"
        ) from exc
    return True


def make_private(path: Path) -> None:
    """Tighten the file and its `-wal` and `-shm` to 0600 (DESIGN §10: the store is private).

    A file others may read or write (say 0644, made by another tool or an older version) is
    tightened; when that fails, opening fails with a `StoreError` naming its mode.
    """
    if os.name != "posix":  # pragma: no cover - permission bits are POSIX
        return
    for name in (str(path), f"{path}-wal", f"{path}-shm"):
        try:
            mode = stat.S_IMODE(os.stat(name).st_mode)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StoreError(
                f"sqlite store {path}: cannot read the mode of {name}: {exc.strerror or exc}"
            ) from exc
        if not mode & 0o077:
            continue
        try:
            os.chmod(name, 0o600)
        except OSError as exc:
            raise StoreError(
                f"sqlite store {path}: {name} has mode {mode:04o}, readable or writable by "
                f"others, and cannot be tightened to 0600 ({exc.strerror or exc}); run "
                f"`chmod 600 {name}` as its owner"
            ) from exc


def connect(path: Path, synchronous: str, busy_timeout: float) -> sqlite3.Connection:
    """Open `path` in WAL mode with `synchronous` and the busy timeout (not yet migrated).

    The connection may be used from any thread, one at a time (`check_same_thread=False`), and
    is in autocommit mode: each statement is its own transaction unless `BEGIN` says otherwise.
    Automatic checkpoints are off: the store runs them on its worker thread instead.
    """
    conn = sqlite3.connect(
        path, isolation_level=None, timeout=busy_timeout, check_same_thread=False
    )
    try:
        _retry_busy(conn, "PRAGMA journal_mode = WAL", busy_timeout)
        conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        try:
            conn.execute("SELECT json_valid('[]')").fetchall()
        except sqlite3.Error as exc:
            raise StoreError(
                f"sqlite store {path}: this Python's SQLite {sqlite3.sqlite_version} lacks the "
                "JSON functions the store needs; use a Python build with JSON1, or the memory "
                "store"
            ) from exc
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.close()
        raise
    return conn


def _retry_busy(conn: sqlite3.Connection, sql: str, busy_timeout: float) -> None:
    """Run `sql`, retrying while another process holds a lock, up to the busy timeout.

    Changing the journal mode does not always wait through SQLite's busy handler (two
    processes opening a new file at once), so it is retried here.
    """
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            conn.execute(sql).fetchall()
            return
        except sqlite3.OperationalError as exc:
            busy = getattr(exc, "sqlite_errorname", "").startswith("SQLITE_BUSY")
            if not busy or time.monotonic() >= deadline:
                raise
        time.sleep(0.005)


def migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Bring the schema to `SCHEMA_VERSION` in one `BEGIN IMMEDIATE` transaction."""
    version = _version(conn)
    _check_version(version, path)
    if version == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version "
            "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
        )
        version = _version(conn)  # another process may have migrated
        _check_version(version, path)
        for number in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[number - 1]:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                (number, time.time()),
            )
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise


def check_store_file(path: Path) -> None:
    """Refuse, reading only, a file that is not a pytest-harness store of this version.

    For opening a store that must exist as it is (`ph.open_store`, `export-incident`): the
    store's own opening would otherwise create the schema in any sqlite file (or an empty one)
    and switch it to WAL. `StoreError` naming the file and what it holds.
    """
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open store {path}: {exc}") from exc
    try:
        version = _version(conn)
    except sqlite3.DatabaseError as exc:
        raise StoreError(
            f"cannot open store {path}: it is not a pytest-harness store ({exc}); give the "
            "sqlite file of the harness's state.path, e.g. .harness/state.db"
        ) from exc
    finally:
        conn.close()
    if version == 0:
        raise StoreError(
            f"cannot open store {path}: it is not a pytest-harness store (it has no "
            "schema_version table); give the sqlite file of the harness's state.path, e.g. "
            ".harness/state.db; nothing was written"
        )
    if version != SCHEMA_VERSION:
        _check_version(version, path)
        raise StoreError(
            f"cannot open store {path}: it has schema version {version}, older than version "
            f"{SCHEMA_VERSION} of this pytest-harness; open it once with the harness (which "
            "migrates it) before exporting from it; nothing was written"
        )


def _version(conn: sqlite3.Connection) -> int:
    rows = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchall()
    if not rows:
        return 0
    rows = conn.execute("SELECT max(version) FROM schema_version").fetchall()
    return int(rows[0][0] or 0)


def _check_version(version: int, path: Path) -> None:
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"sqlite store {path}: the file has schema version {version}, newer than version "
            f"{SCHEMA_VERSION} that this pytest-harness knows; upgrade pytest-harness, or point "
            "state.path at another file"
        )
