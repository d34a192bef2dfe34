"""Rows of the SQL stores (SQLite, Postgres) decoded into the store's records.

Both stores select the same columns in the same order (`runs`, `approvals`) and send journal
drafts as the same JSON, so one decoding serves both.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_harness.store.base import (
    JOURNAL_FORMAT,
    ApprovalRow,
    JournalDraft,
    JournalEntry,
    NewApproval,
    RunRecord,
    Sample,
    encode_json,
)

__all__ = [
    "APPROVAL_COLUMNS",
    "JOURNAL_COLUMNS",
    "JsonField",
    "Row",
    "approval_from_row",
    "approvals_json_of",
    "journal_from_row",
    "journal_json",
    "list_runs_query",
    "nested_or_text",
    "record_from_row",
    "sample_from_row",
    "samples_query",
]

Row = tuple[Any, ...]
_loads = json.loads


def record_from_row(row: Row) -> RunRecord:
    """A `runs` row (its columns in the stores' order) as a `RunRecord`."""
    return RunRecord(
        run_id=row[0],
        session_id=row[1],
        task=row[2],
        tenant=row[3],
        principal=_loads(row[4]),
        input=row[5],
        labels=_loads(row[6]),
        idempotency_key=row[7],
        status=row[8],
        state=_loads(row[9]),
        created_at=row[10],
        updated_at=row[11],
        lease_owner=row[12],
        lease_token=row[13],
        lease_expires=row[14],
        control=row[15],
        record=bool(row[16]),
    )


JOURNAL_COLUMNS = "id, seq, session_id, run_id, step, attempt_id, ts, execution_key, kind, payload"
"""The `journal` columns `journal_from_row` reads, in its order."""


def journal_from_row(row: Row) -> JournalEntry:
    """A `journal` row (`JOURNAL_COLUMNS`) as a `JournalEntry`."""
    return JournalEntry(
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


JsonField = Callable[[Any, str], Any]
"""How a builder writes a JSON field of its array: given the value and what it is of."""


def nested_or_text(value: Any, what: str) -> Any:
    """An object or array as itself, nested in the array; any other value as its JSON text.

    The stores read these fields back as text (`json_extract` on sqlite, `text` columns of
    `json_to_recordset` on Postgres): an object or array comes back as its JSON text, but a
    bare string would come back without its quotes and a null as SQL NULL, so those travel
    as a JSON string holding their text.
    """
    if isinstance(value, Mapping | list | tuple):
        return value
    return encode_json(value, what)


def journal_json(
    run_id: str, drafts: Sequence[JournalDraft], *, field: JsonField = nested_or_text
) -> str | None:
    """A commit's journal drafts as the JSON array the stores insert, or None for none.

    `field` writes each payload: `nested_or_text`, or every one as a string of its JSON text
    (what `postgres.connection.recordset` sends for an array with a NUL).
    """
    if not drafts:
        return None
    what = f"the journal of run {run_id}"
    return encode_json(
        [
            {
                "id": d.id,
                "kind": d.kind,
                "step": d.step,
                "ts": d.ts,
                "attempt_id": d.attempt_id,
                "execution_key": d.execution_key,
                "payload": field(d.payload, what),
            }
            for d in drafts
        ],
        what,
    )


APPROVAL_COLUMNS = (
    "approval_id, run_id, execution_key, args_digest, tool, args, rule_id, approvers, "
    "requested_by, self_approve, status, approver, approver_roles, reason, decided_at"
)
"""The `approvals` columns `approval_from_row` reads, in its order."""


def approval_from_row(row: Row) -> ApprovalRow:
    """An `approvals` row (`APPROVAL_COLUMNS`) as an `ApprovalRow`."""
    return ApprovalRow(
        approval_id=row[0],
        run_id=row[1],
        execution_key=row[2],
        args_digest=row[3],
        tool=row[4],
        args=_loads(row[5]),
        rule_id=row[6],
        approvers=tuple(_loads(row[7])),
        requested_by=row[8],
        self_approve=bool(row[9]),
        status=row[10],
        approver=row[11],
        approver_roles=tuple(_loads(row[12])),
        reason=row[13],
        decided_at=row[14],
    )


def list_runs_query(
    columns: str,
    mark: str,
    *,
    status: str | None,
    task: str | None,
    tenant: str | None,
    limit: int,
) -> tuple[str, list[Any]]:
    """`Store.list_runs` as SQL: the runs' `columns`, newest first, filtered, at most `limit`.

    `mark` is the store's placeholder (`?` for SQLite, `%s` for psycopg).
    """
    if limit < 0:
        raise ValueError(f"limit must be zero or more, got {limit}")
    where: list[str] = []
    params: list[Any] = []
    for column, value in (("status", status), ("task", task), ("tenant", tenant)):
        if value is not None:
            where.append(f"{column} = {mark}")
            params.append(value if type(value) is str else str.__str__(value))  # an Enum's value
    query = f"SELECT {columns} FROM runs"
    if where:
        query += " WHERE " + " AND ".join(where)
    query += f" ORDER BY seq DESC LIMIT {mark}"
    params.append(limit)
    return query, params


def approvals_json_of(
    run_id: str, approvals: Sequence[NewApproval], *, field: JsonField = nested_or_text
) -> str | None:
    """A commit's new approval requests as the JSON array the stores insert, or None.

    `field` writes `args` and `approvers` (see `journal_json`).
    """
    if not approvals:
        return None
    what = f"approval requests of run {run_id}"
    return encode_json(
        [
            {
                "approval_id": a.approval_id,
                "execution_key": a.execution_key,
                "args_digest": a.args_digest,
                "tool": a.tool,
                "args": field(a.args, what),
                "rule_id": a.rule_id,
                "approvers": field(a.approvers, what),
                "requested_by": a.requested_by,
                "self_approve": bool(a.self_approve),
            }
            for a in approvals
        ],
        what,
    )


def samples_query(
    mark: str,
    unlimited: int | None,
    *,
    task: str | None,
    grader: str | None,
    since: float | None,
    until: float | None,
    limit: int | None,
) -> tuple[str, list[Any]]:
    """`Store.samples` as SQL: newest first, filtered; `limit` None is no limit.

    `mark` is the store's placeholder (`?` for SQLite, `%s` for psycopg); `unlimited` is the
    limit its SQL reads as none (SQLite: -1, Postgres: NULL).
    """
    where: list[str] = []
    params: list[Any] = []
    for clause, value in (
        (f"task = {mark}", task),
        (f"grader = {mark}", grader),
        (f"created_at >= {mark}", since),
        (f"created_at < {mark}", until),
    ):
        if value is not None:
            where.append(clause)
            params.append(value)
    query = "SELECT run_id, task, grader, score, passed, detail, error, created_at FROM samples"
    if where:
        query += " WHERE " + " AND ".join(where)
    query += f" ORDER BY created_at DESC, seq DESC LIMIT {mark}"
    params.append(unlimited if limit is None else limit)
    return query, params


def sample_from_row(row: Row) -> Sample:
    """A `samples` row (the columns `samples_query` selects) as a `Sample`."""
    return Sample(
        run_id=row[0],
        task=row[1],
        grader=row[2],
        score=row[3],
        passed=bool(row[4]),
        detail=row[5],
        error=row[6],
        created_at=row[7],
    )
