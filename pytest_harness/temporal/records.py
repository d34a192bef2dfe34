"""A Temporal run read from its workflow's snapshot: its result, its journal, a store view.

`result_of` is the run's `RunResult`; `journal_entries` its journal as a store returns it;
`summary_of` its line of `runs()` (`failed_outside` for a workflow ended outside the harness,
`unread_run` for one whose head cannot be read).
`RunView` is one Temporal run seen as a read-only `Store`, for the flight recorder's export.

A run on Temporal keeps its record and journal in its workflow, and the artifacts its tools
returned in the worker's `state:` store. `RunView` puts the two together behind the store
protocol, so `.hx` export (`archive.export.export_run`) reads a Temporal run exactly as it
reads a stored one: `get_run`, `journal`, `approvals` and `events` answer from the workflow's
snapshot, `artifact` from the `state:` store. Nothing can be written through it: every write
raises `StoreError` naming the method, so an export can never change a run.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, NoReturn

from temporalio.client import WorkflowExecution, WorkflowExecutionStatus

from pytest_harness.errors import StoreError, UnknownRun
from pytest_harness.runtime.approval_checks import _moot
from pytest_harness.runtime.results import RunResult, RunStatus, RunSummary
from pytest_harness.runtime.state import result_from_state
from pytest_harness.store.base import (
    JOURNAL_FORMAT,
    ApprovalDecision,
    ApprovalRow,
    Event,
    EventDraft,
    JournalDraft,
    JournalEntry,
    NewApproval,
    NewRun,
    RunRecord,
    Sample,
    Store,
    StoredArtifact,
    check_limit,
    parse_cursor,
)
from pytest_harness.temporal.segment import approval_rows, record_of

__all__ = [
    "ENDED_OUTSIDE",
    "RunView",
    "failed_outside",
    "journal_entries",
    "result_of",
    "summary_of",
    "unread_run",
]


def journal_entries(snapshot: Mapping[str, Any]) -> list[JournalEntry]:
    """The journal the run's workflow holds, as a store returns it (in `seq` order)."""
    run_id, session_id = str(snapshot["run_id"]), str(snapshot["session_id"])
    entries = [
        JournalEntry(
            id=str(e["id"]),
            seq=int(e["seq"]),
            format=int(e.get("format") or JOURNAL_FORMAT),
            session_id=session_id,
            run_id=run_id,
            step=int(e["step"]),
            attempt_id=e.get("attempt_id"),
            ts=float(e["ts"]),
            execution_key=e.get("execution_key"),
            kind=str(e["kind"]),
            payload=dict(e["payload"]),
        )
        for e in snapshot.get("journal") or ()
    ]
    entries.sort(key=lambda e: e.seq)
    return entries


class RunView:
    """A read-only `Store` holding one run: the workflow's `snapshot` plus `artifacts`.

    `artifacts` is the spec's `state:` store, where workers put the bytes tools return (a
    `memory` store in another process than the worker's holds none: the archive catalogues
    them `missing`).
    """

    kind = "temporal"

    def __init__(self, snapshot: Mapping[str, Any], artifacts: Store) -> None:
        self._snapshot = snapshot
        self._record = record_of(snapshot)
        self._artifacts = artifacts

    def _run(self, run_id: str) -> RunRecord:
        if run_id != self._record.run_id:
            raise UnknownRun(run_id)
        return self._record

    def _read_only(self, method: str) -> NoReturn:
        raise StoreError(
            f"{method}: run {self._record.run_id} is read from its Temporal workflow for "
            "export, and nothing can be written through this view; change a run through "
            "its harness (approve, resolve, pause, cancel)"
        )

    # -- reading ----------------------------------------------------------------------------

    async def open(self) -> None:
        """Nothing to open: the snapshot was read already (the `state:` store is open)."""

    async def close(self) -> None:
        """Nothing to close: the `state:` store belongs to the harness."""

    async def get_run(self, run_id: str) -> RunRecord:
        """The run, as its workflow holds it (`UnknownRun` for any other id)."""
        return self._run(run_id)

    async def journal(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[JournalEntry]:
        """The journal the workflow holds, after `after`, in `seq` order."""
        self._run(run_id)
        check_limit(limit)
        entries = [e for e in journal_entries(self._snapshot) if e.seq > after]
        return entries if limit is None else entries[:limit]

    async def artifact(self, sha256: str) -> StoredArtifact | None:
        """The artifact's bytes, from the `state:` store."""
        return await self._artifacts.artifact(sha256)

    async def approvals(self, run_id: str) -> list[ApprovalRow]:
        """The run's approval requests, as the workflow holds them."""
        self._run(run_id)
        return approval_rows(self._snapshot)

    async def events(
        self, run_id: str, *, after: str = "0", limit: int | None = None
    ) -> list[Event]:
        """The run's public events after the cursor `after` (the event's position)."""
        self._run(run_id)
        start = parse_cursor(after)
        check_limit(limit)
        at = self._record.updated_at
        found = [
            Event(run_id=run_id, cursor=str(i + 1), kind=e["type"], data=e["data"], at=at)
            for i, e in enumerate(self._snapshot.get("events") or ())
            if i >= start
        ]
        return found if limit is None else found[:limit]

    async def session_runs(self, session_id: str, *, before: str | None = None) -> list[RunRecord]:
        """The run itself, when it belongs to `session_id` (the view holds one run)."""
        if before is not None:
            self._run(before)
            return []
        return [self._record] if self._record.session_id == session_id else []

    async def list_runs(
        self,
        *,
        status: str | None = None,
        task: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        """The run itself, when it matches."""
        check_limit(limit)
        r = self._record
        wanted = (
            (status is None or r.status == status)
            and (task is None or r.task == task)
            and (tenant is None or r.tenant == tenant)
        )
        return [r][:limit] if wanted else []

    async def expired_runs(self, *, now: float | None = None) -> list[str]:
        """None: Temporal, not a lease, notices a dead worker."""
        return []

    async def samples(
        self,
        *,
        task: str | None = None,
        grader: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = 100,
    ) -> list[Sample]:
        """The online eval samples of the `state:` store."""
        return await self._artifacts.samples(
            task=task, grader=grader, since=since, until=until, limit=limit
        )

    # -- writing: refused ---------------------------------------------------------------------

    async def create_run(self, run: NewRun) -> tuple[RunRecord, bool]:
        """Refused: `StoreError` (the view is read-only)."""
        self._read_only("create_run")

    async def acquire_lease(self, run_id: str, owner: str, ttl: float) -> int:
        """Refused: `StoreError` (the view is read-only)."""
        self._read_only("acquire_lease")

    async def renew_lease(self, run_id: str, token: int, ttl: float) -> None:
        """Refused: `StoreError` (the view is read-only)."""
        self._read_only("renew_lease")

    async def release_lease(self, run_id: str, token: int) -> None:
        """Refused: `StoreError` (the view is read-only)."""
        self._read_only("release_lease")

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
        """Refused: `StoreError` (the view is read-only)."""
        self._read_only("commit")

    async def request_control(
        self, run_id: str, control: str, *, statuses: Collection[str]
    ) -> RunRecord:
        """Refused: `StoreError` (the view is read-only)."""
        self._read_only("request_control")

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
        """Refused: `StoreError` (the view is read-only)."""
        self._read_only("decide_approval")

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
        """Refused: `StoreError` (the view is read-only)."""
        self._read_only("claim_run")

    async def put_artifact(self, artifact: StoredArtifact) -> None:
        """Refused: `StoreError` (the view is read-only)."""
        self._read_only("put_artifact")

    async def add_samples(self, samples: Sequence[Sample]) -> None:
        """Refused: `StoreError` (the view is read-only)."""
        self._read_only("add_samples")


def result_of(snap: Mapping[str, Any]) -> RunResult:
    """The run's result, from the snapshot its workflow holds."""
    rows = approval_rows(snap)
    answered = frozenset(r.approval_id for r in rows if r.status != "pending") | _moot(rows)
    return result_from_state(
        run_id=snap["run_id"],
        session_id=snap["session_id"],
        task=snap["task"],
        status=snap["status"],
        state=snap["state"],
        labels=snap.get("labels") or {},
        answered=answered,
    )


ENDED_OUTSIDE = frozenset(
    {
        WorkflowExecutionStatus.FAILED,
        WorkflowExecutionStatus.TERMINATED,
        WorkflowExecutionStatus.TIMED_OUT,
        WorkflowExecutionStatus.CANCELED,
    }
)
"""Workflow ends the harness never chooses: the run's state went with them (`result` says why)."""


def summary_of(snap: Mapping[str, Any]) -> RunSummary:
    """A run's line of `runs()`, from its head."""
    return RunSummary(
        run_id=snap["run_id"],
        session_id=snap["session_id"],
        task=snap["task"],
        status=RunStatus(snap["status"]),
        tenant=snap.get("tenant"),
        principal=str(snap["principal"].get("id")),
        created_at=float(snap["created_at"]),
        updated_at=float(snap["updated_at"]),
    )


def failed_outside(wf: WorkflowExecution, memo: Mapping[str, Any]) -> RunSummary:
    """A run whose workflow ended outside the harness, listed as `failed` from its memo.

    Runs started by an earlier version have no tenant or principal in their memo: None and ''.
    """
    return unread_run(wf, memo, RunStatus.FAILED, None)


def unread_run(
    wf: WorkflowExecution, memo: Mapping[str, Any], status: RunStatus, updated_at: float | None
) -> RunSummary:
    """A run's line of `runs()` when its head cannot be read: from its workflow's memo.

    `status` is what its workflow says: `running` while it runs (whether the run waits for
    an approval only its state says), `failed` once it ended without a run's head.
    `updated_at` is when its workflow last changed (its close, else its latest event);
    without it, its start. A memo without a tenant or principal (an earlier version's, or
    another program's) gives None and ''.
    """
    started = wf.start_time.timestamp()
    closed = wf.close_time.timestamp() if wf.close_time else None
    tenant = memo.get("tenant")
    return RunSummary(
        run_id=wf.id,
        session_id=str(memo.get("session", "")),
        task=str(memo.get("task", "")),
        status=status,
        tenant=None if tenant is None else str(tenant),
        principal=str(memo.get("principal", "")),
        created_at=started,
        updated_at=updated_at or closed or started,
    )
