"""The rows `MemoryStore` keeps: a run (`_Run`) with its events and journal, an approval.

Payloads are JSON text, and events and journal entries plain tuples of it, so nothing a reader
gets back aliases what the store keeps (and the collector has little to walk in a long-lived
store).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pytest_harness.store.base import (
    JOURNAL_FORMAT,
    ApprovalRow,
    JournalDraft,
    JournalEntry,
    NewApproval,
    NewRun,
    RunRecord,
    encode_json,
)

__all__ = [
    "_Approval",
    "_Run",
    "_StoredEntry",
    "_StoredEvent",
    "_append_journal",
    "_encode_journal",
]

_loads = json.loads

_StoredEvent = tuple[int, str, str, float]
"""`(id, kind, data as JSON, at)`."""

_StoredEntry = tuple[str, str, int, float, str | None, str | None, str]
"""`(id, kind, step, ts, attempt_id, execution_key, payload as JSON)`: plain values only, so
the collector need not walk a long-lived journal (nor the drafts' payload objects)."""


def _text(value: str) -> str:
    """Return a plain `str` for `value` (a `str` Enum member gives its value, as sqlite does)."""
    return value if type(value) is str else str.__str__(value)


class _Run:
    """The mutable row of one run; payloads as JSON text."""

    __slots__ = (
        "approvals",
        "control",
        "created_at",
        "events",
        "idempotency_key",
        "input",
        "journal",
        "journal_ids",
        "labels",
        "lease_expires",
        "lease_owner",
        "lease_token",
        "principal",
        "recorded",
        "run_id",
        "seq",
        "session_id",
        "state",
        "status",
        "task",
        "tenant",
        "updated_at",
    )

    def __init__(
        self, run: NewRun, seq: int, *, principal: str, labels: str, state: str, now: float
    ) -> None:
        self.seq = seq
        self.run_id = run.run_id
        self.session_id = run.session_id
        self.task = run.task
        self.tenant = run.tenant
        self.principal = principal
        self.input = run.input
        self.labels = labels
        self.idempotency_key = run.idempotency_key
        self.status = _text(run.status)
        self.state = state
        self.created_at = now
        self.updated_at = now
        self.lease_owner: str | None = None
        self.lease_token = 0
        self.lease_expires: float | None = None
        self.control: str | None = None
        self.recorded = bool(run.record)
        self.events: list[_StoredEvent] = []
        self.approvals: list[_Approval] = []
        self.journal: list[_StoredEntry] = []
        """Entries in `seq` order (`seq` is the index + 1)."""
        self.journal_ids: set[str] = set()

    def entry(self, seq: int, payload: Mapping[str, Any] | None = None) -> JournalEntry:
        """The journal entry at `seq`; its payload decoded, or `payload` when given."""
        entry_id, kind, step, ts, attempt_id, execution_key, text = self.journal[seq - 1]
        return JournalEntry(
            id=entry_id,
            seq=seq,
            format=JOURNAL_FORMAT,
            session_id=self.session_id,
            run_id=self.run_id,
            step=step,
            attempt_id=attempt_id,
            ts=ts,
            execution_key=execution_key,
            kind=kind,
            payload=_loads(text) if payload is None else payload,
        )

    def record(self) -> RunRecord:
        return RunRecord(
            run_id=self.run_id,
            session_id=self.session_id,
            task=self.task,
            tenant=self.tenant,
            principal=_loads(self.principal),
            input=self.input,
            labels=_loads(self.labels),
            idempotency_key=self.idempotency_key,
            status=self.status,
            state=_loads(self.state),
            created_at=self.created_at,
            updated_at=self.updated_at,
            lease_owner=self.lease_owner,
            lease_token=self.lease_token,
            lease_expires=self.lease_expires,
            control=self.control,
            record=self.recorded,
        )


def _encode_journal(run_id: str, drafts: Sequence[JournalDraft]) -> list[_StoredEntry]:
    what = f"the journal of run {run_id}"
    return [
        (d.id, d.kind, d.step, d.ts, d.attempt_id, d.execution_key, encode_json(d.payload, what))
        for d in drafts
    ]


def _append_journal(run: _Run, encoded: list[_StoredEntry]) -> None:
    for entry in encoded:
        if entry[0] in run.journal_ids:
            continue  # a retried write: this boundary is journaled already
        run.journal_ids.add(entry[0])
        run.journal.append(entry)


class _Approval:
    """The mutable row of one approval request; arguments as JSON text."""

    __slots__ = (
        "approver",
        "approver_roles",
        "args",
        "decided_at",
        "new",
        "reason",
        "run_id",
        "status",
    )

    def __init__(self, run_id: str, new: NewApproval, args: str) -> None:
        self.run_id = run_id
        self.new = new
        self.args = args
        self.status: Literal["pending", "approve", "decline"] = "pending"
        self.approver: str | None = None
        self.approver_roles: tuple[str, ...] = ()
        self.reason: str | None = None
        self.decided_at: float | None = None

    def row(self) -> ApprovalRow:
        new = self.new
        return ApprovalRow(
            approval_id=new.approval_id,
            run_id=self.run_id,
            execution_key=new.execution_key,
            args_digest=new.args_digest,
            tool=new.tool,
            args=_loads(self.args),
            rule_id=new.rule_id,
            approvers=tuple(new.approvers),
            requested_by=new.requested_by,
            self_approve=bool(new.self_approve),
            status=self.status,
            approver=self.approver,
            approver_roles=self.approver_roles,
            reason=self.reason,
            decided_at=self.decided_at,
        )
