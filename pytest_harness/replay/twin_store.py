"""`TwinStore`: the private store of a replay's twin harness.

A replay drives its twin over a store nobody else reads: its events have no subscriber, and
its journal is read once, by the replay itself, to build the replay's own recording. So this
`MemoryStore` keeps no events, and keeps each journal entry's payload as the driver noted it
instead of as JSON text: decoding the whole journal again at the end, and encoding the events,
were about a tenth of a replay's time.

Every payload is still encoded when committed, as the memory store encodes it, so one JSON
cannot hold fails the replay as it fails a live run (`StoreError`, then `RecordingError`);
only the text is not kept. The run's state and approvals are kept as the memory store keeps
them. Its `kind` stays `memory` (the driver renews no lease on it).

Keeping the noted objects is sound because nothing changes a payload once its boundary is
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
    JOURNAL_FORMAT,
    ApprovalDecision,
    ApprovalRow,
    EventDraft,
    JournalDraft,
    JournalEntry,
    NewApproval,
    NewRun,
    RunRecord,
    encode_json,
    stale_token,
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

    @staticmethod
    def _check(run_id: str, drafts: Sequence[JournalDraft]) -> None:
        """Encode each payload as the memory store would; `StoreError` for one JSON can't hold."""
        what = f"the journal of run {run_id}"
        for draft in drafts:
            encode_json(draft.payload, what)

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
        self._check(run.run_id, run.journal)
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
        run = self._run(run_id)
        if run.lease_token != token:  # the memory store's first check, before any encoding
            raise stale_token(run_id, token, run.lease_token, run.lease_owner)
        self._check(run_id, journal)
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
        if journal is not None:
            self._check(run_id, [journal])
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
