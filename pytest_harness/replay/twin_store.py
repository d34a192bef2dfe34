"""`TwinStore`: the private store of a replay's twin harness.

A replay drives its twin over a store nobody else reads: its events have no subscriber, and
its journal is read once, by the replay itself, to build the replay's own recording. So this
`MemoryStore` keeps no events and keeps the journal entries as the driver noted them instead of
as JSON text: encoding each payload at its commit and decoding it all again at the end was a
sixth of a replay's time.

What makes keeping the noted objects sound is the drive's own rule (`runtime/state.py`,
`StateText`): a payload is built whole when its boundary is noted and nothing changes it
afterwards; what it holds of the run (a call's arguments, an outcome's dict, the messages) is
replaced, never changed in place. The run's state, approvals and everything else are kept as
the memory store keeps them (JSON text, checked when committed), so a state nobody could
store still fails the replay as it fails a live run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pytest_harness.store.base import (
    JOURNAL_FORMAT,
    ApprovalDecision,
    ApprovalRow,
    EventDraft,
    JournalDraft,
    JournalEntry,
    NewApproval,
    NewRun,
    RunRecord,
)
from pytest_harness.store.memory import MemoryStore

__all__ = ["TwinStore"]


class TwinStore(MemoryStore):
    """A `MemoryStore` without events whose journal entries are the drafts' own payloads.

    `journal()` returns those payloads as they were noted (not copies): the caller must not
    change them. Everything else follows the `Store` contract as `MemoryStore` does.
    """

    def __init__(self) -> None:
        super().__init__()
        self._entries: dict[str, list[JournalEntry]] = {}
        self._entry_ids: set[str] = set()

    def _keep(self, run_id: str, drafts: Sequence[JournalDraft]) -> None:
        """Append the drafts to the run's journal; an id it already holds is skipped."""
        if not drafts:
            return
        session = self._run(run_id).session_id
        kept = self._entries.setdefault(run_id, [])
        for draft in drafts:
            if draft.id in self._entry_ids:
                continue  # a retried write: this boundary is journaled already
            self._entry_ids.add(draft.id)
            kept.append(
                JournalEntry(
                    id=draft.id,
                    seq=len(kept) + 1,
                    format=JOURNAL_FORMAT,
                    session_id=session,
                    run_id=run_id,
                    step=draft.step,
                    attempt_id=draft.attempt_id,
                    ts=draft.ts,
                    execution_key=draft.execution_key,
                    kind=draft.kind,
                    payload=draft.payload,
                )
            )

    async def create_run(self, run: NewRun) -> tuple[RunRecord, bool]:
        """Insert the run (without its events) and keep its first journal entries."""
        record, created = await super().create_run(replace(run, events=(), journal=()))
        if created:
            self._entries[record.run_id] = []
            self._keep(record.run_id, run.journal)
        return record, created

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
        """`MemoryStore.commit` without the events; the journal is kept once the write is."""
        control = await super().commit(
            run_id,
            token,
            status=status,
            state=state,
            approvals=approvals,
            lease_ttl=lease_ttl,
            release=release,
            clear_control=clear_control,
        )
        self._keep(run_id, journal)
        return control

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
        """`MemoryStore.decide_approval` without the event; its journal entry is kept."""
        row = await super().decide_approval(
            run_id,
            approval_id,
            decision=decision,
            approver=approver,
            approver_roles=approver_roles,
            reason=reason,
        )
        if journal is not None:
            self._keep(run_id, [journal])
        return row

    async def journal(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[JournalEntry]:
        """The run's journal entries after `seq` `after`, in order, their payloads as noted."""
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be zero or more, got {limit}")
        self._run(run_id)
        kept = self._entries.get(run_id, [])
        start = max(0, after)
        return kept[start:] if limit is None else kept[start : start + limit]
