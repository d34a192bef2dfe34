"""The `postgres` store, registered through the `pytest_harness` entry-point group.

Loading this plugin imports nothing from psycopg: the factory does, when a spec asks for
`state.use: postgres`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pytest_harness.hookspecs import StoreFactory, hookimpl

if TYPE_CHECKING:
    from pytest_harness.spec.schema import StateSpec
    from pytest_harness.spec.spec import Spec
    from pytest_harness.store.base import Store

__all__ = ["harness_stores"]


def _postgres(state: StateSpec, spec: Spec) -> Store:
    """A `PostgresStore` for `state` (`dsn_env`, `schema`, `pool`); `SpecError` on a bad one."""
    from pytest_harness.errors import StoreError
    from pytest_harness.postgres import _store_class

    name = state.dsn_env
    dsn = os.environ.get(name)
    if not dsn:
        raise spec.error(
            f"environment variable {name!r} is not set (or is empty): it should hold the "
            "postgres DSN, e.g. postgresql://user@host:5432/dbname (keep the password in "
            "$PGPASSWORD or a .pgpass)",
            ("state", "dsn_env"),
        )
    if state.pool.max < state.pool.min:
        raise spec.error(
            f"pool max ({state.pool.max}) is smaller than pool min ({state.pool.min})",
            ("state", "pool"),
        )
    try:
        store_class = _store_class()
    except StoreError as exc:
        raise spec.error(str(exc), ("state", "use")) from None
    try:
        return store_class(
            dsn,
            schema=state.schema_name,
            pool_min=state.pool.min,
            pool_max=state.pool.max,
        )
    except ValueError as exc:
        raise spec.error(str(exc), ("state", "schema")) from None
    except StoreError as exc:  # a DSN libpq cannot parse
        raise spec.error(f"${name}: {exc}", ("state", "dsn_env")) from None


@hookimpl
def harness_stores() -> Mapping[str, StoreFactory]:
    """`postgres`."""
    return {"postgres": _postgres}
