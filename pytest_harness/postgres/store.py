"""`PostgresStore`: runs, events and approvals in a PostgreSQL schema, shared by many workers.

psycopg 3's async API with a `psycopg_pool.AsyncConnectionPool`; every connection works in
autocommit mode and every write is one statement (see `sqltext.py`), so a call is one round
trip and is atomic on its own. Opening the store applies the schema's migrations under an
advisory lock (`migrate.py`). Leases and fencing are as in the other stores: `commit`, the
run loop's only write, is accepted only while the caller's token is the run's current one,
checked in the `WHERE` of the statement that writes. `claim_run` takes the oldest claimable
run with `FOR UPDATE SKIP LOCKED`, so workers recovering at once each get a different run.
`watch` follows a run's new events through `LISTEN`/`NOTIFY` (`listen.py`).

A pool must not cross `fork()`: the store opens lazily in the process that uses it and refuses
to be used from another.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool

from pytest_harness.errors import ResolutionError, RunBusy, StoreError, UnknownRun
from pytest_harness.postgres import sqltext as q
from pytest_harness.postgres.listen import Listener
from pytest_harness.postgres.migrate import check_version, latest_version, migrate
from pytest_harness.store.base import (
    JOURNAL_FORMAT,
    ApprovalDecision,
    ApprovalRow,
    Event,
    EventDraft,
    JournalDraft,
    JournalEntry,
    NewApproval,
    NewRun,
    RunRecord,
    Sample,
    StoredArtifact,
    already_answered,
    artifact_sha256,
    check_control,
    check_decision,
    check_limit,
    check_samples,
    encode_json,
    parse_cursor,
    stale_token,
)
from pytest_harness.store.rows import (
    approval_from_row,
    approvals_json_of,
    journal_json,
    list_runs_query,
    record_from_row,
    sample_from_row,
    samples_query,
)

__all__ = ["PostgresStore", "redact_dsn"]

_Row = tuple[Any, ...]
_loads = json.loads
_record = record_from_row
_journal_json = journal_json
_approval = approval_from_row
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


def _events_json(events: Sequence[EventDraft], what: str) -> str | None:
    if not events:
        return None
    return encode_json([{"kind": e.kind, "data": e.data} for e in events], what)


class PostgresStore:
    """Runs in a PostgreSQL schema; any number of processes and hosts may share it.

    `dsn` is a libpq connection string or `postgresql://` URL (a password in it is never shown
    in messages; prefer `$PGPASSWORD` or a `.pgpass`). `schema` holds the tables and is created
    when missing: lower-case letters, digits and `_`. `pool_min` and `pool_max` bound the
    connection pool; `connect_timeout` is how long opening waits for the server.
    """

    kind = "postgres"

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

    async def __aenter__(self) -> PostgresStore:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- connection -------------------------------------------------------------------------

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
        except Exception as exc:
            await pool.close()
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

    # -- runs -------------------------------------------------------------------------------

    async def create_run(self, run: NewRun) -> tuple[RunRecord, bool]:
        """Insert a run with its first events, or return the run its idempotency key names."""
        what = f"run {run.run_id}"
        principal = encode_json(run.principal, f"the principal of {what}")
        labels = encode_json(run.labels, f"the labels of {what}")
        state = encode_json(run.state, f"the state of {what}")
        events = _events_json(run.events, f"the events of {what}")
        journal = _journal_json(run.run_id, run.journal)
        tenant_key = run.tenant or ""
        status = _text(run.status)
        now = time.time()
        leased = run.lease_owner is not None
        expires = now + (run.lease_ttl or 0.0) if leased else None
        params = {
            "run_id": run.run_id,
            "session_id": run.session_id,
            "task": run.task,
            "tenant": run.tenant,
            "tenant_key": tenant_key,
            "principal": principal,
            "input": run.input,
            "labels": labels,
            "idempotency_key": run.idempotency_key,
            "status": status,
            "state": state,
            "now": now,
            "owner": run.lease_owner,
            "token": 1 if leased else 0,
            "expires": expires,
            "events": events,
            "record": bool(run.record),
            "journal": journal,
        }
        try:
            inserted = await self._q(f"create {what}", q.CREATE, params)
        except StoreError as exc:
            if isinstance(exc.__cause__, pg_errors.UniqueViolation):
                raise StoreError(
                    f"postgres store {self.where}: cannot create {what}: a run with id "
                    f"{run.run_id!r} already exists; nothing was written"
                ) from exc.__cause__
            raise
        if inserted:
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
            f"SELECT {q.RUN} FROM runs WHERE tenant_key = %s AND task = %s "
            "AND idempotency_key = %s",
            (tenant_key, run.task, run.idempotency_key),
        )
        if not rows:  # pragma: no cover - rows are never deleted
            raise StoreError(
                f"postgres store {self.where}: cannot create {what}: its idempotency key "
                f"{run.idempotency_key!r} is taken, but no run holds it; retry"
            )
        return _record(rows[0]), False

    async def get_run(self, run_id: str) -> RunRecord:
        """Return the stored run; `UnknownRun` when there is none."""
        rows = await self._q(
            f"read run {run_id}", f"SELECT {q.RUN} FROM runs WHERE run_id = %s", (run_id,)
        )
        if not rows:
            raise UnknownRun(run_id)
        return _record(rows[0])

    async def _require_run(self, run_id: str) -> None:
        if not await self._q(
            f"read run {run_id}", "SELECT 1 FROM runs WHERE run_id = %s", (run_id,)
        ):
            raise UnknownRun(run_id)

    # -- leases -----------------------------------------------------------------------------

    async def acquire_lease(self, run_id: str, owner: str, ttl: float) -> int:
        """Take the lease unless another owner's is live; the new fencing token."""
        if not ttl > 0:
            raise ValueError(f"lease ttl must be a positive number of seconds, got {ttl!r}")
        what = f"take the lease of run {run_id}"
        for _ in range(3):
            now = time.time()
            rows = await self._q(
                what,
                q.ACQUIRE,
                {"owner": owner, "expires": now + ttl, "run_id": run_id, "now": now},
            )
            if rows:
                return int(rows[0][0])
            held = await self._q(
                what, "SELECT lease_owner, lease_expires FROM runs WHERE run_id = %s", (run_id,)
            )
            if not held:
                raise UnknownRun(run_id)
            holder, expires = held[0]
            now = time.time()
            if holder is not None and expires is not None and expires > now:
                raise RunBusy(run_id, holder, expires - now)
        raise StoreError(  # pragma: no cover - needs three lost races in a row
            f"postgres store {self.where}: cannot {what}: its lease kept changing hands; retry"
        )

    async def renew_lease(self, run_id: str, token: int, ttl: float) -> None:
        """Extend the lease held with `token`; `StoreError` when it is stale or released."""
        if not ttl > 0:
            raise ValueError(f"lease ttl must be a positive number of seconds, got {ttl!r}")
        what = f"renew the lease of run {run_id}"
        if await self._q(what, q.RENEW, (time.time() + ttl, run_id, token)):
            return
        await self._raise_stale(run_id, token)

    async def release_lease(self, run_id: str, token: int) -> None:
        """Give the lease up; nothing happens when `token` is stale."""
        if not await self._q(f"release the lease of run {run_id}", q.RELEASE, (run_id, token)):
            await self._require_run(run_id)

    async def _raise_stale(self, run_id: str, token: int) -> None:
        rows = await self._q(
            f"read run {run_id}",
            "SELECT lease_token, lease_owner FROM runs WHERE run_id = %s",
            (run_id,),
        )
        if not rows:
            raise UnknownRun(run_id)
        raise stale_token(run_id, token, rows[0][0], rows[0][1])

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
        """Lease the oldest claimable run of `tasks` to `owner` (`FOR UPDATE SKIP LOCKED`)."""
        if not grace >= 0:
            raise ValueError(f"grace must be zero or more seconds, got {grace!r}")
        if not ttl > 0:
            raise ValueError(f"lease ttl must be a positive number of seconds, got {ttl!r}")
        at = time.time() if now is None else now
        rows = await self._q(
            "claim an interrupted run",
            q.CLAIM,
            {
                "owner": owner,
                "expires": time.time() + ttl,
                "now": at,
                "tasks": [_text(t) for t in tasks],
                "exclude": list(exclude),
                "grace": grace,
            },
        )
        return (_record(rows[0]), rows[0][17]) if rows else None

    # -- the boundary write -----------------------------------------------------------------

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
        """Write status, state, events, approvals and journal in one fenced statement.

        Return the pending control request as of the write (cleared when it is `clear_control`).
        A commit whose first journal entry the run already holds is a retry of one that landed
        (its reply was lost): it writes nothing and returns the run's control.
        """
        state_json = encode_json(state, f"the state of run {run_id}")
        events_json = _events_json(events, f"the events of run {run_id}")
        approvals_json = approvals_json_of(run_id, approvals)
        now = time.time()
        params = {
            "status": _text(status),
            "state": state_json,
            "now": now,
            "events": events_json,
            "approvals": approvals_json,
            "expires": None if lease_ttl is None else now + lease_ttl,
            "run_id": run_id,
            "token": token,
            "release": release,
            "clear_control": clear_control,
            "channel": self.channel,
            "journal": _journal_json(run_id, journal),
            "landed": journal[0].id if journal else None,
        }
        try:
            written = await self._q(f"commit run {run_id}", q.COMMIT, params)
        except StoreError as exc:
            if approvals and isinstance(exc.__cause__, pg_errors.UniqueViolation):
                await self._raise_taken(run_id, [a.approval_id for a in approvals])
            raise
        if not written and journal:
            # The flight recorder retries a write whose reply was lost; when the first attempt
            # did commit, its journal entry is there and this one wrote nothing (no event or
            # approval request twice): it succeeded.
            landed = await self._q(f"commit run {run_id}", q.LANDED, (run_id, token, journal[0].id))
            if landed:
                control: str | None = landed[0][0]
                return control
        if not written:
            await self._raise_stale(run_id, token)
        now_control: str | None = written[0][0]
        return now_control

    async def _raise_taken(self, run_id: str, approval_ids: list[str]) -> None:
        """Name the approval id that made a commit fail."""
        rows = await self._q(
            f"commit run {run_id}",
            "SELECT approval_id FROM approvals WHERE approval_id = ANY(%s)",
            (approval_ids,),
        )
        taken = {row[0] for row in rows}
        seen: set[str] = set()
        for approval_id in approval_ids:
            if approval_id in taken or approval_id in seen:
                raise StoreError(
                    f"postgres store {self.where}: cannot commit run {run_id}: approval "
                    f"{approval_id!r} already exists; nothing was written"
                )
            seen.add(approval_id)

    async def request_control(
        self, run_id: str, control: str, *, statuses: Collection[str]
    ) -> RunRecord:
        """Ask the run's driver to pause or cancel it (a pending cancel is kept)."""
        check_control(control)
        rows = await self._q(
            f"request {control} of run {run_id}",
            q.CONTROL,
            {
                "control": control,
                "now": time.time(),
                "run_id": run_id,
                "wanted": [_text(s) for s in statuses],
            },
        )
        if rows:
            return _record(rows[0])
        return await self.get_run(run_id)

    # -- approvals --------------------------------------------------------------------------

    async def decide_approval(
        self,
        run_id: str,
        approval_id: str,
        *,
        decision: ApprovalDecision,
        approver: str,
        approver_roles: tuple[str, ...],
        reason: str | None,
        event: EventDraft | None = None,
        journal: JournalDraft | None = None,
    ) -> ApprovalRow:
        """Answer a pending approval once; `ResolutionError` for a second answer."""
        check_decision(decision)
        data = encode_json(event.data, f"the events of run {run_id}") if event is not None else None
        roles = encode_json(list(approver_roles), f"the roles of approver {approver!r}")
        what = f"answer approval {approval_id} of run {run_id}"
        rows = await self._q(
            what,
            q.DECIDE,
            {
                "run_id": run_id,
                "approval_id": approval_id,
                "decision": decision,
                "approver": approver,
                "roles": roles,
                "reason": reason,
                "now": time.time(),
                "kind": event.kind if event is not None else None,
                "data": data,
                "channel": self.channel,
                "journal": _journal_json(run_id, [journal] if journal is not None else []),
            },
        )
        if rows:
            return _approval(rows[0])
        await self._require_run(run_id)
        found = await self._q(
            what,
            "SELECT status, approver FROM approvals WHERE approval_id = %s AND run_id = %s",
            (approval_id, run_id),
        )
        if not found:
            raise ResolutionError(f"run {run_id} has no approval {approval_id!r}")
        raise already_answered(run_id, approval_id, found[0][0], found[0][1])

    async def approvals(self, run_id: str) -> list[ApprovalRow]:
        """Every approval request of the run, oldest first."""
        rows = await self._q(
            f"read the approvals of run {run_id}",
            f"SELECT {q.APPROVAL} FROM approvals WHERE run_id = %s ORDER BY seq",
            (run_id,),
        )
        if not rows:
            await self._require_run(run_id)
        return [_approval(row) for row in rows]

    # -- reading ----------------------------------------------------------------------------

    async def session_runs(self, session_id: str, *, before: str | None = None) -> list[RunRecord]:
        """Return the session's runs in creation order; with `before`, those created before it."""
        what = f"read the runs of session {session_id}"
        if before is None:
            rows = await self._q(
                what,
                f"SELECT {q.RUN} FROM runs WHERE session_id = %s ORDER BY seq",
                (session_id,),
            )
        else:
            rows = await self._q(
                what,
                f"SELECT {q.RUN} FROM runs WHERE session_id = %s "
                "AND seq < (SELECT seq FROM runs WHERE run_id = %s) ORDER BY seq",
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
        query, params = list_runs_query(
            q.RUN, "%s", status=status, task=task, tenant=tenant, limit=limit
        )
        return [_record(row) for row in await self._q("list runs", query, params)]

    async def events(
        self, run_id: str, *, after: str = "0", limit: int | None = None
    ) -> list[Event]:
        """Return the run's events with a cursor after `after`, in order."""
        position = min(parse_cursor(after), _MAX_ID)
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be zero or more, got {limit}")
        rows = await self._q(
            f"read the events of run {run_id}",
            "SELECT id, kind, data, at FROM events WHERE run_id = %s AND id > %s "
            "ORDER BY id LIMIT %s",
            (run_id, position, limit),
        )
        if not rows:
            await self._require_run(run_id)
        return [
            Event(run_id=run_id, cursor=str(i), kind=kind, data=_loads(data), at=at)
            for i, kind, data, at in rows
        ]

    async def journal(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[JournalEntry]:
        """The run's journal entries after `seq` `after`, in order."""
        check_limit(limit)
        rows = await self._q(
            f"read the journal of run {run_id}",
            f"SELECT {q.JOURNAL} FROM journal WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s",
            (run_id, min(max(after, 0), _MAX_ID), limit),
        )
        if not rows:
            await self._require_run(run_id)
        return [
            JournalEntry(
                id=row[0],
                seq=row[1],
                format=JOURNAL_FORMAT,
                session_id=row[2],
                run_id=row[3],
                step=row[4],
                attempt_id=row[5],
                ts=row[6],
                execution_key=row[7],
                kind=row[8],
                payload=_loads(row[9]),
            )
            for row in rows
        ]

    async def put_artifact(self, artifact: StoredArtifact) -> None:
        """Keep the artifact's bytes by hash (write-once: a second put is a no-op)."""
        artifact_sha256(artifact)
        await self._q(
            f"store artifact {artifact.sha256}",
            "INSERT INTO artifacts (sha256, media_type, name, data) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (sha256) DO NOTHING",
            (artifact.sha256, artifact.media_type, artifact.name, artifact.data),
        )

    async def artifact(self, sha256: str) -> StoredArtifact | None:
        """The artifact kept under `sha256`, or None."""
        rows = await self._q(
            f"read artifact {sha256}",
            "SELECT sha256, media_type, name, data FROM artifacts WHERE sha256 = %s",
            (sha256,),
        )
        if not rows:
            return None
        digest, media_type, name, data = rows[0]
        return StoredArtifact(sha256=digest, media_type=media_type, name=name, data=bytes(data))

    async def expired_runs(self, *, now: float | None = None) -> list[str]:
        """Ids of `running` runs whose lease expired or that nobody holds, oldest first."""
        rows = await self._q(
            "list expired runs", q.EXPIRED, {"now": time.time() if now is None else now}
        )
        return [row[0] for row in rows]

    async def answered_runs(self, *, now: float | None = None, grace: float = 0.0) -> list[str]:
        """Ids of `awaiting_approval` runs with every approval answered and nobody driving them."""
        if not grace >= 0:
            raise ValueError(f"grace must be zero or more seconds, got {grace!r}")
        rows = await self._q(
            "list answered runs",
            q.ANSWERED,
            {"now": time.time() if now is None else now, "grace": grace},
        )
        return [row[0] for row in rows]

    # -- online eval samples ----------------------------------------------------------------

    async def add_samples(self, samples: Sequence[Sample]) -> None:
        """Insert the samples in one statement; a `(run_id, grader)` already stored is skipped."""
        if not samples:
            return
        check_samples(samples)
        rows = encode_json(
            [
                {
                    "run_id": s.run_id,
                    "task": s.task,
                    "grader": s.grader,
                    "score": None if s.score is None else float(s.score),
                    "passed": bool(s.passed),
                    "detail": s.detail,
                    "error": s.error,
                    "created_at": s.created_at,
                }
                for s in samples
            ],
            f"{len(samples)} eval sample(s)",
        )
        await self._q(f"store {len(samples)} eval sample(s)", q.ADD_SAMPLES, (rows,))

    async def samples(
        self,
        *,
        task: str | None = None,
        grader: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = 100,
    ) -> list[Sample]:
        """Stored samples, newest first, filtered."""
        check_limit(limit)
        query, params = samples_query(
            "%s", None, task=task, grader=grader, since=since, until=until, limit=limit
        )
        return [sample_from_row(row) for row in await self._q("read eval samples", query, params)]

    # -- following --------------------------------------------------------------------------

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
