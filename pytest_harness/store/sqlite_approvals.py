"""The SQLite store's approvals: compare-and-set decisions (listing them is `store.sql_base`'s)."""

from __future__ import annotations

import time

from pytest_harness.store.base import (
    ApprovalDecision,
    ApprovalRow,
    EventDraft,
    JournalDraft,
    check_decision,
    encode_json,
)
from pytest_harness.store.sqlite_connection import SQLiteConnection
from pytest_harness.store.sqlite_statements import _DECIDE, _approval, _journal_json

__all__ = ["SQLiteApprovals"]


class SQLiteApprovals(SQLiteConnection):
    """Approval requests and their decisions in a SQLite file."""

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
        journal_json = _journal_json(run_id, [journal] if journal is not None else [])
        event_json = (
            encode_json({"kind": event.kind, "data": event.data}, f"the events of run {run_id}")
            if event is not None
            else None
        )
        roles = encode_json(list(approver_roles), f"the roles of approver {approver!r}")
        what = f"answer approval {approval_id} of run {run_id}"
        rows = await self._w(
            what,
            _DECIDE,
            (
                decision,
                approver,
                roles,
                reason,
                time.time(),
                event_json,
                journal_json,
                approval_id,
                run_id,
            ),
        )
        if rows:
            return _approval(rows[0])
        await self._raise_undecided(run_id, approval_id, what)
