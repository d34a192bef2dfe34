"""The Postgres store (DESIGN §13), a plugin in the extra `pytest-harness[postgres]`.

`state: {use: postgres, dsn_env: DATABASE_URL, schema: harness, pool: {min: 1, max: 10},
lease: 30s}` in a spec selects it; the plugin (`pytest_harness.postgres.plugin`) is registered
through the `pytest_harness` entry-point group like the built-ins, and psycopg is imported only
when a store is made. [`store_from_url`][] opens one from a `postgresql://` URL (for
`ph.open_store` and the CLI).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_harness.postgres.store import PostgresStore

__all__ = ["INSTALL_HINT", "PostgresStore", "is_postgres_url", "store_from_url"]

INSTALL_HINT = "install it with: pip install 'pytest-harness[postgres]'"
_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(target: object) -> bool:
    """Whether `target` is a `postgresql://` (or `postgres://`) URL."""
    return isinstance(target, str) and target.startswith(_SCHEMES)


def store_from_url(url: str, *, schema: str | None = None, migrate: bool = True) -> PostgresStore:
    """A `PostgresStore` for a `postgresql://` URL (not opened yet: `async with` opens it).

    The schema comes from `schema`, else from a `schema=` query parameter of the URL (taken out
    before the URL reaches libpq), else `harness`. Give the password through `$PGPASSWORD` or
    a `.pgpass`, not in the URL. With `migrate=False` opening changes nothing in the database
    (see `PostgresStore.migrate`). `StoreError` when psycopg is not installed or the URL is
    malformed; `ValueError` for a bad schema name.
    """
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    named = [value for key, value in query if key == "schema"]
    rest = [(key, value) for key, value in query if key != "schema"]
    dsn = urlunsplit(parts._replace(query=urlencode(rest)))
    store_class = _store_class()
    return store_class(dsn, schema=schema or (named[-1] if named else "harness"), migrate=migrate)


def _store_class() -> type[PostgresStore]:
    try:
        from pytest_harness.postgres.store import PostgresStore
    except ImportError as exc:
        from pytest_harness.errors import StoreError

        raise StoreError(
            f"the postgres store needs psycopg 3 and psycopg-pool ({exc}); {INSTALL_HINT}"
        ) from exc
    return PostgresStore


def __getattr__(name: str) -> Any:
    if name == "PostgresStore":
        return _store_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
