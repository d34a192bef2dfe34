"""The Postgres store's connection: its settings, the pool, one-statement queries and errors.

psycopg 3's async API with a `psycopg_pool.AsyncConnectionPool`; every connection works in
autocommit mode and every write is one statement (see `sqltext.py`), so a call is one round
trip and is atomic on its own. Opening applies the schema's migrations under an advisory lock
(`migrate.py`). `watch` follows a run's new events through `LISTEN`/`NOTIFY` (`listen.py`).

A pool must not cross `fork()`: the store opens lazily in the process that uses it and refuses
to be used from another.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Self

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool

from pytest_harness.errors import StoreError
from pytest_harness.postgres.listen import Listener
from pytest_harness.postgres.migrate import check_version, latest_version, migrate
from pytest_harness.postgres.sqltext import ACQUIRE, RELEASE, RENEW
from pytest_harness.store.base import EventDraft, encode_json
from pytest_harness.store.rows import JsonField, nested_or_text
from pytest_harness.store.sql_base import SQLStoreBase

__all__ = ["PostgresConnection", "redact_dsn"]

_Row = tuple[Any, ...]
_loads = json.loads
_MAX_ID = 2**63 - 1
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def redact_dsn(dsn: str) -> str:
    """The DSN without its password, for messages; `StoreError` when it does not parse."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise StoreError(f"postgres DSN is malformed: {exc}") from exc
    if "password" in parts:
        parts["password"] = "***"
    return make_conninfo("", **parts)


def _text(value: str) -> str:
    return value if type(value) is str else str.__str__(value)


def _events_json(
    events: Sequence[EventDraft], what: str, *, field: JsonField = nested_or_text
) -> str | None:
    """Events as the JSON array `sqltext` reads; `field` writes each `data`."""
    if not events:
        return None
    return encode_json([{"kind": e.kind, "data": field(e.data, what)} for e in events], what)


_NUL = "\\u0000"
"""A NUL as JSON escapes it: Postgres's JSON parser refuses it where it builds text."""


def recordset(build: Callable[..., str | None], *args: Any) -> str | None:
    r"""`build(*args)`: a JSON array for `json_to_recordset`, its JSON fields read as text.

    Postgres parses every string of the array into text, and text holds no NUL: an array in
    which a payload has one (`\u0000`) would fail the whole statement, so a tool result or a
    model answer with a NUL, which memory and sqlite keep, would stop the run at its commit.
    Such an array is built again with every JSON field a string of its JSON text, in which
    the NUL is an escaped backslash and `u0000`, and `sqltext` reads it back as that text.
    The usual array pays one substring search.
    """
    text = build(*args)
    if text is not None and _NUL in text:
        return build(*args, field=encode_json)
    return text


class PostgresConnection(SQLStoreBase):
    """A PostgreSQL schema's settings, connection pool and queries (`PostgresStore`'s base).

    `dsn` is a libpq connection string or `postgresql://` URL (a password in it is never shown
    in messages; prefer `$PGPASSWORD` or a `.pgpass`). `schema` holds the tables and is created
    when missing: lower-case letters, digits and `_`. `pool_min` and `pool_max` bound the
    connection pool; `connect_timeout` is how long opening waits for the server.
    """

    _MARK = "%s"
    _ACQUIRE = ACQUIRE
    _RENEW = RENEW
    _RELEASE = RELEASE

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "harness",
        pool_min: int = 1,
        pool_max: int = 10,
        connect_timeout: float = 10.0,
        migrate: bool = True,
    ) -> None:
        if not isinstance(schema, str) or not _SCHEMA.match(schema):
            raise ValueError(
                f"postgres schema must be lower-case letters, digits and _ (at most 63, not "
                f"starting with a digit), got {schema!r}"
            )
        if isinstance(pool_min, bool) or not isinstance(pool_min, int) or pool_min < 0:
            raise ValueError(f"pool min must be an integer of 0 or more, got {pool_min!r}")
        if isinstance(pool_max, bool) or not isinstance(pool_max, int) or pool_max < 1:
            raise ValueError(f"pool max must be an integer of 1 or more, got {pool_max!r}")
        if pool_max < pool_min:
            raise ValueError(f"pool max ({pool_max}) is smaller than pool min ({pool_min})")
        if not connect_timeout > 0:
            raise ValueError(f"connect_timeout must be positive, got {connect_timeout!r}")
        self.dsn = dsn
        self.schema = schema
        self.pool_min = pool_min
        self.pool_max = pool_max
        self.connect_timeout = float(connect_timeout)
        self.migrate = migrate
        """Whether opening creates and migrates the schema; when False (a reader such as
        `open_store`), opening changes nothing and refuses a missing or other-version schema."""
        self.where = f"{redact_dsn(dsn)} schema {schema}"
        self.application_name = f"pytest-harness {schema}"
        """What the store's connections call themselves (`pg_stat_activity`); its listener's
        connection adds ` listen`."""
        self.channel = f"pytest_harness.{schema}"
        """The `NOTIFY` channel of this schema's event writes (the payload is the run id)."""
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[_Row]] | None = None
        self._listener: Listener | None = None
        self._pid = 0
        self._closed = False
        self._opening = asyncio.Lock()

    def __repr__(self) -> str:
        return f"PostgresStore({self.where!r})"

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- connection --------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, and create and migrate the schema unless `migrate` is False; idempotent."""
        self._closed = False
        await self._db()

    async def close(self) -> None:
        """Close the listener and the pool; idempotent. Later calls raise `StoreError`."""
        self._closed = True
        pool, self._pool = self._pool, None
        listener, self._listener = self._listener, None
        if self._pid != os.getpid():
            return  # never opened, or inherited across fork(): the parent's to close
        if listener is not None:
            await listener.close()
        if pool is not None:
            await pool.close()

    async def _db(self) -> AsyncConnectionPool[psycopg.AsyncConnection[_Row]]:
        pool = self._pool
        if pool is not None:
            if self._pid != os.getpid():
                raise StoreError(
                    f"postgres store {self.where}: opened in process {self._pid}, used from "
                    f"process {os.getpid()}; a pool must not cross fork(): make a new "
                    "PostgresStore in each process"
                )
            return pool
        if self._closed:
            raise StoreError(f"postgres store {self.where} is closed; call open() before using it")
        async with self._opening:
            if self._pool is None:
                self._pool = await self._connect()
                self._pid = os.getpid()
            return self._pool

    async def _connect(self) -> AsyncConnectionPool[psycopg.AsyncConnection[_Row]]:
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.dsn,
                autocommit=True,
                connect_timeout=max(1, round(self.connect_timeout)),
                application_name=self.application_name,
            )
        except psycopg.Error as exc:
            raise StoreError(
                f"postgres store {self.where}: cannot connect: {str(exc).strip()}"
            ) from exc
        try:
            if self.migrate:
                await migrate(conn, self.schema, self.where)
            else:
                await check_version(conn, self.schema, self.where)
        except psycopg.Error as exc:
            raise StoreError(
                f"postgres store {self.where}: cannot create or migrate schema {self.schema!r} "
                f"to version {latest_version()}: {str(exc).strip()}"
            ) from exc
        finally:
            await conn.close()
        schema = self.schema

        async def configure(conn: psycopg.AsyncConnection[_Row]) -> None:
            await conn.execute(f"SET search_path TO {schema}".encode())

        pool: AsyncConnectionPool[psycopg.AsyncConnection[_Row]] = AsyncConnectionPool(
            self.dsn,
            min_size=self.pool_min,
            max_size=self.pool_max,
            kwargs={
                "autocommit": True,
                "connect_timeout": max(1, round(self.connect_timeout)),
                "application_name": self.application_name,
            },
            configure=configure,
            timeout=self.connect_timeout,
            open=False,
            name=f"pytest-harness:{schema}",
        )
        try:
            await pool.open(wait=self.pool_min > 0, timeout=self.connect_timeout)
        except BaseException as exc:
            await pool.close()  # cancelled too: else its tasks and connections stay for good
            if not isinstance(exc, Exception):
                raise
            raise StoreError(
                f"postgres store {self.where}: cannot open the connection pool: {exc}"
            ) from exc
        return pool

    async def _q(
        self, what: str, query: str, params: Mapping[str, Any] | Sequence[Any] = ()
    ) -> list[_Row]:
        """Run one statement; its rows. Every psycopg error is a `StoreError` naming `what`."""
        pool = await self._db()
        try:
            async with pool.connection() as conn:
                cur = await conn.execute(query.encode(), params)
                return await cur.fetchall() if cur.description is not None else []
        except psycopg.Error as exc:
            raise self._error(what, exc) from exc
        except Exception as exc:  # the pool's own errors (PoolTimeout, PoolClosed)
            if type(exc).__module__.startswith("psycopg_pool"):
                raise StoreError(f"postgres store {self.where}: cannot {what}: {exc}") from exc
            raise

    def _error(self, what: str, exc: psycopg.Error) -> StoreError:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        tail = (
            "; nothing was written"
            if not isinstance(exc, psycopg.OperationalError)
            else (
                "; the server or the connection failed: a write that did not return may or may "
                "not have committed (each is one statement: all of it or none)"
            )
        )
        return StoreError(f"postgres store {self.where}: cannot {what}: {detail}{tail}")

    # -- the dialect of `SQLStoreBase` -------------------------------------------------------

    def _store_name(self) -> str:
        return f"postgres store {self.where}"

    def _any_of(self, values: Sequence[str]) -> tuple[str, Sequence[list[str]]]:
        return "= ANY(%s)", (list(values),)

    # -- following ---------------------------------------------------------------------------

    @asynccontextmanager
    async def watch(self, run_id: str, wake: Callable[[], None]) -> AsyncIterator[Listener]:
        """Call `wake()` whenever a write adds events to the run, until the block exits.

        The `LISTEN` is in place when the block starts, so a read made inside it misses no
        write; after a lost connection the listener reconnects and calls `wake()` once, so
        the reader reads again from its cursor (no gap, no repeat). The yielded listener's
        `connected` says whether notifications flow now (if not, read at intervals).
        """
        await self._db()
        listener = self._listener
        if listener is None:
            listener = self._listener = Listener(
                self.dsn,
                self.channel,
                self.where,
                connect_timeout=self.connect_timeout,
                application_name=f"{self.application_name} listen",
            )
        listener.add(run_id, wake)
        try:
            await listener.ready()
            yield listener
        finally:
            listener.remove(run_id, wake)
