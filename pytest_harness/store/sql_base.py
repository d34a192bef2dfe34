"""`SQLStoreBase`: what the SQL stores share, each over the statements of its own dialect.

`SQLiteStore` and `PostgresStore` keep a run's lease in its row and answer an approval with one
compare-and-set statement, each in its own SQL. What goes around those statements is the same
in both, and lives here: taking, renewing and releasing the lease, and, when a write finds no
row, reading back why (no such run, a stale token, an approval answered already or not there,
an approval id taken) to raise the error that says so; and listing a run's approvals.

A store supplies its placeholder (`_MARK`), its lease statements, `_q` (one statement, its
rows), `_store_name` and `_any_of`; `_w` runs a write statement, as `_q` does unless the store
runs writes elsewhere (SQLite runs them inline on the loop's thread when it can).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, NoReturn

from pytest_harness.errors import ResolutionError, RunBusy, StoreError, UnknownRun
from pytest_harness.store.base import ApprovalRow
from pytest_harness.store.helpers import already_answered, stale_token
from pytest_harness.store.rows import APPROVAL_COLUMNS, Row, approval_from_row

__all__ = ["Params", "SQLStoreBase"]

Params = Sequence[Any] | Mapping[str, Any]
"""A statement's parameters: positional, or by name."""


class SQLStoreBase:
    """Leases and the read-backs of failed writes, for a SQL store (the base of its connection)."""

    _MARK: ClassVar[str]
    """The dialect's positional placeholder: `?` (SQLite) or `%s` (Postgres)."""
    _ACQUIRE: ClassVar[str]
    """Take the lease (named `owner`, `expires`, `run_id`, `now`) unless another owner's is live;
    returns the new `lease_token`, or no row."""
    _RENEW: ClassVar[str]
    """Extend the lease (`expires`, `run_id`, `token`) while `token` holds it; a row when it did."""
    _RELEASE: ClassVar[str]
    """Drop the lease (`run_id`, `token`) held with `token`; a row when it did."""

    # -- what the store's connection supplies ------------------------------------------------

    async def _q(self, what: str, sql: str, params: Params = ()) -> list[Row]:
        """Run one statement and fetch its rows; errors are `StoreError`s naming `what`."""
        raise NotImplementedError

    async def _w(self, what: str, sql: str, params: Params) -> list[Row]:
        """Run one write statement and fetch its rows (as `_q`, unless the store overrides it)."""
        return await self._q(what, sql, params)

    def _store_name(self) -> str:
        """How messages name the store: `sqlite store PATH`, `postgres store DSN schema S`."""
        raise NotImplementedError

    def _any_of(self, values: Sequence[str]) -> tuple[str, Params]:
        """A condition's right side matching any of `values` (`IN (…)`), and its parameters."""
        raise NotImplementedError

    # -- leases ------------------------------------------------------------------------------

    async def acquire_lease(self, run_id: str, owner: str, ttl: float) -> int:
        """Take the lease unless another owner's is live; the new fencing token."""
        if not ttl > 0:
            raise ValueError(f"lease ttl must be a positive number of seconds, got {ttl!r}")
        what = f"take the lease of run {run_id}"
        for _ in range(3):
            now = time.time()
            rows = await self._w(
                what,
                self._ACQUIRE,
                {"owner": owner, "expires": now + ttl, "run_id": run_id, "now": now},
            )
            if rows:
                return int(rows[0][0])
            held = await self._q(
                what,
                f"SELECT lease_owner, lease_expires FROM runs WHERE run_id = {self._MARK}",
                (run_id,),
            )
            if not held:
                raise UnknownRun(run_id)
            holder, expires = held[0]
            now = time.time()
            if holder is not None and expires is not None and expires > now:
                raise RunBusy(run_id, holder, expires - now)
            # The lease was released or expired between the two statements: try again.
        raise StoreError(  # pragma: no cover - needs three lost races in a row
            f"{self._store_name()}: cannot {what}: its lease kept changing hands; retry"
        )

    async def renew_lease(self, run_id: str, token: int, ttl: float) -> None:
        """Extend the lease held with `token`; `StoreError` when it is stale or released."""
        if not ttl > 0:
            raise ValueError(f"lease ttl must be a positive number of seconds, got {ttl!r}")
        what = f"renew the lease of run {run_id}"
        if await self._w(what, self._RENEW, (time.time() + ttl, run_id, token)):
            return
        await self._raise_stale(run_id, token)

    async def release_lease(self, run_id: str, token: int) -> None:
        """Give the lease up; nothing happens when `token` is stale."""
        what = f"release the lease of run {run_id}"
        if not await self._w(what, self._RELEASE, (run_id, token)):
            await self._require_run(run_id)

    # -- approvals ---------------------------------------------------------------------------

    async def approvals(self, run_id: str) -> list[ApprovalRow]:
        """Every approval request of the run, oldest first."""
        rows = await self._q(
            f"read the approvals of run {run_id}",
            f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE run_id = {self._MARK} ORDER BY seq",
            (run_id,),
        )
        if not rows:
            await self._require_run(run_id)
        return [approval_from_row(row) for row in rows]

    # -- why a write found nothing -----------------------------------------------------------

    async def _require_run(self, run_id: str) -> None:
        """Raise `UnknownRun` unless the run exists (after a write or read found nothing)."""
        if not await self._q(
            f"read run {run_id}", f"SELECT 1 FROM runs WHERE run_id = {self._MARK}", (run_id,)
        ):
            raise UnknownRun(run_id)

    async def _raise_stale(self, run_id: str, token: int) -> NoReturn:
        """Raise why a write fenced by `token` found no row: `UnknownRun`, or a stale token."""
        rows = await self._q(
            f"read run {run_id}",
            f"SELECT lease_token, lease_owner FROM runs WHERE run_id = {self._MARK}",
            (run_id,),
        )
        if not rows:
            raise UnknownRun(run_id)
        raise stale_token(run_id, token, rows[0][0], rows[0][1])

    async def _raise_undecided(self, run_id: str, approval_id: str, what: str) -> NoReturn:
        """Raise why an approval's compare-and-set found nothing pending.

        `UnknownRun`; `ResolutionError` when the run has no such approval, or when it was
        answered already (naming who answered first).
        """
        await self._require_run(run_id)
        found = await self._q(
            what,
            f"SELECT status, approver FROM approvals WHERE approval_id = {self._MARK} "
            f"AND run_id = {self._MARK}",
            (approval_id, run_id),
        )
        if not found:
            raise ResolutionError(f"run {run_id} has no approval {approval_id!r}")
        raise already_answered(run_id, approval_id, found[0][0], found[0][1])

    async def _raise_taken(self, run_id: str, approval_ids: list[str]) -> None:
        """Name the approval id that made a commit fail, if one is already taken."""
        condition, params = self._any_of(approval_ids)
        rows = await self._q(
            f"commit run {run_id}",
            f"SELECT approval_id FROM approvals WHERE approval_id {condition}",
            params,
        )
        taken = {row[0] for row in rows}
        seen: set[str] = set()
        for approval_id in approval_ids:
            if approval_id in taken or approval_id in seen:
                raise StoreError(
                    f"{self._store_name()}: cannot commit run {run_id}: approval "
                    f"{approval_id!r} already exists; nothing was written"
                )
            seen.add(approval_id)
