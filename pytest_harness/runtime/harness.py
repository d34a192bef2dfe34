"""`Harness`: the public async API over a spec, its tools and models, and a store."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Literal, cast

from pytest_harness.errors import (
    ApprovalDenied,
    ResolutionError,
    RunBusy,
    UnknownTask,
)
from pytest_harness.hookspecs import StoreFactory
from pytest_harness.models.base import Message
from pytest_harness.plugins import registry
from pytest_harness.runtime.engine import DriveContext, Driver
from pytest_harness.runtime.plan import Plans, TaskPlan
from pytest_harness.runtime.principal import Principal, as_principal
from pytest_harness.runtime.results import RunResult, RunStatus, RunSummary
from pytest_harness.runtime.state import RunState, result_from_state
from pytest_harness.spec.spec import Spec
from pytest_harness.store.base import EventDraft, NewRun, RunRecord, Store

if TYPE_CHECKING:
    from pytest_harness.recording.model import Recording
    from pytest_harness.replay.report import ReplayReport

__all__ = ["Harness", "RunHandle", "load"]


def load(
    path: str | os.PathLike[str],
    *,
    env: str | None = None,
    store: Store | str | None = None,
    record: bool | None = None,
) -> Harness:
    """Load `harness.yaml` and return a `Harness` (use it as `async with`, or `await aclose()`).

    `env` picks an environment overlay (default: `$HARNESS_ENV`, else none). `store` replaces
    the spec's `state.use`: a store name (`"memory"`, `"sqlite"`) or a `Store` instance.
    `record` overrides `state.record` (an org baseline may lock it).
    """
    from pytest_harness.spec.loader import load_spec
    from pytest_harness.tools.registry import ToolSet

    spec = load_spec(Path(path), env=env, record=record)
    plans = Plans(spec, ToolSet.from_spec(spec))
    return Harness(spec, plans, _make_store(spec, store))


def _make_store(spec: Spec, store: Store | str | None) -> Store:
    if store is not None and not isinstance(store, str):
        return store
    state = spec.document.state
    name = store or state.use
    factory = registry("harness_stores").get(name)
    if factory is None:
        from pytest_harness.errors import did_you_mean

        known = registry("harness_stores").names()
        raise spec.error(f"unknown store {name!r}{did_you_mean(name, known)}", ("state", "use"))
    return cast(StoreFactory, factory)(state, spec)


class RunHandle:
    """A run started with `Harness.submit()`: its ids now, its result when it stops."""

    def __init__(self, run_id: str, session_id: str, task: asyncio.Task[RunResult]) -> None:
        self.run_id = run_id
        self.session_id = session_id
        self._task = task

    async def result(self) -> RunResult:
        """Wait until the run ends or suspends and return its result."""
        return await asyncio.shield(self._task)

    def done(self) -> bool:
        """Whether the driving of the run has stopped (ended or suspended)."""
        return self._task.done()


class Harness:
    """Runs the tasks of one spec against one store. Every method is async.

    Create it with `pytest_harness.load(...)`; close it with `async with` or `aclose()`.
    """

    def __init__(
        self,
        spec: Spec,
        plans: Plans,
        store: Store,
        *,
        tasks: Mapping[str, TaskPlan] | None = None,
        record: bool | None = None,
        keep_requests: bool = True,
    ) -> None:
        self.spec = spec
        self.plans = plans
        self.store = store
        self.record = spec.document.state.record if record is None else record
        """Whether new runs are recorded (`state.record`, or `load(..., record=...)`)."""
        self._tasks = tasks
        self._keep_requests = keep_requests
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._opened = False
        self._closed = False
        self._background: set[asyncio.Task[RunResult]] = set()

    # -- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> Harness:
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
        """Wait for submitted runs to stop, then close the store."""
        if self._closed:
            return
        self._closed = True
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        if self._opened:
            await self.store.close()

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

    # -- runs -------------------------------------------------------------------------------

    async def run(
        self,
        task: str,
        input: str,
        *,
        principal: Principal | str,
        tenant: str | None = None,
        session_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> RunResult:
        """Run `task` on `input` until it ends or suspends, and return its result."""
        record, created = await self._create(
            task, input, principal, tenant, session_id, labels, idempotency_key
        )
        if not created:
            return await self.result(record.run_id)
        return await self._drive(record, created=True, history=[] if session_id is None else None)

    async def submit(
        self,
        task: str,
        input: str,
        *,
        principal: Principal | str,
        tenant: str | None = None,
        session_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> RunHandle:
        """Start a run and return at once with a handle to it."""
        record, created = await self._create(
            task, input, principal, tenant, session_id, labels, idempotency_key
        )
        coro = (
            self._drive(record, created=True, history=[] if session_id is None else None)
            if created
            else self.result(record.run_id)
        )
        job = asyncio.ensure_future(coro)
        self._background.add(job)
        job.add_done_callback(self._background.discard)
        return RunHandle(record.run_id, record.session_id, job)

    async def result(self, run_id: str) -> RunResult:
        """Read a run's result from the store (no memory of this process needed)."""
        await self._open()
        record = await self.store.get_run(run_id)
        answered: frozenset[str] = frozenset()
        if record.status == RunStatus.AWAITING_APPROVAL.value:
            rows = await self.store.approvals(run_id)
            answered = frozenset(r.approval_id for r in rows if r.status != "pending")
        return _result(record, answered)

    async def runs(
        self,
        *,
        status: RunStatus | str | None = None,
        task: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
    ) -> list[RunSummary]:
        """Stored runs, newest first."""
        await self._open()
        status_value = RunStatus(status).value if status is not None else None
        records = await self.store.list_runs(
            status=status_value, task=task, tenant=tenant, limit=limit
        )
        return [
            RunSummary(
                run_id=r.run_id,
                session_id=r.session_id,
                task=r.task,
                status=RunStatus(r.status),
                tenant=r.tenant,
                principal=str(r.principal.get("id")),
                created_at=r.created_at,
                updated_at=r.updated_at,
            )
            for r in records
        ]

    async def approve(
        self,
        run_id: str,
        approval_id: str,
        decision: Literal["approve", "decline"],
        *,
        approver: Principal | str,
        reason: str | None = None,
    ) -> RunResult:
        """Answer an approval; when none is left open, resume the run and return its result.

        `ApprovalDenied` when the approver lacks every role the rule names, is the principal
        who started the run (unless the rule sets `self_approve: true`), or belongs to another
        tenant; `ResolutionError` for an unknown approval or a second answer.
        """
        if decision not in ("approve", "decline"):
            raise ResolutionError(
                f"decision must be 'approve' or 'decline', got {decision!r} "
                f"(run {run_id}, approval {approval_id})"
            )
        who = as_principal(approver)
        await self._open()
        record = await self.store.get_run(run_id)
        rows = {row.approval_id: row for row in await self.store.approvals(run_id)}
        row = rows.get(approval_id)
        if row is None:
            known = ", ".join(rows) or "none"
            raise ResolutionError(
                f"run {run_id} has no approval {approval_id!r} (its approvals: {known})"
            )
        if row.status == "pending" and record.status != RunStatus.AWAITING_APPROVAL.value:
            raise ResolutionError(
                f"run {run_id} is {record.status}, not awaiting approval; "
                f"approval {approval_id} can no longer be answered"
            )
        if row.status == "pending":
            _check_approver(row.approvers, row.requested_by, row.self_approve, who, record)
        await self.store.decide_approval(
            run_id,
            approval_id,
            decision=decision,
            approver=who.id,
            approver_roles=who.roles,
            reason=reason,
            event=EventDraft(
                "approval_answered",
                {"approval_id": approval_id, "decision": decision, "approver": who.id},
            ),
        )
        # Read again: another approver may have answered the others meanwhile.
        if any(r.status == "pending" for r in await self.store.approvals(run_id)):
            return await self.result(run_id)
        try:
            return await self._drive(await self.store.get_run(run_id))
        except RunBusy:  # the last two answers raced: the other approver's worker resumes it
            return await self.result(run_id)

    async def resume(self, run_id: str) -> RunResult:
        """Continue a suspended or interrupted run from its last checkpoint.

        A run that has ended, or that still waits for an answer, is returned as it is.
        `RunBusy` when another worker's lease on it is live.
        """
        await self._open()
        record = await self.store.get_run(run_id)
        status = RunStatus(record.status)
        if status.ended:
            return _result(record)
        return await self._drive(record)

    async def replay(self, source: str | os.PathLike[str] | Recording) -> ReplayReport:
        """Replay a stored run (by id), a `Recording`, or a recording file against this spec.

        Model answers, tool results and approvals all come from the recording: nothing calls
        out and no tool runs. The report says whether the status, output or decisions changed,
        how many model requests differ, and whether the replay diverged (asked for something
        the recording lacks).
        """
        from pytest_harness.replay.replayer import replay

        await self._open()
        return await replay(self, source)

    async def export(self, run_id: str, dest: str | os.PathLike[str]) -> Path:
        """Write a recorded run as a golden recording file (`.yaml`, redacted).

        An existing `dest` is refused with `FileExistsError`; `HarnessError` when the run was
        not recorded.
        """
        from pytest_harness.errors import ArchiveError
        from pytest_harness.recording.model import Recording

        path = Path(dest)
        if path.suffix not in (".yaml", ".yml"):
            raise ArchiveError(
                f"cannot export to {path}: write a .yaml recording (.hx archives are not "
                "supported yet)"
            )
        await self._open()
        recording = Recording.from_run(await self.store.get_run(run_id))
        return recording.save(path)

    # -- internals --------------------------------------------------------------------------

    def _plan(self, task: str) -> TaskPlan:
        tasks = self._tasks if self._tasks is not None else self.plans.tasks
        plan = tasks.get(task)
        if plan is None:
            raise UnknownTask(task, list(tasks))
        return plan

    async def _create(
        self,
        task: str,
        input: str,
        principal: Principal | str,
        tenant: str | None,
        session_id: str | None,
        labels: Mapping[str, str] | None,
        idempotency_key: str | None,
    ) -> tuple[RunRecord, bool]:
        plan = self._plan(task)
        if not isinstance(input, str):
            raise TypeError(f"input must be a string, got {type(input).__name__}")
        who = as_principal(principal)
        plan.check_live()
        await self._open()
        run_id = f"run_{uuid.uuid4().hex}"
        merged_labels = {**plan.spec.labels, **(labels or {})}
        return await self.store.create_run(
            NewRun(
                run_id=run_id,
                session_id=session_id or f"ses_{uuid.uuid4().hex}",
                task=task,
                tenant=tenant if tenant is not None else who.tenant,
                principal=who.to_dict(),
                input=input,
                labels=merged_labels,
                idempotency_key=idempotency_key,
                status=RunStatus.RUNNING.value,
                state=RunState().to_dict(),
                events=[EventDraft("run_started", {"task": task})],
                lease_owner=self.owner,
                lease_ttl=self.spec.document.state.lease,
            )
        )

    async def _drive(
        self, record: RunRecord, *, created: bool = False, history: list[Message] | None = None
    ) -> RunResult:
        """Drive a run under this worker's lease until it ends or suspends.

        A run this worker has just `created` already holds its lease (token 1); any other is
        leased here and read again, for what its previous holder committed. The driver's last
        commit releases the lease; if it never gets there, the lease is released here.
        `history` is the session's earlier conversation (read from the store when None).
        """
        plan = self._plan(record.task)
        store = self.store
        state = self.spec.document.state
        token = record.lease_token
        if not created:
            token = await store.acquire_lease(record.run_id, self.owner, state.lease)
            record = await store.get_run(record.run_id)
        released = False
        try:
            status = RunStatus(record.status)
            if status.ended:
                return _result(record)
            ctx = DriveContext(
                store=store,
                owner=self.owner,
                lease=state.lease,
                renew=store.kind != "memory",
                record=self.record,
                keep_requests=self._keep_requests,
                spec_digest=self.spec.digest,
            )
            driver = Driver(ctx, plan, record, token)
            if status is RunStatus.AWAITING_APPROVAL:
                decided = {
                    row.approval_id: row
                    for row in await store.approvals(record.run_id)
                    if row.status != "pending"
                }
                driver.apply_decisions(decided)
                if any(
                    c.get("verdict") == "approve" and c.get("decision") is None
                    for c in driver.state.calls
                ):
                    return _result(record)
            if history is None:
                history = await self._history(record)
            result = await driver.drive(history)
            released = driver.released
            return result
        finally:
            if not released:
                await store.release_lease(record.run_id, token)

    async def _history(self, record: RunRecord) -> list[Message]:
        """The messages of the session's earlier completed runs."""
        history: list[Message] = []
        for earlier in await self.store.session_runs(record.session_id, before=record.run_id):
            if earlier.status == RunStatus.COMPLETED.value:
                history.extend(earlier.state.get("messages") or [])
        return history


def _result(record: RunRecord, answered: frozenset[str] = frozenset()) -> RunResult:
    return result_from_state(
        run_id=record.run_id,
        session_id=record.session_id,
        task=record.task,
        status=record.status,
        state=record.state,
        labels=record.labels,
        answered=answered,
    )


def _check_approver(
    approvers: tuple[str, ...],
    requested_by: str,
    self_approve: bool,
    who: Principal,
    record: RunRecord,
) -> None:
    if approvers and not set(approvers) & set(who.roles):
        have = ", ".join(who.roles) or "none"
        raise ApprovalDenied(
            f"{who.id!r} may not answer this approval of run {record.run_id}: it needs one of "
            f"the roles {', '.join(approvers)} (theirs: {have})"
        )
    if who.id == requested_by and not self_approve:
        raise ApprovalDenied(
            f"{who.id!r} started run {record.run_id} and may not approve its own request "
            "(a rule may allow it with self_approve: true)"
        )
    if record.tenant is not None and who.tenant is not None and who.tenant != record.tenant:
        raise ApprovalDenied(
            f"{who.id!r} belongs to tenant {who.tenant!r}; run {record.run_id} belongs to "
            f"tenant {record.tenant!r}"
        )
