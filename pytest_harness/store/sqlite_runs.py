"""The SQLite store's runs: creation, fenced commits, control requests, listings, claims.

Each write is one statement, or one transaction (`create_run`, `commit`: the run's row, then
its events); `commit` carries a boundary's approval requests and journal entries to the
triggers that file them (`store.sqlite` says why). Leases, and the read-backs of a write that
found nothing, are the SQL stores' own (`store.sql_base`).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from pytest_harness.errors import StoreError, UnknownRun
from pytest_harness.store.base import (
    EventDraft,
    JournalDraft,
    NewApproval,
    NewRun,
    RunRecord,
    check_control,
    encode_json,
)
from pytest_harness.store.rows import approvals_json_of, list_runs_query
from pytest_harness.store.sqlite_connection import SQLiteConnection
from pytest_harness.store.sqlite_statements import (
    _CLAIM,
    _CLAIM_PICK,
    _COMMIT,
    _CONTROL,
    _CREATE,
    _EVENT,
    _RUN,
    Lease,
    _journal_json,
    _loads,
    _record,
    _text,
)

__all__ = ["SQLiteRuns"]

_STATUSES_MAX = 1024
"""How many runs' last written status a store remembers (`SQLiteRuns._remember_status`)."""


class SQLiteRuns(SQLiteConnection):
    """Runs in a SQLite file."""

    # -- runs ----------------------------------------------------------------------------

    async def create_run(self, run: NewRun) -> tuple[RunRecord, bool]:
        """Insert a run with its first events, or return the run its idempotency key names."""
        what = f"run {run.run_id}"
        principal = encode_json(run.principal, f"the principal of {what}")
        labels = encode_json(run.labels, f"the labels of {what}")
        state = encode_json(run.state, f"the state of {what}")
        now = time.time()
        events = _event_rows(run.run_id, run.events, now, f"the events of {what}")
        journal = _journal_json(run.run_id, run.journal)
        tenant_key = run.tenant or ""
        status = _text(run.status)
        leased = run.lease_owner is not None
        expires = now + (run.lease_ttl or 0.0) if leased else None
        params: tuple[Any, ...] = (
            run.run_id,
            run.session_id,
            run.task,
            tenant_key,
            principal,
            run.input,
            labels,
            status,
            state,
            now,
            now,
            1 if leased else 0,
            1 if run.record else 0,
        )
        # The nullable columns that have a value, in `_create_statement`'s order.
        if run.tenant is not None:
            params += (run.tenant,)
        if run.idempotency_key is not None:
            params += (run.idempotency_key,)
        if leased:
            params += (run.lease_owner, expires)
        if journal is not None:
            params += (journal,)
        statement = _CREATE[
            run.tenant is not None, run.idempotency_key is not None, leased, journal is not None
        ]

        def insert(cursor: sqlite3.Cursor) -> bool:
            if not cursor.execute(statement, params).rowcount:
                return False  # the idempotency key is taken
            if events:
                cursor.executemany(_EVENT, events)
            return True

        size = len(state) + len(run.input) + sum(len(e[2]) for e in events) + len(journal or "")
        inserted = await self._tx(f"create {what}", insert, size=size)
        if inserted:
            self._remember_status(run.run_id, status)
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
                lease_token=1 if leased else 0,
                lease_expires=expires,
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

    # -- commits and control -------------------------------------------------------------

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
        """Write status, state, events, approvals and journal in one fenced transaction.

        Return the pending control request as of the write (cleared when it is `clear_control`).
        """
        state_json = encode_json(state, f"the state of run {run_id}")
        now = time.time()
        event_rows = _event_rows(run_id, events, now, f"the events of run {run_id}")
        approvals_json = approvals_json_of(run_id, approvals)
        journal_json = _journal_json(run_id, journal)
        status_text = _text(status)
        # The parameters every commit statement binds, in `_commit_statement`'s order, between
        # the status it sets (`status`, `control`) and the one it checks (`steady`).
        params: tuple[Any, ...] = ()
        if approvals_json is not None:
            params += (approvals_json,)
        if journal_json is not None:
            params += (journal_json,)
        params += (state_json, now)
        lease: Lease = "release" if release else "keep" if lease_ttl is None else "ttl"
        if lease_ttl is not None and not release:
            params += (now + lease_ttl,)
        params += (run_id, token)
        carries = (approvals_json is not None, journal_json is not None)
        steady = self._statuses.get(run_id) == status_text

        def update(cursor: sqlite3.Cursor) -> tuple[str | None] | None:
            # The narrowest statement first (see `_COMMIT`); one that finds no row writes nothing.
            if (
                steady
                and cursor.execute(
                    _COMMIT[(*carries, "steady", lease)], (*params, status_text)
                ).rowcount
            ) or cursor.execute(
                _COMMIT[(*carries, "status", lease)], (status_text, *params)
            ).rowcount:
                found: tuple[str | None] | None = (None,)
            else:
                rows = cursor.execute(
                    _COMMIT[(*carries, "control", lease)], (status_text, clear_control, *params)
                ).fetchall()
                found = (rows[0][0],) if rows else None
            if found is not None and event_rows:  # a stale token updated no row: nothing more
                cursor.executemany(_EVENT, event_rows)
            return found

        size = len(state_json) + sum(len(e[2]) for e in event_rows)
        size += len(approvals_json or "") + len(journal_json or "")
        try:
            written = await self._tx(f"commit run {run_id}", update, size=size)
        except StoreError as exc:
            if approvals and isinstance(exc.__cause__, sqlite3.IntegrityError):
                await self._raise_taken(run_id, [a.approval_id for a in approvals])
            raise
        if written is None:
            self._statuses.pop(run_id, None)
            await self._raise_stale(run_id, token)
        if release:
            self._statuses.pop(run_id, None)
        else:
            self._remember_status(run_id, status_text)
        return written[0]

    def _remember_status(self, run_id: str, status: str) -> None:
        """Note the status this store last wrote for a run it drives (which commit to try first).

        Only a hint: a commit that trusts it still checks the status in its `WHERE`. Runs are
        forgotten when their lease is released, and all of them past `_STATUSES_MAX`.
        """
        statuses = self._statuses
        if len(statuses) >= _STATUSES_MAX and run_id not in statuses:
            statuses.clear()
        statuses[run_id] = status

    async def request_control(
        self, run_id: str, control: str, *, statuses: Collection[str]
    ) -> RunRecord:
        """Ask the run's driver to pause or cancel it (a pending cancel is kept)."""
        check_control(control)
        wanted = encode_json([_text(s) for s in statuses], "run statuses")
        rows = await self._w(
            f"request {control} of run {run_id}",
            _CONTROL,
            {"control": control, "now": time.time(), "run_id": run_id, "wanted": wanted},
        )
        if rows:
            return _record(rows[0])
        return await self.get_run(run_id)

    # -- listings and claims -------------------------------------------------------------

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
        sql, params = list_runs_query(
            _RUN, "?", status=status, task=task, tenant=tenant, limit=limit
        )
        return [_record(row) for row in await self._q("list runs", sql, params)]

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

    async def expired_runs(self, *, now: float | None = None) -> list[str]:
        """Ids of `running` runs whose lease expired or that nobody holds, oldest first."""
        rows = await self._q(
            "list expired runs",
            "SELECT run_id FROM runs WHERE status = 'running' AND (lease_owner IS NULL "
            "OR lease_expires IS NULL OR lease_expires <= ?) ORDER BY seq",
            (time.time() if now is None else now,),
        )
        return [row[0] for row in rows]


def _event_rows(
    run_id: str, events: Sequence[EventDraft], at: float, what: str
) -> list[tuple[str, str, str, float]]:
    """The `events` rows of a write's event drafts (each one's data as JSON)."""
    return [(run_id, e.kind, encode_json(e.data, what), at) for e in events]
