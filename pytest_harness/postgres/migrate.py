"""The Postgres store's schema migrations: one SQL file per version, applied under a lock.

`migrations/NNNN_name.sql` holds version `NNNN`. Opening a store runs [`migrate`][] in one
transaction that first takes a transaction-scoped advisory lock keyed by the schema's name, so
many workers starting at once queue on the lock: the first creates the schema and applies the
missing versions, the others find them applied. Each applied version is a row of the schema's
`schema_migrations` table; a schema with a version newer than this code knows is refused.
"""

from __future__ import annotations

import functools
import re
import time
from importlib import resources

import psycopg
from psycopg import sql

from pytest_harness.errors import StoreError

__all__ = ["Migration", "check_version", "latest_version", "migrate", "migrations"]

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


class Migration:
    """One SQL file: its version, its name and its statements."""

    __slots__ = ("name", "text", "version")

    def __init__(self, version: int, name: str, text: str) -> None:
        self.version = version
        self.name = name
        self.text = text


@functools.cache
def migrations() -> tuple[Migration, ...]:
    """Every migration shipped with the package, by version (contiguous from 1)."""
    found: list[Migration] = []
    folder = resources.files("pytest_harness.postgres").joinpath("migrations")
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(
                Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8"))
            )
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):  # pragma: no cover
        raise StoreError("the postgres store's migrations are not numbered 1, 2, 3, …")
    return tuple(found)


def latest_version() -> int:
    """The schema version this code writes."""
    return len(migrations())


async def migrate(
    conn: psycopg.AsyncConnection[tuple[object, ...]], schema: str, where: str
) -> int:
    """Create `schema` if needed and apply the missing migrations; return the version.

    Runs in one transaction under `pg_advisory_xact_lock`, so concurrent callers migrate once.
    `StoreError` naming both versions when the schema is newer than this code.
    """
    latest = latest_version()
    name = sql.Identifier(schema)
    async with conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            (f"pytest_harness.migrate/{schema}",),
        )
        await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(name))
        await conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.schema_migrations (version integer PRIMARY KEY, "
                "name text NOT NULL, applied_at double precision NOT NULL)"
            ).format(name)
        )
        cur = await conn.execute(
            sql.SQL("SELECT coalesce(max(version), 0) FROM {}.schema_migrations").format(name)
        )
        row = await cur.fetchone()
        current = int(row[0]) if row is not None else 0  # type: ignore[call-overload]
        if current > latest:
            raise StoreError(
                f"postgres store {where}: schema {schema!r} is at version {current}, newer than "
                f"this pytest-harness knows (version {latest}); upgrade pytest-harness, or use "
                "another schema"
            )
        await conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(name))
        for migration in migrations()[current:]:
            await conn.execute(migration.text.encode("utf-8"))
            await conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                (migration.version, migration.name, time.time()),
            )
    return latest


async def check_version(
    conn: psycopg.AsyncConnection[tuple[object, ...]], schema: str, where: str
) -> int:
    """Check, without changing anything, that `schema` holds a store of this code's version.

    For readers that must not write (`open_store` for an export): `StoreError` when the schema
    or its version table is missing, or its version is older or newer than this code's.
    """
    latest = latest_version()
    cur = await conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL",
        (f"{sql.Identifier(schema).as_string(conn)}.schema_migrations",),
    )
    row = await cur.fetchone()
    if row is None or not row[0]:
        raise StoreError(
            f"postgres store {where}: there is no pytest-harness store in schema {schema!r} "
            "(the schema or its schema_migrations table does not exist); name the schema with "
            "?schema=NAME (the spec's state.schema, default harness)"
        )
    cur = await conn.execute(
        sql.SQL("SELECT coalesce(max(version), 0) FROM {}.schema_migrations").format(
            sql.Identifier(schema)
        )
    )
    row = await cur.fetchone()
    current = int(row[0]) if row is not None else 0  # type: ignore[call-overload]
    if current != latest:
        which = "newer" if current > latest else "older"
        fix = (
            "upgrade pytest-harness"
            if current > latest
            else "open it once with a harness of this version (which migrates it)"
        )
        raise StoreError(
            f"postgres store {where}: schema {schema!r} is at version {current}, {which} than "
            f"this pytest-harness's (version {latest}); reading it without changing it needs "
            f"the same version: {fix}"
        )
    return current
