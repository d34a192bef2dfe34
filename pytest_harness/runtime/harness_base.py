"""The state of a `Harness` and the driving of its runs: creation, leases, continuation.

`HarnessBase` holds what the public methods of `runtime.harness.Harness` share: the spec,
plans and store, the lifecycle of the store, and the internals that create a run and drive it
under this worker's lease (`_create`, `_drive`, `_continue`). `EndedRuns` is the seam to the
online evals. The run loop (`runtime.engine`) is imported by the first `_drive`, so loading a
harness, or reading its results, imports none of it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import warnings
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self

from pytest_harness.errors import RecordingError, RunBusy, SessionDenied, StoreError, UnknownTask
from pytest_harness.models.base import Message
from pytest_harness.plugins import checkpoint_hooked, notify_checkpoint
from pytest_harness.principal import Principal, as_principal
from pytest_harness.runtime.approval_checks import _check_resolvable, _moot, _result
from pytest_harness.runtime.arguments import check_start, known_run
from pytest_harness.runtime.boundaries import Boundary
from pytest_harness.runtime.events import EventHub
from pytest_harness.runtime.ids import uuid4_hex
from pytest_harness.runtime.journal import draft, started_payload
from pytest_harness.runtime.plan import Plans, TaskPlan
from pytest_harness.runtime.results import RunResult, RunStatus, run_status
from pytest_harness.runtime.state import call_approvals, initial_state
from pytest_harness.runtime.texts import composed, schemas_text
from pytest_harness.spec.spec import Spec
from pytest_harness.store.base import EventDraft, NewRun, RunRecord, Store

if TYPE_CHECKING:
    from pytest_harness.runtime.engine import DriveContext, Driver

__all__ = ["EndedRuns", "HarnessBase"]


class EndedRuns(Protocol):
    """The seam through which the runtime tells the online evals (`evals/`) about runs it ends.

    `ended` is called with the result of every run this harness drives to an end, and must
    return at once without raising (the grading happens in the background); `flush` waits for
    the work `ended` started.
    """

    def ended(self, result: RunResult) -> None:
        """A run this harness drove has ended."""

    async def flush(self) -> None:
        """Wait for the work started by `ended` so far."""


class HarnessBase:
    """The state and internals of a `Harness`: its store's lifecycle and the driving of runs."""

    def __init__(
        self,
        spec: Spec,
        plans: Plans,
        store: Store,
        *,
        tasks: Mapping[str, TaskPlan] | None = None,
        record: bool | None = None,
        keep_requests: bool = True,
        journal_kinds: frozenset[str] | None = None,
        durable: bool = True,
        waits: bool = True,
        hooks: bool = True,
        evals: EndedRuns | None = None,
        history: Sequence[Message] | None = None,
    ) -> None:
        self.spec = spec
        self.plans = plans
        self.store = store
        self.record = spec.document.state.record if record is None else record
        """Whether new runs are recorded (`state.record`, or `load(..., record=...)`).

        A run in an existing session keeps the session's saved setting; one given explicitly
        (`record=` here or at load) that conflicts with it is refused with `RecordingError`.
        """
        self._record_explicit = record is not None
        self._tasks = tasks
        self._keep_requests = keep_requests
        self._journal_kinds = journal_kinds
        self._durable = durable
        self._waits = waits
        self._hooks = hooks
        """Tell the `harness_checkpoint` hooks of its runs' boundaries (not a replay's twin)."""
        self._given_history = None if history is None else tuple(history)
        """The conversation before each of its runs, instead of its session's earlier runs (a
        replay's twin: the recording's, at the first drive and at each resumed one)."""
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid4_hex()[:8]}"
        self._opened = False
        self._closed = False
        self._background: set[asyncio.Task[RunResult]] = set()
        self._hub = EventHub()
        self._driving: set[str] = set()
        """Runs a task of this harness drives now (its lease may look expired on memory)."""
        self.evals = evals
        """The online evals told about every run this harness ends (None: no graders)."""
        self._stopping = asyncio.Event()
        """Set by `stop_driving`. Its drives read it through its own `is_set`: a drive context
        holding a closure over this harness would make each replay's twin harness a reference
        cycle, freed only by the garbage collector."""
        self._drive_context: DriveContext | None = None
        """What every driver of this harness is given, made by the first drive."""

    # -- lifecycle -----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self._open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Wait for submitted runs to stop and pending eval grades to be stored; close the store.

        The store is closed however the wait ends: when `aclose` is cancelled (Ctrl-C, a
        timeout around it), the submitted runs still driving are cancelled and let go of their
        leases first (each stays `running` from its last commit, for `resume` or a worker).
        """
        if self._closed:
            return
        self._closed = True
        try:
            if self._background:
                await asyncio.gather(*self._background, return_exceptions=True)
            if self.evals is not None:
                await self.evals.flush()
        finally:
            try:
                await self._stop_submitted()
            finally:
                if self._opened:
                    await self.store.close()

    async def _stop_submitted(self) -> None:
        """Cancel the submitted runs still driving, and wait for them to unwind.

        Each releases its lease as it unwinds and stays `running` from its last commit, for
        `resume` or a worker (the pytest fixtures do this for a test that failed).
        """
        stopping = [job for job in self._background if not job.done()]
        for job in stopping:
            job.cancel()
        if stopping:
            await asyncio.wait(stopping)

    def __del__(self) -> None:
        if self._opened and not self._closed:
            warnings.warn(
                f"Harness for {self.spec.path} was never closed; use `async with load(...)` "
                "or `await harness.aclose()`",
                ResourceWarning,
                stacklevel=1,
            )

    async def _open(self) -> None:
        if self._closed:
            from pytest_harness.errors import HarnessError

            raise HarnessError(f"this Harness for {self.spec.path} is closed")
        if not self._opened:
            await self.store.open()
            self._opened = True

    # -- results -------------------------------------------------------------------------

    async def result(self, run_id: str) -> RunResult:
        """Read a run's result from the store (no memory of this process needed)."""
        known_run(run_id)
        await self._open()
        record = await self.store.get_run(run_id)
        answered: frozenset[str] = frozenset()
        if record.status in (RunStatus.AWAITING_APPROVAL.value, RunStatus.PAUSED.value):
            rows = await self.store.approvals(run_id)
            answered = frozenset(r.approval_id for r in rows if r.status != "pending")
            answered |= _moot(rows)
        return _result(record, answered)

    # -- internals -----------------------------------------------------------------------

    def _plan(self, task: str) -> TaskPlan:
        tasks = self._tasks if self._tasks is not None else self.plans.tasks
        plan = tasks.get(task)
        if plan is None:
            raise UnknownTask(task, list(tasks))
        return plan

    def _starting(
        self,
        task: str,
        input: str,
        principal: Principal | str,
        tenant: str | None,
        labels: Mapping[str, str] | None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> tuple[TaskPlan, Principal, str | None, dict[str, str]]:
        """What starting a run checks and settles before anything is written (here or on Temporal).

        The task's plan (`UnknownTask`), a string input (`TypeError`), the principal, whether
        its live models may run, the tenant (the principal's when none is given; an empty one
        is none, `TypeError` for one that is not a string) and the labels (the task's, then
        `labels`). Text no store can write (a lone surrogate, no UTF-8) in the input, the
        principal, the tenant, the session id, the idempotency key or a label is a
        `StoreError` naming it (`runtime.arguments`).
        """
        plan = self._plan(task)
        if not isinstance(input, str):
            raise TypeError(f"input must be a string, got {type(input).__name__}")
        who = as_principal(principal)
        plan.check_live()
        tenant_ = tenant if tenant is not None else who.tenant
        if tenant_ is not None and not isinstance(tenant_, str):
            raise TypeError(f"tenant must be a string or None, got {tenant_!r}")
        merged = {**plan.spec.labels, **(labels or {})}
        check_start(input, who, tenant_, session_id, idempotency_key, merged)
        # an empty tenant is no tenant, for sessions and keys alike, on every store
        return plan, who, tenant_ or None, merged

    async def _create(
        self,
        task: str,
        input: str,
        principal: Principal | str,
        tenant: str | None,
        session_id: str | None,
        labels: Mapping[str, str] | None,
        idempotency_key: str | None,
    ) -> tuple[RunRecord, bool, list[Message]]:
        """Create a run; return it, whether it is new, and its session's earlier conversation.

        In an existing session, the run takes the session's recording setting (saved with its
        first run).
        """
        plan, who, tenant_, merged_labels = self._starting(
            task, input, principal, tenant, labels, session_id, idempotency_key
        )
        await self._open()
        run_id = f"run_{uuid4_hex()}"
        record = self.record
        earlier: list[RunRecord] = []
        if session_id is not None:
            earlier = await self.store.session_runs(session_id)
            if earlier:
                if earlier[0].tenant != tenant_:  # the session is its first run's tenant's
                    raise SessionDenied(session_id, tenant_)
                record = self._session_record(session_id, earlier[0].record)
        history_runs: list[str] | None = None
        if self._given_history is not None:
            history = list(self._given_history)
        else:
            # only the tenant's own runs: another's may have slipped in, created at the same
            # moment as the session's first run (it is refused from then on)
            completed = [
                run
                for run in earlier
                if run.status == RunStatus.COMPLETED.value and run.tenant == tenant_
            ]
            history = [m for run in completed for m in run.state.get("messages") or []]
            if session_id is not None:  # every drive asks with these, whatever ends meanwhile
                history_runs = [run.run_id for run in completed]
        journal = []
        if record:
            started = started_payload(
                self.spec,
                plan,
                input,
                who,
                tenant_,
                merged_labels,
                idempotency_key,
                history,
                given_labels=labels,
            )
            schemas = plan.schemas
            payload = composed(started, lambda: {"tool_schemas": schemas_text(schemas)})
            journal.append(draft("run.started", payload, step=0))
        stored, created = await self.store.create_run(
            NewRun(
                run_id=run_id,
                session_id=session_id or f"ses_{uuid4_hex()}",
                task=task,
                tenant=tenant_,
                principal=who.to_dict(),
                input=input,
                labels=merged_labels,
                idempotency_key=idempotency_key,
                status=RunStatus.RUNNING.value,
                state=initial_state(history_runs),
                events=[EventDraft("run_started", {"task": task})],
                record=record,
                journal=journal,
                lease_owner=self.owner,
                lease_ttl=self.spec.document.state.lease,
            )
        )
        if created and self._hooks and checkpoint_hooked():
            notify_checkpoint(
                session_id=stored.session_id,
                run_id=stored.run_id,
                status=stored.status,
                phase=Boundary.RUN_STARTED.value,
            )
        return stored, created, history

    def _session_record(self, session_id: str, saved: bool) -> bool:
        """The recording setting of a new run in a session that saved `saved`."""
        if saved == self.record or not self._record_explicit:
            return saved
        raise RecordingError(
            f"session {session_id} {'records' if saved else 'does not record'}; this harness "
            f"was loaded with record={self.record}, which conflicts with the setting the "
            "session saved; omit record= to inherit it, or start a new session"
        )

    async def _drive(
        self,
        record: RunRecord,
        *,
        created: bool = False,
        claimed: bool = False,
        previous_expiry: float | None = None,
        history: list[Message] | None = None,
        control_only: bool = False,
        resolution: tuple[str, str, Any, str | None] | None = None,
    ) -> RunResult:
        """Drive a run under this worker's lease until it ends or suspends.

        A run this worker has just `created` (token 1) or `claimed` already holds its lease,
        and its record is current; any other is leased here and read again, for what its
        previous holder committed (`RunBusy` when another worker, or another task of this
        harness, drives it). The driver's last commit
        releases the lease; if it never gets there, the lease is released here. `history` is
        the session's earlier conversation (read from the store when None). With
        `control_only`, only a pending pause or cancel request is acted on; `resolution`
        (`key, how, value, by`) settles an uncertain call first. A control request that
        arrives with the drive's last commit is acted on before returning.
        """
        # the run loop is imported by the first drive: a harness that only reads never needs it
        from pytest_harness.runtime.engine import Driver

        plan = self._plan(record.task)
        store = self.store
        run_id = record.run_id
        lease = self.spec.document.state.lease
        if run_id in self._driving:
            raise RunBusy(run_id, self.owner, max(0.0, (record.lease_expires or 0) - time.time()))
        # The previous holder renewed its lease last at about `lease_expires - lease` (for a
        # claimed run, the expiry it had before the claim).
        expiry = previous_expiry if claimed else record.lease_expires
        last_alive = None if expiry is None else expiry - lease
        self._driving.add(run_id)
        try:
            token = record.lease_token
            if not created and not claimed:
                token = await store.acquire_lease(run_id, self.owner, lease)
            driver: Driver | None = None
            try:
                if not created and not claimed:
                    record = await store.get_run(run_id)
                interrupted = not created and record.status == RunStatus.RUNNING.value
                was_ended = run_status(record.status).ended
                ctx = self._drive_context or self._new_drive_context()
                try:
                    driver = Driver(
                        ctx,
                        plan,
                        record,
                        token,
                        interrupted=interrupted,
                        last_alive=last_alive,
                        resumed=not created,
                    )
                except (KeyError, TypeError, ValueError) as exc:
                    raise StoreError(
                        f"run {run_id}: its stored state cannot be read "
                        f"({type(exc).__name__}: {exc}); the store was changed by something "
                        "other than pytest-harness, or is damaged"
                    ) from exc
                result = await self._continue(driver, record, history, control_only, resolution)
            finally:
                if driver is None or not driver.released:
                    await store.release_lease(run_id, token)
        finally:
            self._driving.discard(run_id)
            self._hub.committed(run_id)  # streams re-read: a driver that failed ends them
        assert driver is not None  # only an exception leaves it unset
        if driver.released and driver.control is not None and not result.status.ended:
            # A pause or cancel arrived with the commit that suspended the run.
            return await self._settle_control(run_id)
        if self.evals is not None and result.status.ended and not was_ended:
            self.evals.ended(result)  # graded in the background, outside the run's path
        return result

    def _new_drive_context(self) -> DriveContext:
        """The `DriveContext` of this harness's drives (the same for each of them)."""
        from pytest_harness.runtime.engine import DriveContext

        store = self.store
        ctx = self._drive_context = DriveContext(
            store=store,
            owner=self.owner,
            lease=self.spec.document.state.lease,
            renew=store.kind != "memory",
            keep_requests=self._keep_requests,
            journal_kinds=self._journal_kinds,
            durable=self._durable,
            waits=self._waits,
            hooks=self._hooks,
            spec_digest=self.spec.digest,
            hub=self._hub,
            stopping=self._stopping.is_set,
        )
        return ctx

    async def _continue(
        self,
        driver: Driver,
        record: RunRecord,
        history: list[Message] | None,
        control_only: bool,
        resolution: tuple[str, str, Any, str | None] | None,
    ) -> RunResult:
        """The part of `_drive` that runs under the lease."""
        if resolution is not None:
            _check_resolvable(record, resolution[0])  # a racing resolver may have settled it
        status = run_status(record.status)
        if status.ended:
            return _result(record)
        calls = driver.state.calls
        if status in (RunStatus.AWAITING_APPROVAL, RunStatus.PAUSED) and any(
            call_approvals(c) and c.get("decision") is None for c in calls
        ):
            decided = {
                row.approval_id: row
                for row in await self.store.approvals(record.run_id)
                if row.status != "pending"
            }
            driver.apply_decisions(decided)
        if resolution is not None:
            key, how, value, by = resolution
            driver.resolve(key, how, value=value, by=by)
            if status is RunStatus.PAUSED and driver.control != "cancel":
                return await driver.checkpoint(RunStatus.PAUSED)
            await driver.checkpoint(RunStatus.RUNNING)
        elif driver.control is None:
            if control_only:
                return _result(record)
            if status is RunStatus.AWAITING_APPROVAL and any(
                c.get("verdict") == "approve" and c.get("decision") is None for c in calls
            ):
                return _result(record)
            if status is RunStatus.AWAITING_RESOLUTION and any(
                c.get("status") == "uncertain" for c in calls
            ):
                return _result(record)
        if driver.control is not None:
            return await driver.stop()
        if history is None:
            history = await self._history(record)
        return await driver.drive(history)

    async def _history(self, record: RunRecord) -> list[Message]:
        """The messages that come before the run's own.

        The history given, else those of the session's runs that had completed when the run
        was created (`RunState.history_runs`); without that (a run started in a new session,
        which no run precedes, or one saved before it was kept), the session's earlier runs
        completed by now; never a run of another tenant.
        """
        if self._given_history is not None:
            return list(self._given_history)
        kept = record.state.get("history_runs")
        wanted = None if kept is None else set(kept)
        history: list[Message] = []
        for earlier in await self.store.session_runs(record.session_id, before=record.run_id):
            if (
                earlier.status == RunStatus.COMPLETED.value
                and earlier.tenant == record.tenant
                and (wanted is None or earlier.run_id in wanted)
            ):
                history.extend(earlier.state.get("messages") or [])
        return history

    async def _settle_control(self, run_id: str) -> RunResult:
        """Pause or cancel a run nobody drives, under this worker's lease."""
        try:
            return await self._drive(await self.store.get_run(run_id), control_only=True)
        except RunBusy:  # a worker took it meanwhile: it acts on the request itself
            return await self.result(run_id)
