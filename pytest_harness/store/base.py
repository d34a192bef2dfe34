"""The store protocol: what the runtime asks of a place that keeps runs.

A store keeps, per run, one row (status, checkpoint `state` as JSON, lease), its events and its
approval requests. Every method that writes is one atomic transaction; `commit` is the run
loop's only write while it drives a run, and it is fenced: it succeeds only while the caller's
lease token is the run's current one, checked in the same statement that writes.

Rules every store follows, so that the runtime cannot tell them apart:

- Payloads (`principal`, `labels`, `state`, event data, approval arguments) are stored as JSON
  text ([`encode_json`][]) and decoded on every read, so a caller never shares an object with
  the store. A value JSON cannot hold (an object, `NaN`) is a `StoreError`; nothing is written.
- A store opens lazily on first use; after `close()` every method raises `StoreError` until
  `open()` is called again.
- An event's `cursor` is the decimal string of a store-wide, strictly increasing integer;
  events of one run are read in cursor order, with no gaps or repeats after a cursor.
- The fencing token of a new run is 0 with no owner; `acquire_lease` increments it, and
  `commit` is accepted when the token equals the run's current one.
- A run's `control` is a pending request to `pause` or `cancel` it, written by
  `request_control` from any process and read back by every `commit` (free: the write returns
  it), so the worker driving the run sees it at its next boundary without another round trip.
- Times are `time.time()` of the writing process.
- Online eval samples (DESIGN §15) are two methods, `add_samples` and `samples`: one row per
  `(run_id, grader)`, written once (a second write of the same pair is ignored, so a grade
  retried after a crash never counts twice), read newest first by `created_at`.

The flight recorder (DESIGN §12) adds, for runs that record (`NewRun.record`):

- a **journal** per run: [`JournalDraft`][]s travel with `create_run`, `commit` and
  `decide_approval` and are appended in the same transaction as that write, each given the
  next `seq` of its run (contiguous from 1). An entry whose `id` the run's journal already
  holds is skipped (the write is being retried after a failure whose outcome was unknown), so a
  boundary is never journaled twice. `journal(run_id)` reads the entries back in `seq` order.
- **artifacts**: bytes kept by SHA-256 (`put_artifact`, `artifact`), content-addressed and
  write-once; they are written before the commit whose journal entry refers to them (an
  artifact nobody refers to is harmless).

Stores: `memory` (`store/memory.py`), `sqlite` (`store/sqlite.py`) and, in the extra
`pytest-harness[postgres]`, `postgres` (`postgres/store.py`); all pass the contract suite in
`tests/store/test_contract.py`. A plugin adds another through the
`harness_stores` hook; the helpers of `store/helpers.py` (importable from here) give it the
same encoding, cursors and messages. The records (`NewRun`, `RunRecord`, `Event`, …) are
defined in `store/records.py` and importable from here too.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, runtime_checkable

from pytest_harness.store.helpers import (
    CONTROLS,
    already_answered,
    artifact_sha256,
    check_control,
    check_decision,
    check_limit,
    check_samples,
    encode_json,
    parse_cursor,
    stale_token,
)
from pytest_harness.store.records import (
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
    StoredArtifact,
)

__all__ = [
    "CONTROLS",
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
    "Store",
    "StoredArtifact",
    "Watcher",
    "WatchingStore",
    "already_answered",
    "artifact_sha256",
    "check_control",
    "check_decision",
    "check_limit",
    "check_samples",
    "encode_json",
    "parse_cursor",
    "stale_token",
]


@runtime_checkable
class Store(Protocol):
    """Where runs live. Every write is atomic; a failed write leaves nothing behind."""

    kind: str
    """`memory`, `sqlite`, or a plugin's name."""

    async def open(self) -> None:
        """Connect and migrate; idempotent. Other methods open the store on first use too."""

    async def close(self) -> None:
        """Release connections; idempotent. Later calls raise `StoreError` until `open()`."""

    async def create_run(self, run: NewRun) -> tuple[RunRecord, bool]:
        """Insert a run with its first events; `(record, True)`.

        With an idempotency key already used by the same tenant and task, insert nothing and
        return `(that run's record, False)`. The new run has fencing token 0 and no lease
        owner. A `run_id` that already exists is a `StoreError`.
        """
        ...

    async def get_run(self, run_id: str) -> RunRecord:
        """Return the stored run; `UnknownRun` when there is none."""
        ...

    async def acquire_lease(self, run_id: str, owner: str, ttl: float) -> int:
        """Take the run's lease for `ttl` seconds and return a new, larger fencing token.

        The same owner may take it again (the token still grows). Raises `RunBusy` when another
        owner's lease is still live, `UnknownRun` when there is no such run, `ValueError` when
        `ttl` is not positive.
        """
        ...

    async def renew_lease(self, run_id: str, token: int, ttl: float) -> None:
        """Extend the lease held with `token` to `ttl` seconds from now.

        `StoreError` when the token is stale or the lease was released, `UnknownRun` when
        there is no such run.
        """

    async def release_lease(self, run_id: str, token: int) -> None:
        """Give the lease up (no-op when the token is stale; `UnknownRun` for no such run)."""

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
        """Write one boundary atomically: status, state, events, approvals and journal.

        Journal entries are appended with the run's next `seq`s; an `id` already journaled
        is skipped.

        Return the run's pending control request (`pause`, `cancel` or None) as of this write,
        so the driver learns of one at its next boundary at no extra cost. With
        `clear_control`, the commit acts on that request: it is cleared in the same write,
        unless another one replaced it meanwhile (that one is kept and returned).

        Rejected with `StoreError` (nothing written) when `token` is not the run's current
        fencing token ([`stale_token`][]), `UnknownRun` when there is no such run. With
        `lease_ttl`, a held lease is extended to `lease_ttl` seconds from now in the same
        write (a run nobody holds stays unheld); with `release`, the lease is given up in the
        same write (the last commit of a drive). An `approval_id` that already exists is a
        `StoreError`.
        """
        ...

    async def request_control(
        self, run_id: str, control: str, *, statuses: Collection[str]
    ) -> RunRecord:
        """Ask whoever drives the run to `pause` or `cancel` it at its next boundary.

        One atomic write, taken only when the run's status is one of `statuses`; a pending
        `cancel` is never replaced by a `pause`. Needs no lease: it writes only the request,
        which the lease holder's next `commit` returns. Return the run as stored after the
        write (whether or not it changed); `UnknownRun` when there is no such run,
        `ValueError` for a control other than `pause` or `cancel` ([`check_control`][]).
        """

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
        """Answer a pending approval once (compare-and-set on the pending row).

        `ResolutionError` when the approval is unknown for this run or already answered (the
        message names who answered first, [`already_answered`][]); `UnknownRun` when there is
        no such run; `ValueError` for a decision other than `approve` or `decline`. The event
        and the journal entry, if given, are written in the same transaction.
        """
        ...

    async def approvals(self, run_id: str) -> list[ApprovalRow]:
        """Every approval request of the run, oldest first; `UnknownRun` for no such run."""
        ...

    async def session_runs(self, session_id: str, *, before: str | None = None) -> list[RunRecord]:
        """Return the session's runs in creation order; with `before`, only those before it.

        `UnknownRun` when `before` names no run.
        """
        ...

    async def list_runs(
        self,
        *,
        status: str | None = None,
        task: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        """Return runs, newest first (by creation), filtered; a `None` filter matches every run.

        `ValueError` when `limit` is negative.
        """
        ...

    async def events(
        self, run_id: str, *, after: str = "0", limit: int | None = None
    ) -> list[Event]:
        """Return the run's events with a cursor after `after`, in order (`"0"`: from the start).

        At most `limit` of them when given. `ValueError` when `after` is not a cursor (a
        decimal integer), `UnknownRun` when there is no such run.
        """
        ...

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
        """Lease the oldest claimable run to `owner` for `ttl` seconds, or return None.

        Returns the run as stored after the claim (its new lease and fencing token) and the
        lease expiry it had before (None when nobody held it): when its last worker was last
        known alive.

        Claimable: a run of one of `tasks`, not in `exclude`, with no live lease at `now`,
        that is either `running` (as `expired_runs` lists) or `awaiting_approval` with every
        approval answered, the last at or before `now - grace` (its answerer died before
        resuming it: DESIGN §10, liveness); a request still pending for a call that another
        request declined is moot (one decline settles the call) and does not count as open.
        One atomic write (Postgres: `FOR UPDATE SKIP LOCKED`), so workers claiming at once
        each get a different run. This is how
        `recover()` and `worker` split interrupted runs between workers. `ValueError` when
        `ttl` is not positive.
        """
        ...

    async def journal(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[JournalEntry]:
        """The run's journal entries with a `seq` after `after`, in `seq` order.

        At most `limit` of them when given (`ValueError` when negative); `UnknownRun` when
        there is no such run. A run that does not record has an empty journal.
        """
        ...

    async def put_artifact(self, artifact: StoredArtifact) -> None:
        """Keep an artifact's bytes under its SHA-256; a second put of the same hash is a no-op.

        `StoreError` when `artifact.sha256` is not the SHA-256 of `artifact.data` (check it
        with [`artifact_sha256`][]); nothing is written then.
        """

    async def artifact(self, sha256: str) -> StoredArtifact | None:
        """The artifact kept under `sha256`, or None.

        The bytes are returned as stored (a reader checks them against the hash).
        """
        ...

    async def expired_runs(self, *, now: float | None = None) -> list[str]:
        """Ids of runs that are `running` with no live lease (their worker died), oldest first.

        That is: status `running` and either a lease owner whose lease expired at or before
        `now` (default: the current time), or no lease owner at all (the process that created
        the run stopped before it took the lease, or released it without ending the run).
        """
        ...

    async def add_samples(self, samples: Sequence[Sample]) -> None:
        """Store online eval samples in one atomic write, each with its `created_at`.

        A sample whose `(run_id, grader)` is already stored is skipped (the first one stays).
        The run need not exist in this store. A `score` that is not a finite number or None is
        a `StoreError`; nothing is written.
        """
        ...

    async def samples(
        self,
        *,
        task: str | None = None,
        grader: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = 100,
    ) -> list[Sample]:
        """Stored samples, newest first (by `created_at`, then by insertion), filtered.

        `since` (inclusive) and `until` (exclusive) bound `created_at`; `limit=None` reads
        every match. `ValueError` when `limit` is negative.
        """
        ...


class Watcher(Protocol):
    """What `WatchingStore.watch` yields: whether notifications flow right now."""

    connected: bool


@runtime_checkable
class WatchingStore(Protocol):
    """A store that can tell a stream when a run gets new events (Postgres `LISTEN`/`NOTIFY`).

    Optional: a stream on a store without it reads the store again at intervals.
    """

    def watch(self, run_id: str, wake: Callable[[], None]) -> AbstractAsyncContextManager[Watcher]:
        """Call `wake()` after each write that adds events to the run, while the block runs.

        In place when the block starts (a read inside it misses no write); after a lost
        connection, `wake()` is called once more so the reader reads again from its cursor.
        """
        ...
