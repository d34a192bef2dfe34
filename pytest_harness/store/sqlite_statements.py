"""The SQLite store's write and read statements, and the decoding of the rows they return.

Each runtime write is one of these statements, or (`create_run`, `commit`) one of them followed
by the `_EVENT` inserts of its events, in one transaction (see `store.sqlite`).
"""

from __future__ import annotations

import json
from typing import Any, Literal, get_args

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


def _create_statement(tenant: bool, key: bool, lease: bool, journal: bool) -> str:
    """The INSERT of a new run, naming only the nullable columns it has a value for.

    Those it leaves out are NULL. sqlite3 binds an exact `str`, `int` or `float` as it is, but
    tries to adapt anything else, `None` included (two failed attribute lookups, each an
    exception), so a NULL is better written by leaving its column out. Parameters are bound in
    the order `SQLiteRuns.create_run` builds them.
    """
    columns = ["run_id", "session_id", "task", "tenant_key", "principal", "input", "labels"]
    columns += ["status", "state", "created_at", "updated_at", "lease_token", "record"]
    columns += ["tenant"] if tenant else []
    columns += ["idempotency_key"] if key else []
    columns += ["lease_owner", "lease_expires"] if lease else []
    columns += ["pending_journal"] if journal else []
    return (
        f"INSERT INTO runs ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))}) "
        "ON CONFLICT (tenant_key, task, idempotency_key) DO NOTHING"
    )


_CREATE = {
    (tenant, key, lease, journal): _create_statement(tenant, key, lease, journal)
    for tenant in (False, True)
    for key in (False, True)
    for lease in (False, True)
    for journal in (False, True)
}
"""Insert a run, by which of tenant, idempotency key, lease and journal it has; a taken
idempotency key inserts nothing (the cursor's `rowcount` is 0)."""
_EVENT = "INSERT INTO events (run_id, kind, data, at) VALUES (?, ?, ?, ?)"

Steady = Literal["steady", "status", "control"]
"""Which of a commit's statements: `steady` leaves the status alone, `status` writes it,
`control` also acts on a pending pause or cancel."""
Lease = Literal["keep", "ttl", "release"]
"""What a commit does to the lease: nothing, extend it by a ttl, or release it."""


def _commit_statement(approvals: bool, journal: bool, kind: Steady, lease: Lease) -> str:
    """A commit's fenced UPDATE of the run's row.

    Its parameters are plain `?`s (Python 3.12.0 to 3.12.3 warn on every numbered `?1` bound
    from a sequence), bound from one tuple in the order they appear: the status being set
    (`status`, `control`), the request to clear (`control`), the approval requests and journal
    entries when it carries any, the state, the time, the lease's expiry with a ttl, the run
    id and the token, then the status being checked (`steady`). Nothing binds `None` or a
    `bool` (sqlite3 tries to adapt anything but an exact `str`, `int` or `float`, at the cost
    of two exceptions): what is absent is not named.

    `pending_approvals` and `pending_journal` are set only when given: both are NULL between
    writes (their triggers empty them), so leaving one out changes nothing but this: its
    `AFTER UPDATE OF` trigger is not run for a write without any.

    `steady` leaves the status column alone and matches only a row whose status is already the
    one written (so the `runs_status` index is not touched: SQLite rewrites the entries of
    every index on a column the `SET` names, changed or not). `steady` and `status` match only
    a row with no pending control request and return nothing: the cursor's `rowcount` says
    whether they found the row. `control` clears the request when it is the one the commit
    acted on, and returns what is left (`RETURNING control`).
    """
    sets = [] if kind == "steady" else ["status = ?"]
    if kind == "control":
        sets.append("control = CASE WHEN control = ? THEN NULL ELSE control END")
    sets += ["pending_approvals = ?"] if approvals else []
    sets += ["pending_journal = ?"] if journal else []
    sets += ["state = ?", "updated_at = ?"]
    if lease == "release":
        sets += ["lease_owner = NULL", "lease_expires = NULL"]
    elif lease == "ttl":  # only a held lease is extended
        sets.append("lease_expires = CASE WHEN lease_owner IS NULL THEN lease_expires ELSE ? END")
    where = "run_id = ? AND lease_token = ?"
    where += " AND status = ?" if kind == "steady" else ""
    where += " RETURNING control" if kind == "control" else " AND control IS NULL"
    return f"UPDATE runs SET {', '.join(sets)} WHERE {where}"


_COMMIT = {
    (approvals, journal, kind, lease): _commit_statement(approvals, journal, kind, lease)
    for approvals in (False, True)
    for journal in (False, True)
    for kind in get_args(Steady)
    for lease in get_args(Lease)
}
"""A commit's UPDATE, by whether it carries approval requests and journal entries, which kind
it is, and what it does to the lease.

A commit tries the narrowest statement that can apply first: `steady` (status unchanged, no
control request: the most boundaries of a run), then `status`, then `control`; the last
finding no row means a stale token or an unknown run (`store.sqlite_runs`)."""
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
