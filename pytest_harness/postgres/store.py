"""`PostgresStore`: runs, events and approvals in a PostgreSQL schema, shared by many workers.

psycopg 3's async API with a connection pool; every connection works in autocommit mode and
every write is one statement (`sqltext.py`), so a call is one round trip and atomic on its own.
The store is put together from parts, each in its own module: `postgres.connection` (settings,
the pool, queries, errors, `LISTEN`), `postgres.runs` (runs, claims, the boundary commit,
approvals) and `postgres.history` (reads and eval samples); leases and the read-backs of a
write that found nothing are `store.sql_base`'s, which the SQLite store shares.
"""

from __future__ import annotations

from pytest_harness.postgres.connection import redact_dsn
from pytest_harness.postgres.history import PostgresHistory
from pytest_harness.postgres.runs import PostgresRuns

__all__ = ["PostgresStore", "redact_dsn"]


class PostgresStore(PostgresRuns, PostgresHistory):
    """Runs in a PostgreSQL schema; any number of processes and hosts may share it.

    `dsn` is a libpq connection string or `postgresql://` URL (a password in it is never shown
    in messages; prefer `$PGPASSWORD` or a `.pgpass`). `schema` holds the tables and is created
    when missing: lower-case letters, digits and `_`. `pool_min` and `pool_max` bound the
    connection pool; `connect_timeout` is how long opening waits for the server.
    """

    kind = "postgres"
