"""`MemoryStore`: runs kept in the process, for tests, scripts and services that never suspend.

It follows the contract of [`Store`][pytest_harness.store.base.Store] exactly as the sqlite
store does: payloads are kept as JSON text (encoded on write, decoded on read, so nothing
aliases a caller's objects), writes are fenced by the lease token and cursors are a
store-wide counter. Every method runs without awaiting anything, so on one event loop each
call is atomic with respect to the others. Its rows (a run, an approval) are in
`store/memory_rows.py`.

It forgets nothing while the process lives: every run stays with its events, journal and
approvals (about 5 KB a run, 25 KB recorded, for the bench task), so a long-lived service that
keeps starting runs grows without bound on it; such a service belongs on sqlite or Postgres.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections.abc import Collection, Mapping, Sequence
from operator import itemgetter
from typing import Any

from pytest_harness.errors import ResolutionError, RunBusy, StoreError, UnknownRun
from pytest_harness.store.base import (
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
from pytest_harness.store.memory_rows import (
    _append_journal,
    _Approval,
    _encode_journal,
    _loads,
    _Run,
    _text,
)

__all__ = ["MemoryStore"]

_cursor_of = itemgetter(0)


class MemoryStore:
    """Runs, events and approvals in dictionaries of this process, all kept until it ends."""

    kind = "memory"

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}
        self._sessions: dict[str, list[_Run]] = {}
        self._idempotency: dict[tuple[str, str, str], _Run] = {}
        self._approvals: dict[str, _Approval] = {}
        self._artifacts: dict[str, StoredArtifact] = {}
        self._last_event = 0
        self._samples: list[Sample] = []
        self._graded: set[tuple[str, str]] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"MemoryStore(runs={len(self._runs)})"

    # -- lifecycle --------------------------------------------------------------------------

    async def open(self) -> None:
        """Make the store usable again after `close()`; nothing to connect."""
        self._closed = False

    async def close(self) -> None:
        """Refuse further calls until `open()`; the data stays for a later `open()`."""
        self._closed = True

    def _run(self, run_id: str) -> _Run:
        if self._closed:
            raise StoreError("the memory store is closed; call open() before using it again")
        run = self._runs.get(run_id)
        if run is None:
            raise UnknownRun(run_id)
        return run

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the memory store is closed; call open() before using it again")

    def _append(self, run: _Run, events: list[tuple[str, str]], now: float) -> None:
        stored = run.events
        last = self._last_event
        for kind, data in events:
            last += 1
            stored.append((last, kind, data, now))
        self._last_event = last

    # -- runs -------------------------------------------------------------------------------

    async def create_run(self, run: NewRun) -> tuple[RunRecord, bool]:
        """Insert a run with its first events, or return the run its idempotency key names."""
        self._check_open()
        key = None
        if run.idempotency_key is not None:
            key = (run.tenant or "", run.task, run.idempotency_key)
            existing = self._idempotency.get(key)
            if existing is not None:
                return existing.record(), False
        if run.run_id in self._runs:
            raise StoreError(f"cannot create run {run.run_id}: a run with this id already exists")
        what = f"run {run.run_id}"
        principal = encode_json(run.principal, f"the principal of {what}")
        labels = encode_json(run.labels, f"the labels of {what}")
        state = encode_json(run.state, f"the state of {what}")
        events = [(e.kind, encode_json(e.data, f"the events of {what}")) for e in run.events]
        journal = _encode_journal(run.run_id, run.journal)
        now = time.time()
        stored = _Run(
            run, len(self._runs) + 1, principal=principal, labels=labels, state=state, now=now
        )
        if run.lease_owner is not None:
            stored.lease_owner = run.lease_owner
            stored.lease_token = 1
            stored.lease_expires = now + (run.lease_ttl or 0.0)
        self._runs[run.run_id] = stored
        self._sessions.setdefault(run.session_id, []).append(stored)
        if key is not None:
            self._idempotency[key] = stored
        self._append(stored, events, now)
        _append_journal(stored, journal)
        return stored.record(), True

    async def get_run(self, run_id: str) -> RunRecord:
        """Return the stored run; `UnknownRun` when there is none."""
        return self._run(run_id).record()

    # -- leases -----------------------------------------------------------------------------

    async def acquire_lease(self, run_id: str, owner: str, ttl: float) -> int:
        """Take the lease unless another owner's is live; the new fencing token."""
        if not ttl > 0:
            raise ValueError(f"lease ttl must be a positive number of seconds, got {ttl!r}")
        run = self._run(run_id)
        now = time.time()
        holder, expires = run.lease_owner, run.lease_expires
        if holder is not None and holder != owner and expires is not None and expires > now:
            raise RunBusy(run_id, holder, expires - now)
        run.lease_token += 1
        run.lease_owner = owner
        run.lease_expires = now + ttl
        return run.lease_token

    async def renew_lease(self, run_id: str, token: int, ttl: float) -> None:
        """Extend the lease held with `token`; `StoreError` when it is stale or released."""
        if not ttl > 0:
            raise ValueError(f"lease ttl must be a positive number of seconds, got {ttl!r}")
        run = self._run(run_id)
        if run.lease_token != token or run.lease_owner is None:
            raise stale_token(run_id, token, run.lease_token, run.lease_owner)
        run.lease_expires = time.time() + ttl

    async def release_lease(self, run_id: str, token: int) -> None:
        """Give the lease up; nothing happens when `token` is stale."""
        run = self._run(run_id)
        if run.lease_token == token:
            run.lease_owner = None
            run.lease_expires = None

    # -- the boundary write -----------------------------------------------------------------

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
        """Write status, state, events, approvals and journal at once, fenced by `token`.

        Return the pending control request as of the write (cleared when it is `clear_control`).
        """
        run = self._run(run_id)
        if run.lease_token != token:
            raise stale_token(run_id, token, run.lease_token, run.lease_owner)
        state_json = encode_json(state, f"the state of run {run_id}")
        encoded = (
            [(e.kind, encode_json(e.data, f"the events of run {run_id}")) for e in events]
            if events
            else ()
        )
        journal_encoded = _encode_journal(run_id, journal) if journal else ()
        new_approvals: list[_Approval] = []
        if approvals:
            seen: set[str] = set()
            for new in approvals:
                if new.approval_id in self._approvals or new.approval_id in seen:
                    raise StoreError(
                        f"cannot commit run {run_id}: approval {new.approval_id!r} already "
                        "exists; nothing was written"
                    )
                seen.add(new.approval_id)
                args = encode_json(new.args, f"the arguments of approval {new.approval_id}")
                new_approvals.append(_Approval(run_id, new, args))
        # Everything is encoded and checked: from here on nothing can fail half-way.
        now = time.time()
        run.status = _text(status)
        run.state = state_json
        run.updated_at = now
        if release:
            run.lease_owner = None
            run.lease_expires = None
        elif lease_ttl is not None and run.lease_owner is not None:
            run.lease_expires = now + lease_ttl
        if encoded:
            self._append(run, encoded, now)
        if journal_encoded:
            _append_journal(run, list(journal_encoded))
        for approval in new_approvals:
            self._approvals[approval.new.approval_id] = approval
            run.approvals.append(approval)
        if clear_control is not None and run.control == clear_control:
            run.control = None
        return run.control

    async def request_control(
        self, run_id: str, control: str, *, statuses: Collection[str]
    ) -> RunRecord:
        """Ask the run's driver to pause or cancel it (a pending cancel is kept)."""
        check_control(control)
        run = self._run(run_id)
        if run.status in statuses and run.control != "cancel":
            run.control = control
            run.updated_at = time.time()
        return run.record()

    # -- approvals --------------------------------------------------------------------------

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
        run = self._run(run_id)
        approval = self._approvals.get(approval_id)
        if approval is None or approval.run_id != run_id:
            raise ResolutionError(f"run {run_id} has no approval {approval_id!r}")
        if approval.status != "pending":
            raise already_answered(run_id, approval_id, approval.status, approval.approver)
        encoded = (
            [(event.kind, encode_json(event.data, f"the events of run {run_id}"))]
            if event is not None
            else ()
        )
        journal_encoded = _encode_journal(run_id, [journal]) if journal is not None else []
        now = time.time()
        approval.status = decision
        approval.approver = approver
        approval.approver_roles = tuple(approver_roles)
        approval.reason = reason
        approval.decided_at = now
        if encoded:
            self._append(run, encoded, now)
        _append_journal(run, journal_encoded)
        return approval.row()

    async def approvals(self, run_id: str) -> list[ApprovalRow]:
        """Every approval request of the run, oldest first."""
        return [approval.row() for approval in self._run(run_id).approvals]

    # -- reading ----------------------------------------------------------------------------

    async def session_runs(self, session_id: str, *, before: str | None = None) -> list[RunRecord]:
        """Return the session's runs in creation order; with `before`, those created before it."""
        self._check_open()
        runs = self._sessions.get(session_id, [])
        if before is not None:
            seq = self._run(before).seq
            runs = [run for run in runs if run.seq < seq]
        return [run.record() for run in runs]

    async def list_runs(
        self,
        *,
        status: str | None = None,
        task: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        """Return runs, newest first, filtered by status, task and tenant."""
        self._check_open()
        if limit < 0:
            raise ValueError(f"limit must be zero or more, got {limit}")
        found: list[RunRecord] = []
        if limit == 0:
            return found
        for run in reversed(self._runs.values()):
            if (
                (status is None or run.status == status)
                and (task is None or run.task == task)
                and (tenant is None or run.tenant == tenant)
            ):
                found.append(run.record())
                if len(found) >= limit:
                    break
        return found

    async def events(
        self, run_id: str, *, after: str = "0", limit: int | None = None
    ) -> list[Event]:
        """Return the run's events with a cursor after `after`, in order."""
        position = parse_cursor(after)
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be zero or more, got {limit}")
        stored = self._run(run_id).events
        start = bisect_right(stored, position, key=_cursor_of)
        end = len(stored) if limit is None else min(len(stored), start + limit)
        return [
            Event(run_id=run_id, cursor=str(i), kind=kind, data=_loads(data), at=at)
            for i, kind, data, at in stored[start:end]
        ]

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
        """Lease the oldest claimable run of `tasks` to `owner`; None when there is none."""
        if not ttl > 0:
            raise ValueError(f"lease ttl must be a positive number of seconds, got {ttl!r}")
        self._check_open()
        moment = time.time() if now is None else now
        for run in self._runs.values():
            if (
                run.task in tasks
                and run.run_id not in exclude
                and (
                    run.lease_owner is None
                    or run.lease_expires is None
                    or run.lease_expires <= moment
                )
                and (run.status == "running" or self._answered(run, moment - grace))
            ):
                previous = run.lease_expires if run.lease_owner is not None else None
                run.lease_token += 1
                run.lease_owner = owner
                run.lease_expires = time.time() + ttl
                return run.record(), previous
        return None

    def _answered(self, run: _Run, by: float) -> bool:
        """Whether the run awaits approvals that were all answered, the last at or before `by`.

        A request left pending for a call another request declined is moot (DESIGN §3: one
        decline settles the call), so it does not keep the run waiting.
        """
        if run.status != "awaiting_approval":
            return False
        rows = [a for a in self._approvals.values() if a.run_id == run.run_id]
        # A request still pending for a call that another request declined is moot, not open.
        declined = {a.new.execution_key for a in rows if a.status == "decline"}
        answered = [a for a in rows if a.status != "pending"]
        return (
            bool(answered)
            and not any(a.status == "pending" and a.new.execution_key not in declined for a in rows)
            and all(a.decided_at is not None and a.decided_at <= by for a in answered)
        )

    async def journal(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[JournalEntry]:
        """The run's journal entries after `seq` `after`, in order."""
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be zero or more, got {limit}")
        run = self._run(run_id)
        start = max(0, after)
        end = len(run.journal) if limit is None else min(len(run.journal), start + limit)
        return [self._entry(run, seq) for seq in range(start + 1, end + 1)]

    def _entry(self, run: _Run, seq: int) -> JournalEntry:
        """The run's journal entry at `seq`, its payload decoded from the text kept."""
        return run.entry(seq)

    async def put_artifact(self, artifact: StoredArtifact) -> None:
        """Keep the artifact's bytes by hash (write-once)."""
        self._check_open()
        artifact_sha256(artifact)
        self._artifacts.setdefault(artifact.sha256, artifact)

    async def artifact(self, sha256: str) -> StoredArtifact | None:
        """The artifact kept under `sha256`, or None."""
        self._check_open()
        return self._artifacts.get(sha256)

    async def expired_runs(self, *, now: float | None = None) -> list[str]:
        """Ids of `running` runs whose lease expired or that nobody holds, oldest first."""
        self._check_open()
        moment = time.time() if now is None else now
        return [
            run.run_id
            for run in self._runs.values()
            if run.status == "running"
            and (
                run.lease_owner is None or run.lease_expires is None or run.lease_expires <= moment
            )
        ]

    # -- online eval samples ----------------------------------------------------------------

    async def add_samples(self, samples: Sequence[Sample]) -> None:
        """Keep the samples; a `(run_id, grader)` already kept is skipped."""
        self._check_open()
        check_samples(samples)
        for sample in samples:
            key = (sample.run_id, sample.grader)
            if key in self._graded:
                continue
            self._graded.add(key)
            self._samples.append(sample)

    async def samples(
        self,
        *,
        task: str | None = None,
        grader: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = 100,
    ) -> list[Sample]:
        """Kept samples, newest first, filtered."""
        self._check_open()
        check_limit(limit)
        found = [
            s
            for s in self._samples
            if (task is None or s.task == task)
            and (grader is None or s.grader == grader)
            and (since is None or s.created_at >= since)
            and (until is None or s.created_at < until)
        ]
        ordered = sorted(enumerate(found), key=lambda item: (item[1].created_at, item[0]))
        newest = [s for _, s in reversed(ordered)]
        return newest if limit is None else newest[:limit]
