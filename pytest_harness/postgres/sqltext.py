"""The SQL statements of the Postgres store, one per write (DESIGN §13).

Every write is one statement, so it is atomic on its own and one round trip. The writes that
add events (`_COMMIT`, `_CREATE`, `_DECIDE`) touch the run's row before they draw event ids
from the sequence: the row lock serializes the event writers of one run, so its events become
visible in cursor order and a reader after a cursor never skips one that commits later. Each
of them also calls `pg_notify(channel, run_id)`, which Postgres delivers at commit, so a stream
in another process learns of new events without polling.

`commit` is fenced in its own `WHERE`: `UPDATE runs … WHERE run_id = … AND lease_token = …`;
its events and approval requests are inserted by data-modifying CTEs that read the updated row,
so a stale token updates no row and inserts nothing. Events, journal entries and approvals
travel as JSON arrays read by `json_to_recordset`, their JSON fields (`payload`, `data`,
`args`, `approvers`) declared `text`: an object or array there comes back as its text exactly
as written, and a JSON string as the text it holds (how `store.rows.nested_or_text` sends any
other value, and `connection.recordset` every value of an array holding an escaped NUL, which
Postgres refuses to parse into text).
"""

from __future__ import annotations

from pytest_harness.store.rows import APPROVAL_COLUMNS

__all__ = [
    "ACQUIRE",
    "ADD_SAMPLES",
    "ANSWERED",
    "APPROVAL",
    "CLAIM",
    "COMMIT",
    "CONTROL",
    "CREATE",
    "DECIDE",
    "EXPIRED",
    "RELEASE",
    "RENEW",
    "RUN",
]

RUN = (
    "run_id, session_id, task, tenant, principal, input, labels, idempotency_key, status, "
    "state, created_at, updated_at, lease_owner, lease_token, lease_expires, control, record"
)
APPROVAL = APPROVAL_COLUMNS


def _journal_of(source: str) -> str:
    """A CTE body appending the `%(journal)s` entries to the journal of `source`'s run.

    Each entry gets the run's next `seq`; an id the run already journaled (a retried write) is
    skipped. The caller holds the run's row lock, so the run's journal writers are serialized.
    """
    return (
        "INSERT INTO journal (run_id, seq, id, session_id, step, attempt_id, ts, execution_key, "
        f"kind, payload) SELECT {source}.run_id, (SELECT coalesce(max(x.seq), 0) FROM journal x "
        f"WHERE x.run_id = {source}.run_id) + row_number() OVER (ORDER BY j.ord), j.id, "
        f"{source}.session_id, j.step, j.attempt_id, j.ts, j.execution_key, j.kind, "
        f"j.payload FROM {source}, ROWS FROM (json_to_recordset(%(journal)s::json) AS "
        "(id text, kind text, step integer, ts float8, attempt_id text, execution_key text, "
        "payload text)) WITH ORDINALITY AS j(id, kind, step, ts, attempt_id, execution_key, "
        "payload, ord) WHERE NOT EXISTS (SELECT 1 FROM journal y WHERE y.run_id = "
        f"{source}.run_id AND y.id = j.id) ORDER BY j.ord"
    )


_EVENTS_OF = (
    "ROWS FROM (json_to_recordset(%(events)s::json) AS (kind text, data text)) "
    "WITH ORDINALITY AS e(kind, data, ord)"
)

CREATE = (
    "WITH ins AS ("
    "INSERT INTO runs (run_id, session_id, task, tenant, tenant_key, principal, input, labels, "
    "idempotency_key, status, state, created_at, updated_at, lease_owner, lease_token, "
    "lease_expires, record) VALUES (%(run_id)s, %(session_id)s, %(task)s, %(tenant)s, "
    "%(tenant_key)s, %(principal)s, %(input)s, %(labels)s, %(idempotency_key)s, %(status)s, "
    "%(state)s, %(now)s, %(now)s, %(owner)s, %(token)s, %(expires)s, %(record)s) "
    "ON CONFLICT (tenant_key, task, idempotency_key) DO NOTHING "
    "RETURNING run_id, session_id, updated_at), "
    f"jr AS ({_journal_of('ins')}), "
    "ev AS (INSERT INTO events (run_id, kind, data, at) "
    f"SELECT ins.run_id, e.kind, e.data, ins.updated_at FROM ins, {_EVENTS_OF} "
    "ORDER BY e.ord) "
    "SELECT run_id FROM ins"
)

COMMIT = (
    "WITH upd AS ("
    "UPDATE runs SET status = %(status)s, state = %(state)s, updated_at = %(now)s, "
    "lease_expires = CASE WHEN %(release)s THEN NULL "
    "WHEN %(expires)s::float8 IS NULL OR lease_owner IS NULL THEN lease_expires "
    "ELSE %(expires)s::float8 END, "
    "lease_owner = CASE WHEN %(release)s THEN NULL ELSE lease_owner END, "
    "control = CASE WHEN control = %(clear_control)s THEN NULL ELSE control END "
    "WHERE run_id = %(run_id)s AND lease_token = %(token)s "
    # a retry of a commit that did land (its reply was lost) writes nothing again
    "AND NOT EXISTS (SELECT 1 FROM journal l WHERE l.run_id = %(run_id)s AND l.id = %(landed)s) "
    "RETURNING run_id, session_id, control, updated_at), "
    "ev AS (INSERT INTO events (run_id, kind, data, at) "
    f"SELECT upd.run_id, e.kind, e.data, upd.updated_at FROM upd, {_EVENTS_OF} "
    "ORDER BY e.ord), "
    f"jr AS ({_journal_of('upd')}), "
    "ap AS (INSERT INTO approvals (approval_id, run_id, execution_key, args_digest, tool, args, "
    "rule_id, approvers, requested_by, self_approve, requested_at) "
    "SELECT a.approval_id, upd.run_id, a.execution_key, a.args_digest, a.tool, a.args, "
    "a.rule_id, a.approvers, a.requested_by, a.self_approve, upd.updated_at "
    "FROM upd, ROWS FROM (json_to_recordset(%(approvals)s::json) AS (approval_id text, "
    "execution_key text, args_digest text, tool text, args text, rule_id text, approvers text, "
    "requested_by text, self_approve boolean)) WITH ORDINALITY AS a(approval_id, "
    "execution_key, args_digest, tool, args, rule_id, approvers, requested_by, self_approve, "
    "ord) ORDER BY a.ord) "
    "SELECT control, pg_notify(%(channel)s, run_id) FROM upd"
)

CONTROL = (
    "UPDATE runs SET control = CASE WHEN control = 'cancel' THEN 'cancel' ELSE %(control)s END, "
    "updated_at = %(now)s WHERE run_id = %(run_id)s AND status = ANY(%(wanted)s) "
    f"RETURNING {RUN}"
)

ACQUIRE = (
    "UPDATE runs SET lease_token = lease_token + 1, lease_owner = %(owner)s, "
    "lease_expires = %(expires)s WHERE run_id = %(run_id)s AND (lease_owner IS NULL "
    "OR lease_owner = %(owner)s OR lease_expires IS NULL OR lease_expires <= %(now)s) "
    "RETURNING lease_token"
)
RENEW = (
    "UPDATE runs SET lease_expires = %s "
    "WHERE run_id = %s AND lease_token = %s AND lease_owner IS NOT NULL RETURNING 1"
)
LANDED = (
    "SELECT r.control FROM runs r WHERE r.run_id = %s AND r.lease_token = %s "
    "AND EXISTS (SELECT 1 FROM journal l WHERE l.run_id = r.run_id AND l.id = %s)"
)
"""The run's control when the commit whose last journal entry is the third parameter landed."""
RELEASE = (
    "UPDATE runs SET lease_owner = NULL, lease_expires = NULL "
    "WHERE run_id = %s AND lease_token = %s RETURNING 1"
)

_NO_LIVE_LEASE = "(lease_owner IS NULL OR lease_expires IS NULL OR lease_expires <= %(now)s)"
EXPIRED = f"SELECT run_id FROM runs WHERE status = 'running' AND {_NO_LIVE_LEASE} ORDER BY seq"
_ALL_ANSWERED = (
    "status = 'awaiting_approval' AND NOT EXISTS (SELECT 1 FROM approvals p "
    "WHERE p.run_id = runs.run_id AND p.status = 'pending' "
    "AND NOT EXISTS (SELECT 1 FROM approvals d WHERE d.run_id = p.run_id "
    "AND d.execution_key = p.execution_key AND d.status = 'decline')) "
    "AND (SELECT max(a.decided_at) FROM approvals a WHERE a.run_id = runs.run_id) "
    "<= %(now)s - %(grace)s"
)
ANSWERED = f"SELECT run_id FROM runs WHERE {_ALL_ANSWERED} AND {_NO_LIVE_LEASE} ORDER BY seq"
CLAIM = (
    "WITH pick AS (SELECT seq AS picked, "
    "CASE WHEN lease_owner IS NULL THEN NULL ELSE lease_expires END AS was FROM runs "
    f"WHERE {_NO_LIVE_LEASE} AND task = ANY(%(tasks)s) AND NOT (run_id = ANY(%(exclude)s)) "
    f"AND (status = 'running' OR ({_ALL_ANSWERED})) "
    "ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED) "
    "UPDATE runs SET lease_token = lease_token + 1, lease_owner = %(owner)s, "
    "lease_expires = %(expires)s FROM pick WHERE runs.seq = pick.picked "
    f"RETURNING {', '.join('runs.' + c for c in RUN.split(', '))}, pick.was"
)
"""Lease the oldest claimable run, skipping rows another worker's claim has locked; also
return the lease expiry it had (`was`)."""

DECIDE = (
    "WITH run AS (SELECT run_id, session_id FROM runs WHERE run_id = %(run_id)s FOR UPDATE), "
    "dec AS (UPDATE approvals SET status = %(decision)s, approver = %(approver)s, "
    "approver_roles = %(roles)s, reason = %(reason)s, decided_at = %(now)s FROM run "
    "WHERE approvals.approval_id = %(approval_id)s AND approvals.run_id = run.run_id "
    "AND approvals.status = 'pending' "
    f"RETURNING {', '.join('approvals.' + c for c in APPROVAL.split(', '))}), "
    "ev AS (INSERT INTO events (run_id, kind, data, at) "
    "SELECT dec.run_id, %(kind)s, %(data)s, dec.decided_at FROM dec "
    "WHERE %(kind)s::text IS NOT NULL), "
    "decided AS (SELECT run.run_id, run.session_id FROM run, dec), "
    f"jr AS ({_journal_of('decided')}) "
    "SELECT dec.*, pg_notify(%(channel)s, dec.run_id) FROM dec"
)

ADD_SAMPLES = (
    "INSERT INTO samples (run_id, task, grader, score, passed, detail, error, created_at) "
    "SELECT s.run_id, s.task, s.grader, s.score, s.passed, s.detail, s.error, s.created_at "
    "FROM ROWS FROM (json_to_recordset(%s::json) AS (run_id text, task text, grader text, "
    "score float8, passed boolean, detail text, error text, created_at float8)) "
    "WITH ORDINALITY AS s(run_id, task, grader, score, passed, detail, error, created_at, ord) "
    "ORDER BY s.ord ON CONFLICT (run_id, grader) DO NOTHING"
)
"""Samples in one statement; a `(run_id, grader)` already stored (or earlier in the batch) is
skipped."""
