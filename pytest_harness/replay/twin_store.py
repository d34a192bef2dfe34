"""`TwinStore`: the private store of a replay's twin harness.

A replay drives its twin over a store nobody else reads: its events have no subscriber, and
its journal is read once, by the replay itself, to build the replay's own recording. So this
`MemoryStore` keeps no events, and its `journal()` gives each entry the payload the driver
noted instead of decoding the entry's JSON text again: decoding the whole journal at the end,
and encoding the events, were about a tenth of a replay's time.

Everything else is the memory store's own: each payload is still encoded when committed (so
one JSON cannot hold fails the replay as it fails a live run: `StoreError`, then
`RecordingError`), entries keep its order, `seq` and skipping of a retried entry, and the
run's state and approvals are kept as it keeps them. Its `kind` stays `memory` (the driver
renews no lease on it).

Giving out the noted objects is sound because nothing changes a payload once its boundary is
committed: each is built whole when noted (`runtime/journal.py`), and what it holds of the run
is either new or replaced whole later, never changed in place (a call's `args` and `outcome`,
see `RunState.calls`; the messages and trace entries, see `StateText`).
`tests/replay/test_twin_store.py` replays the same recordings over this store and over a
plain `MemoryStore` to hold that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pytest_harness.store.base import (
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
from pytest_harness.store.memory_rows import _Run

__all__ = ["TwinStore"]


class TwinStore(MemoryStore):
    """A `MemoryStore` without events whose journal entries carry the drafts' own payloads.

    `journal()` returns those payloads as they were noted (not copies): the caller must not
    change them. Everything else follows the `Store` contract as `MemoryStore` does.
    """

    def __init__(self) -> None:
        super().__init__()
        self._payloads: dict[str, Mapping[str, Any]] = {}
        """Each committed journal entry's payload as noted, by entry id."""

    def _noted(self, drafts: Sequence[JournalDraft]) -> None:
        """Keep the payloads of a committed write's entries (a retried entry keeps its first)."""
        for draft in drafts:
            self._payloads.setdefault(draft.id, draft.payload)

    def _entry(self, run: _Run, seq: int) -> JournalEntry:
        """The entry at `seq` with the payload as noted, not decoded from its text."""
        return run.entry(seq, self._payloads[run.journal[seq - 1][0]])

    async def create_run(self, run: NewRun) -> tuple[RunRecord, bool]:
        """`MemoryStore.create_run` without the run's first events."""
        record, created = await super().create_run(replace(run, events=()))
        if created:
            self._noted(run.journal)
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
        """`MemoryStore.commit` without the events."""
        control = await super().commit(
            run_id,
            token,
            status=status,
            state=state,
            approvals=approvals,
            lease_ttl=lease_ttl,
            release=release,
            clear_control=clear_control,
            journal=journal,
        )
        self._noted(journal)
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
        """`MemoryStore.decide_approval` without the event."""
        row = await super().decide_approval(
            run_id,
            approval_id,
            decision=decision,
            approver=approver,
            approver_roles=approver_roles,
            reason=reason,
            journal=journal,
        )
        if journal is not None:
            self._noted([journal])
        return row
