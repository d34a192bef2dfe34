"""The SQLite store's write and read statements, and the decoding of the rows they return.

Each runtime write is one of these statements, or (`create_run`, `commit`) one of them followed
by the `_EVENT` inserts of its events, in one transaction (see `store.sqlite`).
"""

from __future__ import annotations

import json
from typing import Any

from pytest_harness.store.rows import (
    APPROVAL_COLUMNS,
    approval_from_row,
    journal_json,
    record_from_row,
)

_Row = tuple[Any, ...]
_loads = json.loads

_MAX_ID = 2**63 - 1
"""The largest SQLite integer; a cursor beyond it reads nothing."""

_RUN = (
    "run_id, session_id, task, tenant, principal, input, labels, idempotency_key, status, "
    "state, created_at, updated_at, lease_owner, lease_token, lease_expires, control, record"
)
_APPROVAL = APPROVAL_COLUMNS

_CREATE = (
    "INSERT INTO runs (run_id, session_id, task, tenant, tenant_key, principal, input, labels, "
    "idempotency_key, status, state, created_at, updated_at, lease_owner, lease_token, "
    "lease_expires, record, pending_journal) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (tenant_key, task, idempotency_key) DO NOTHING"
)
"""Insert a run; a taken idempotency key inserts nothing (the cursor's `rowcount` is 0)."""
_EVENT = "INSERT INTO events (run_id, kind, data, at) VALUES (?, ?, ?, ?)"


def _commit_statement(approvals: bool, journal: bool, status: bool, control: bool) -> str:
    """A commit's fenced UPDATE of the run's row.

    Its parameters are numbered, in `_COMMIT_PARAMS`'s order, so one tuple binds every variant
    (binding a tuple is cheaper than a mapping, whose names are looked up one by one): each
    variant uses the last one, so SQLite counts them all.

    `pending_approvals` and `pending_journal` are set only when given: both are NULL between
    writes (their triggers empty them), so leaving one out changes nothing but this: its
    `AFTER UPDATE OF` trigger is not run for a write without any.

    Without `status` the statement leaves the status column alone and matches only a row whose
    status is already the one written (so the `runs_status` index is not touched: SQLite
    rewrites the entries of every index on a column the `SET` names, changed or not). Without
    `control` it matches only a row with no pending control request and returns nothing: the
    cursor's `rowcount` says whether it found the row. With `control` it clears the request
    when it is the one the commit acted on and returns what is left (`RETURNING control`).
    """
    pending = ("pending_approvals = ?3, " if approvals else "") + (
        "pending_journal = ?4, " if journal else ""
    )
    sets = ("status = ?1, " if status else "") + (
        "control = CASE WHEN control = ?2 THEN NULL ELSE control END, " if control else ""
    )
    where = ("" if status else " AND status = ?1") + (
        " RETURNING control" if control else " AND control IS NULL"
    )
    return (
        f"UPDATE runs SET {sets}state = ?5, updated_at = ?6, {pending}"
        "lease_expires = CASE WHEN ?8 THEN NULL "
        "WHEN ?7 IS NULL OR lease_owner IS NULL THEN lease_expires ELSE ?7 END, "
        "lease_owner = CASE WHEN ?8 THEN NULL ELSE lease_owner END "
        f"WHERE run_id = ?9 AND lease_token = ?10{where}"
    )


_COMMIT_PARAMS = (
    "status",
    "clear_control",
    "approvals",
    "journal",
    "state",
    "now",
    "expires",
    "release",
    "run_id",
    "token",
)
"""The commit statements' parameters `?1` … `?10`, in order."""
_COMMIT = {
    (approvals, journal, status, control): _commit_statement(approvals, journal, status, control)
    for approvals in (False, True)
    for journal in (False, True)
    for status in (False, True)
    for control in (False, True)
    if status or not control
}
"""A commit's UPDATE, by whether it carries approval requests and journal entries, whether it
writes the status column, and whether it reads and clears a pending control request.

A commit tries the narrowest statement that can apply first: the steady one (status unchanged,
no control request: the most boundaries of a run), then the one that writes the status, then
the one that acts on a control request; the last finding no row means a stale token or an
unknown run (`store.sqlite_runs`)."""
_CONTROL = (
    "UPDATE runs SET control = CASE WHEN control = 'cancel' THEN 'cancel' ELSE :control END, "
    "updated_at = :now "
    f"WHERE run_id = :run_id AND status IN (SELECT value FROM json_each(:wanted)) RETURNING {_RUN}"
)
_ACQUIRE = (
    "UPDATE runs SET lease_token = lease_token + 1, lease_owner = :owner, lease_expires = :expires "
    "WHERE run_id = :run_id AND (lease_owner IS NULL OR lease_owner = :owner "
    "OR lease_expires IS NULL OR lease_expires <= :now) RETURNING lease_token"
)
_CLAIMABLE = (
    "(r.lease_owner IS NULL OR r.lease_expires IS NULL OR r.lease_expires <= :now) "
    "AND r.task IN (SELECT value FROM json_each(:tasks)) "
    "AND r.run_id NOT IN (SELECT value FROM json_each(:exclude)) "
    "AND (r.status = 'running' OR (r.status = 'awaiting_approval' "
    "AND NOT EXISTS (SELECT 1 FROM approvals p WHERE p.run_id = r.run_id "
    "AND p.status = 'pending' AND NOT EXISTS (SELECT 1 FROM approvals d "
    "WHERE d.run_id = p.run_id AND d.execution_key = p.execution_key "
    "AND d.status = 'decline')) "
    "AND (SELECT max(a.decided_at) FROM approvals a WHERE a.run_id = r.run_id) "
    "<= :now - :grace))"
)
"""A run `claim_run` may take: `running` with no live lease, or `awaiting_approval` with every
approval answered (none open: a request pending for a call another request declined is moot;
at least one answered: `max` of none is NULL) long enough ago."""
_CLAIM_PICK = (
    f"SELECT r.seq, CASE WHEN r.lease_owner IS NULL THEN NULL ELSE r.lease_expires END "
    f"FROM runs r WHERE {_CLAIMABLE} ORDER BY r.seq LIMIT 1"
)
_CLAIM = (
    "UPDATE runs SET lease_token = lease_token + 1, lease_owner = :owner, "
    f"lease_expires = :expires WHERE seq = :seq AND seq IN (SELECT r.seq FROM runs r "
    f"WHERE {_CLAIMABLE}) RETURNING {_RUN}"
)
"""Take the picked run, if it is still claimable (another writer may have taken it since)."""
_RENEW = (
    "UPDATE runs SET lease_expires = ? "
    "WHERE run_id = ? AND lease_token = ? AND lease_owner IS NOT NULL RETURNING 1"
)
_RELEASE = (
    "UPDATE runs SET lease_owner = NULL, lease_expires = NULL "
    "WHERE run_id = ? AND lease_token = ? RETURNING 1"
)
_DECIDE = (
    "UPDATE approvals SET status = ?, approver = ?, approver_roles = ?, reason = ?, "
    "decided_at = ?, pending_event = ?, pending_journal = ? "
    f"WHERE approval_id = ? AND run_id = ? AND status = 'pending' RETURNING {_APPROVAL}"
)


def _text(value: str) -> str:
    """Return a plain `str` for `value` (a `str` Enum member gives its value)."""
    return value if type(value) is str else str.__str__(value)


_record = record_from_row
_journal_json = journal_json
_approval = approval_from_row
