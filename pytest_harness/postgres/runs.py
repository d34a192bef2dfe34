"""The Postgres store's writes: runs, claims and fencing, the boundary commit, approvals.

Leases (taken, renewed and released as `store.sql_base` does for both SQL stores) and fencing
are as in the other stores: `commit`, the run loop's only write, is accepted
only while the caller's token is the run's current one, checked in the `WHERE` of the statement
that writes. `claim_run` takes the oldest claimable run with `FOR UPDATE SKIP LOCKED`, so
workers recovering at once each get a different run.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from psycopg import errors as pg_errors

import pytest_harness.postgres.sqltext as q
from pytest_harness.errors import StoreError, UnknownRun
from pytest_harness.postgres.connection import (
    PostgresConnection,
    _events_json,
    _loads,
    _text,
    recordset,
)
from pytest_harness.store.base import (
    ApprovalDecision,
    ApprovalRow,
    EventDraft,
    JournalDraft,
    NewApproval,
    NewRun,
    RunRecord,
    check_control,
    check_decision,
    encode_json,
)
from pytest_harness.store.rows import approval_from_row as _approval
from pytest_harness.store.rows import approvals_json_of
from pytest_harness.store.rows import journal_json as _journal_json
from pytest_harness.store.rows import record_from_row as _record

__all__ = ["PostgresRuns"]


class PostgresRuns(PostgresConnection):
    """Creating and claiming runs, the boundary commit, control requests and approvals."""

    # -- runs --------------------------------------------------------------------------------

    async def create_run(self, run: NewRun) -> tuple[RunRecord, bool]:
        """Insert a run with its first events, or return the run its idempotency key names."""
        what = f"run {run.run_id}"
        principal = encode_json(run.principal, f"the principal of {what}")
        labels = encode_json(run.labels, f"the labels of {what}")
        state = encode_json(run.state, f"the state of {what}")
        events = recordset(_events_json, run.events, f"the events of {what}")
        journal = recordset(_journal_json, run.run_id, run.journal)
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

    # -- claims ----------------------------------------------------------------------------

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

    # -- the boundary write ------------------------------------------------------------------

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
        A commit whose last journal entry the run already holds is a retry of one that landed
        (its reply was lost): it writes nothing and returns the run's control. (Entries at the
        head of `journal` that are already there, left by a failed write, are skipped alone.)
        """
        state_json = encode_json(state, f"the state of run {run_id}")
        events_json = recordset(_events_json, events, f"the events of run {run_id}")
        approvals_json = recordset(approvals_json_of, run_id, approvals)
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
            "journal": recordset(_journal_json, run_id, journal),
            "landed": journal[-1].id if journal else None,
        }
        try:
            written = await self._q(f"commit run {run_id}", q.COMMIT, params)
        except StoreError as exc:
            if approvals and isinstance(exc.__cause__, pg_errors.UniqueViolation):
                await self._raise_taken(run_id, [a.approval_id for a in approvals])
            raise
        if not written and journal:
            # The flight recorder retries a write whose reply was lost; when the first attempt
            # did commit, its last journal entry is there and this one wrote nothing (no event
            # or approval request twice): it succeeded.
            last = journal[-1].id
            landed = await self._q(f"commit run {run_id}", q.LANDED, (run_id, token, last))
            if landed:
                control: str | None = landed[0][0]
                return control
        if not written:
            await self._raise_stale(run_id, token)
        now_control: str | None = written[0][0]
        return now_control

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

    # -- approvals ---------------------------------------------------------------------------

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
                "journal": recordset(
                    _journal_json, run_id, [journal] if journal is not None else []
                ),
            },
        )
        if rows:
            return _approval(rows[0])
        await self._raise_undecided(run_id, approval_id, what)
