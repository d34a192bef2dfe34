"""The records a store keeps and returns: runs, events, approvals, journal entries, artifacts.

Values of the store protocol (`store/base.py`, which re-exports them): drafts a caller hands
to a write (`NewRun`, `EventDraft`, `NewApproval`, `JournalDraft`) and rows a read returns
(`RunRecord`, `Event`, `ApprovalRow`, `JournalEntry`, `StoredArtifact`, `Sample`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "JOURNAL_FORMAT",
    "ApprovalDecision",
    "ApprovalRow",
    "Event",
    "EventDraft",
    "JournalDraft",
    "JournalEntry",
    "NewApproval",
    "NewRun",
    "RunRecord",
    "Sample",
    "StoredArtifact",
]


ApprovalDecision = Literal["approve", "decline"]


@dataclass(slots=True, unsafe_hash=True)  # not frozen: built per run, never changed
class EventDraft:
    """An event to append in the same transaction as the boundary it describes."""

    kind: str
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """A stored event. `cursor` orders the events of one run; pass it as `after=` to resume.

    `at` is the time of the write that stored it.
    """

    run_id: str
    cursor: str
    kind: str
    data: Mapping[str, Any]
    at: float


JOURNAL_FORMAT = 1
"""The version of journal entries this code writes (`JournalEntry.format`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JournalDraft:
    """A journal entry to append with the write that commits its boundary (DESIGN §12).

    `id` is a UUID chosen by the writer and kept when a failed write is retried; the store
    assigns `seq` and skips an `id` the run's journal already holds. `ts` is when the boundary
    happened (`time.time()`). `payload` is JSON, encoded like every other payload.
    """

    id: str
    kind: str
    step: int
    ts: float
    payload: Mapping[str, Any] = field(default_factory=dict)
    attempt_id: str | None = None
    execution_key: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JournalEntry:
    """A stored journal entry: its draft's fields plus its run, session, `seq` and format."""

    id: str
    seq: int
    format: int
    session_id: str
    run_id: str
    step: int
    attempt_id: str | None
    ts: float
    execution_key: str | None
    kind: str
    payload: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The entry as one record of a `.hx` archive's `records.jsonl`."""
        return {
            "id": self.id,
            "seq": self.seq,
            "format": self.format,
            "session_id": self.session_id,
            "run_id": self.run_id,
            "step": self.step,
            "attempt_id": self.attempt_id,
            "ts": self.ts,
            "execution_key": self.execution_key,
            "kind": self.kind,
            "payload": dict(self.payload),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredArtifact:
    """Bytes a tool produced, kept by their SHA-256 (hex), with their media type and name."""

    sha256: str
    media_type: str
    data: bytes
    name: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NewApproval:
    """A pending approval request, written with the commit that suspends the run."""

    approval_id: str
    execution_key: str
    args_digest: str
    tool: str
    args: Mapping[str, Any]
    rule_id: str
    approvers: tuple[str, ...]
    requested_by: str
    self_approve: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRow:
    """An approval request and, once answered, its decision."""

    approval_id: str
    run_id: str
    execution_key: str
    args_digest: str
    tool: str
    args: Mapping[str, Any]
    rule_id: str
    approvers: tuple[str, ...]
    requested_by: str
    self_approve: bool
    status: Literal["pending", "approve", "decline"]
    approver: str | None = None
    approver_roles: tuple[str, ...] = ()
    reason: str | None = None
    decided_at: float | None = None


@dataclass(slots=True, kw_only=True, unsafe_hash=True)  # not frozen: built per run, never changed
class NewRun:
    """A run to create.

    With an `idempotency_key`, a run of the same tenant, task and key that already exists is
    returned instead (a `None` tenant and `""` count as the same tenant).
    """

    run_id: str
    session_id: str
    task: str
    tenant: str | None
    principal: Mapping[str, Any]
    input: str
    labels: Mapping[str, str]
    idempotency_key: str | None
    status: str
    state: Mapping[str, Any]
    events: Sequence[EventDraft] = ()
    record: bool = False
    """Whether the run records (keeps a journal); saved with it and never changed later."""
    journal: Sequence[JournalDraft] = ()
    """The run's first journal entries (`run.started`), written with it."""
    lease_owner: str | None = None
    """When set, the run is created already leased to this owner (token 1) for `lease_ttl`
    seconds, so no other worker can take it between its creation and its first step."""
    lease_ttl: float | None = None


@dataclass(slots=True, kw_only=True, unsafe_hash=True)  # not frozen: built per run, never changed
class RunRecord:
    """A run as stored."""

    run_id: str
    session_id: str
    task: str
    tenant: str | None
    principal: Mapping[str, Any]
    input: str
    labels: Mapping[str, str]
    idempotency_key: str | None
    status: str
    state: Mapping[str, Any]
    created_at: float
    updated_at: float
    lease_owner: str | None = None
    lease_token: int = 0
    lease_expires: float | None = None
    control: str | None = None
    """A pending `pause` or `cancel` request that no commit has acted on yet."""
    record: bool = False
    """Whether the run records: its journal holds every boundary (DESIGN §12)."""

    def lease_live(self, now: float) -> bool:
        """Whether a worker holds the run's lease at `now` (its owner is set and not expired)."""
        return (
            self.lease_owner is not None
            and self.lease_expires is not None
            and self.lease_expires > now
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    """One online eval grade of one run by one grader (DESIGN §15).

    `score` is 0..1 (a check scores 1.0 or 0.0) and None when the grader failed: then
    `error` says why (a grader that raised, a judge whose answer holds no number) and `passed`
    is false. `detail` says what the grader saw. `created_at` is when the grade was stored.
    """

    run_id: str
    task: str
    grader: str
    score: float | None
    passed: bool
    detail: str | None = None
    error: str | None = None
    created_at: float = 0.0
