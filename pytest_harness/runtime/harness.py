"""`Harness`: the public async API over a spec, its tools and models, and a store.

Durable runs (DESIGN §4, §5): every run is driven under a lease with a fencing token, so at most
one worker drives it; a worker that stops leaves the run `running` with a lease that expires,
and `recover()` (or `resume(run_id)`) in any process continues it from its last committed
boundary. `pause`/`cancel` write a control request that the driving worker reads at its next
boundary (or act at once, under the lease, when nobody drives the run). `resolve` settles a
tool call a crash left uncertain. `stream` follows a run's event log by cursor.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from pytest_harness.errors import (
    ApprovalDenied,
    RecordingError,
    ResolutionError,
    RunBusy,
    StoreError,
    UnknownExecutionKey,
    UnknownTask,
)
from pytest_harness.hookspecs import StoreFactory
from pytest_harness.models.base import Message
from pytest_harness.plugins import notify_checkpoint, registry
from pytest_harness.runtime.boundaries import Boundary
from pytest_harness.runtime.engine import DriveContext, Driver, args_digest, execution_key
from pytest_harness.runtime.events import EventHub, follow
from pytest_harness.runtime.journal import draft
from pytest_harness.runtime.plan import Plans, TaskPlan
from pytest_harness.runtime.principal import Principal, as_principal
from pytest_harness.runtime.results import RunResult, RunStatus, RunSummary
from pytest_harness.runtime.state import RunState, call_approvals, result_from_state
from pytest_harness.spec.spec import Spec
from pytest_harness.store.base import (
    ApprovalRow,
    Event,
    EventDraft,
    NewRun,
    RunRecord,
    Sample,
    Store,
    parse_cursor,
)

if TYPE_CHECKING:
    from pytest_harness.archive.export import ExportPolicy
    from pytest_harness.recording.model import Recording
    from pytest_harness.replay.report import ReplayReport

__all__ = ["EndedRuns", "Harness", "RunHandle", "load"]


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


_UNSET: Any = object()
"""`resolve(result=...)` was not given (None is a result like any other)."""

_PAUSABLE = (
    RunStatus.RUNNING.value,
    RunStatus.AWAITING_APPROVAL.value,
    RunStatus.AWAITING_RESOLUTION.value,
)
_CANCELLABLE = (*_PAUSABLE, RunStatus.PAUSED.value)


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
    made = _make_store(spec, store)
    evals: EndedRuns | None = None
    if spec.document.evals.online.graders:
        from pytest_harness.evals.online import OnlineEvals

        evals = OnlineEvals(spec, plans, made)
    if spec.document.execution.use == "temporal":
        return _temporal(spec, plans, made, evals, record)
    return Harness(spec, plans, made, evals=evals, record=record)


def _temporal(
    spec: Spec, plans: Plans, store: Store, evals: EndedRuns | None, record: bool | None
) -> Harness:
    """The seam to Temporal execution (DESIGN §14): imported only when the spec asks for it."""
    from pytest_harness.errors import ExecutionError

    try:
        from pytest_harness.temporal.client import TemporalHarness
    except ImportError as exc:
        raise ExecutionError(
            f"{spec.path} execution.use: temporal needs the Temporal SDK: "
            f"pip install 'pytest-harness[temporal]' ({exc})"
        ) from None
    return TemporalHarness(spec, plans, store, evals=evals, record=record)


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
    """A run started with `Harness.submit()`: its ids now, its events as they come, its result."""

    def __init__(
        self, run_id: str, session_id: str, task: asyncio.Task[RunResult], harness: Harness
    ) -> None:
        self.run_id = run_id
        self.session_id = session_id
        self._task = task
        self._harness = harness

    def events(self, *, after: str = "0") -> AsyncIterator[Event]:
        """The run's events after the cursor `after`, then live ones until it ends or waits.

        The same as `Harness.stream(handle.run_id, after=after)`; see there.
        """
        return self._harness.stream(self.run_id, after=after)

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
        evals: EndedRuns | None = None,
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
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._opened = False
        self._closed = False
        self._background: set[asyncio.Task[RunResult]] = set()
        self._hub = EventHub()
        self._driving: set[str] = set()
        """Runs a task of this harness drives now (its lease may look expired on memory)."""
        self.evals = evals
        """The online evals told about every run this harness ends (None: no graders)."""
        self._stopping = False

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
        """Wait for submitted runs to stop and pending eval grades to be stored; close the store."""
        if self._closed:
            return
        self._closed = True
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        if self.evals is not None:
            await self.evals.flush()
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
        record, created, history = await self._create(
            task, input, principal, tenant, session_id, labels, idempotency_key
        )
        if not created:
            return await self.result(record.run_id)
        return await self._drive(record, created=True, history=history)

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
        record, created, history = await self._create(
            task, input, principal, tenant, session_id, labels, idempotency_key
        )
        coro = (
            self._drive(record, created=True, history=history)
            if created
            else self.result(record.run_id)
        )
        job = asyncio.ensure_future(coro)
        self._background.add(job)
        job.add_done_callback(self._background.discard)
        return RunHandle(record.run_id, record.session_id, job, self)

    async def result(self, run_id: str) -> RunResult:
        """Read a run's result from the store (no memory of this process needed)."""
        await self._open()
        record = await self.store.get_run(run_id)
        answered: frozenset[str] = frozenset()
        if record.status in (RunStatus.AWAITING_APPROVAL.value, RunStatus.PAUSED.value):
            rows = await self.store.approvals(run_id)
            answered = frozenset(r.approval_id for r in rows if r.status != "pending")
            answered |= _moot(rows)
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
        status_value = RunStatus.parse(status).value if status is not None else None
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

        A paused run takes the answer too, and stays paused until `resume()`.
        `ApprovalDenied` when the approver lacks every role the rule names, is the principal
        who started the run (unless the rule sets `self_approve: true`), or, for a run with a
        tenant, is not of that tenant (a principal without a tenant is not a wildcard);
        `ResolutionError` for an unknown approval or a second answer.
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
        answerable = (RunStatus.AWAITING_APPROVAL.value, RunStatus.PAUSED.value)
        if approval_id in _moot(rows.values()):
            declined = next(
                r
                for r in rows.values()
                if r.execution_key == row.execution_key and r.status == "decline"
            )
            raise ResolutionError(
                f"approval {approval_id} of run {run_id} is moot: its call of {row.tool} was "
                f"declined by {declined.approver} (approval {declined.approval_id})"
            )
        if row.status == "pending" and record.status not in answerable:
            raise ResolutionError(
                f"run {run_id} is {record.status}, not awaiting approval; "
                f"approval {approval_id} can no longer be answered"
            )
        if row.status == "pending":
            _check_approver(row.approvers, row.requested_by, row.self_approve, who, record)
            _check_binding(row, record)
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
            journal=(
                draft(
                    "approval.answered",
                    {
                        "approval_id": approval_id,
                        "tool": row.tool,
                        "decision": decision,
                        "approver": {"id": who.id, "roles": list(who.roles)},
                        "reason": reason,
                    },
                    step=int((record.state.get("usage") or {}).get("steps", 0)),
                    execution_key=row.execution_key,
                )
                if record.record
                else None
            ),
        )
        self._hub.committed(run_id)
        # Read again: another approver may have answered the others meanwhile. A decline
        # settles its call at once: the call's other requests are moot, not open.
        rows_now = await self.store.approvals(run_id)
        moot = _moot(rows_now)
        if any(r.status == "pending" and r.approval_id not in moot for r in rows_now):
            return await self.result(run_id)
        current = await self.store.get_run(run_id)
        if current.status != RunStatus.AWAITING_APPROVAL.value:  # paused: resume() continues it
            return await self.result(run_id)
        try:
            return await self._drive(current)
        except RunBusy:  # the last two answers raced: the other approver's worker resumes it
            return await self.result(run_id)

    async def resolve(
        self,
        run_id: str,
        execution_key: str,
        *,
        result: Any = _UNSET,
        retry: bool = False,
        abort: bool = False,
        resolver: Principal | str | None = None,
    ) -> RunResult:
        """Settle a tool call whose outcome a crash left uncertain, then continue the run.

        Give exactly one of: `result=` the value the tool produced (you checked the system it
        acts on; the model reads it as the tool's result), `retry=True` (invoke the tool again,
        attempt + 1 with the same execution key: you accept a possible repeat), or
        `abort=True` (the model is told the call was aborted, with its outcome unknown). The
        run then continues and its result is returned; a paused run records the resolution
        and stays paused until `resume()`. `resolver` (optional) is who decided, for the
        `tool_resolved` event and the abort message.

        `ResolutionError` when not exactly one is given, when the call is not uncertain (never
        interrupted, or already resolved), or when the run does not wait for a resolution;
        `UnknownExecutionKey` for a key the run does not have; `RunBusy` while another worker
        holds the run.
        """
        given = [
            name
            for name, on in (("result", result is not _UNSET), ("retry", retry), ("abort", abort))
            if on
        ]
        if len(given) != 1:
            what = " and ".join(f"{g}=" for g in given) if given else "none of them"
            raise ResolutionError(
                f"resolve() takes exactly one of result=..., retry=True or abort=True; got "
                f"{what} (run {run_id}, execution key {execution_key})"
            )
        by = None if resolver is None else as_principal(resolver).id
        await self._open()
        record = await self.store.get_run(run_id)
        _check_resolvable(record, execution_key)
        return await self._drive(record, resolution=(execution_key, given[0], result, by))

    async def pause(self, run_id: str) -> RunResult:
        """Ask the run to pause: no new step or tool call starts, a running tool settles first.

        A run that no worker drives (waiting for an approval or a resolution, or interrupted)
        is paused at once; one that a worker drives (in any process) pauses at its next
        boundary, and the result returned here may still say `running`. While paused, its
        deadline does not run; approvals and resolutions are still taken; `resume()` continues
        it. An ended or already paused run is returned as it is.
        """
        await self._open()
        record = await self.store.request_control(run_id, "pause", statuses=_PAUSABLE)
        return await self._after_control(record)

    async def cancel(self, run_id: str) -> RunResult:
        """Ask the run to stop for good: it ends `cancelled` at its next boundary.

        Cooperative like `pause`: a running tool settles first (nothing already done is
        undone), and a run no worker drives is cancelled at once. A cancelled run is never
        resumed: `recover()` skips it, and `resume()` returns it as it is.
        """
        await self._open()
        record = await self.store.request_control(run_id, "cancel", statuses=_CANCELLABLE)
        return await self._after_control(record)

    async def recover(self) -> list[RunResult]:
        """Resume every interrupted run whose lease expired (their worker stopped).

        For a restarted worker: runs of this spec's tasks left `running` with no live lease,
        and runs whose approvals were all answered (the last a lease ago or more) but that
        nobody resumed because the answering process stopped in between, are claimed one at
        a time (`Store.claim_run`: one atomic write, `FOR UPDATE SKIP
        LOCKED` on Postgres) and each is continued from its last committed boundary. Returns
        the results of the runs this harness drove, and only those: over several workers
        recovering at once, each run appears in exactly one of their results.
        """
        results: list[RunResult] = []
        tried: set[str] = set()
        while True:
            result = await self.recover_next(skip=tried)
            if result is None:
                return results
            tried.add(result.run_id)
            results.append(result)

    async def recover_next(
        self,
        *,
        skip: Collection[str] = (),
        on_claim: Callable[[RunRecord], None] | None = None,
    ) -> RunResult | None:
        """Claim one interrupted run (not in `skip`), drive it, and return its result.

        None when there is nothing to claim. `on_claim` is called with the claimed record
        before the drive starts (the worker logs it). The building block of `recover()` and
        of `pytest-harness worker`.
        """
        await self._open()
        lease = self.spec.document.state.lease
        claim = await self.store.claim_run(
            self.owner,
            lease,
            tasks=list(self._tasks if self._tasks is not None else self.plans.tasks),
            exclude={*self._driving, *skip},
            grace=lease,
        )
        if claim is None:
            return None
        record, previous = claim
        if on_claim is not None:
            on_claim(record)
        return await self._drive(record, claimed=True, previous_expiry=previous)

    def stop_driving(self) -> None:
        """Make every run this harness drives stop at its next clean boundary (shutdown).

        A boundary is clean where everything done so far is committed or recomputable: before
        a model call, after a tool's result commit. The drive then raises `DriveStopped`,
        its lease is released, and the run stays `running` for another worker to claim at
        once. Used by `pytest-harness worker` on SIGTERM; irreversible for this harness.
        """
        self._stopping = True

    def stream(self, run_id: str, *, after: str = "0") -> AsyncIterator[Event]:
        """The run's events after the cursor `after`, then live ones until it ends or waits.

        Use it as `async for event in harness.stream(run_id, after=cursor)`. Stored events come
        in cursor order, each once; save `event.cursor` and pass it back to reconnect without
        gaps or repeats. Events of a run this harness drives arrive at once; those of a run
        driven by another process within half a second. `text_delta` and `attempt_reset`
        events of this process's runs arrive provisionally first, with `cursor == ""`, and are
        not repeated when they commit. Breaking out of the loop does not affect the run. A run
        left `running` by a worker that died is followed until another worker recovers it.
        `ValueError` for a malformed cursor; `UnknownRun` (on first iteration) for no such run.
        """
        parse_cursor(after)
        return follow(self.store, self._hub, run_id, after, ready=self._open)

    async def resume(self, run_id: str, *, record: bool | None = None) -> RunResult:
        """Continue a suspended or interrupted run from its last checkpoint.

        A run that has ended, or that still waits for an answer, is returned as it is.
        `RunBusy` when another worker's lease on it is live. `record` omitted: the run keeps
        the recording setting it started with; one that conflicts with it is refused with
        `RecordingError` (recording is never turned on for a run that did not record, nor
        off for one that does).
        """
        await self._open()
        stored = await self.store.get_run(run_id)
        if record is not None and bool(record) != stored.record:
            why = (
                "recording cannot be turned on for a run that did not record"
                if record
                else "a recorded run keeps recording; omit record= to inherit it"
            )
            state = "records" if stored.record else "was not recorded"
            raise RecordingError(
                f"run {run_id} {state}; resume(record={record}) conflicts with the setting it "
                f"started with: {why}"
            )
        if RunStatus(stored.status).ended:
            return _result(stored)
        return await self._drive(stored)

    async def _after_control(self, record: RunRecord) -> RunResult:
        """Act on a control request just written, unless a worker will at its next boundary."""
        run_id = record.run_id
        if (
            record.control is None
            or RunStatus(record.status).ended
            or run_id in self._driving
            or record.lease_live(time.time())
        ):
            return await self.result(run_id)
        return await self._settle_control(run_id)

    async def _settle_control(self, run_id: str) -> RunResult:
        """Pause or cancel a run nobody drives, under this worker's lease."""
        try:
            return await self._drive(await self.store.get_run(run_id), control_only=True)
        except RunBusy:  # a worker took it meanwhile: it acts on the request itself
            return await self.result(run_id)

    async def recording(self, run_id: str) -> Recording:
        """The recording of a recorded run, from its journal where the run executes.

        The store's journal; on Temporal, the journal the run's workflow holds.
        `HarnessError` when the run was not recorded.
        """
        from pytest_harness.recording.model import Recording

        await self._open()
        return await Recording.from_store(self.store, run_id)

    async def replay(
        self, source: str | os.PathLike[str] | Recording, *, tools: str | None = None
    ) -> ReplayReport:
        """Replay a stored run (by id), a `Recording`, or a recording file against this spec.

        Model answers, tool results and approvals all come from the recording: nothing calls
        out and no tool runs, but today's tool contracts apply (arguments today's schema
        rejects get `invalid_arguments`; a tool no longer in the task, `unknown`). With
        `tools="safe"`, tools whose replay policy is `safe` really run and a result that
        differs from the recorded one is a changed `tool` decision. The report says whether
        the status, output or decisions changed, how many model requests differ and in which
        part, and whether the replay diverged (asked for something the recording lacks).
        """
        from pytest_harness.replay.replayer import replay

        await self._open()
        return await replay(self, source, tools=tools)

    async def export(
        self,
        run_id: str,
        dest: str | os.PathLike[str],
        *,
        policy: ExportPolicy | None = None,
    ) -> Path:
        """Write a recorded run as a `.hx` archive or a `.yaml` golden recording, by suffix.

        A `.hx` archive (DESIGN §12) follows `policy` (default `ExportPolicy()`: metadata
        only); a `.yaml` recording is always redacted and holds no request payloads or
        artifacts. An existing `dest` is refused with `FileExistsError`; `HarnessError` when the
        run was not recorded, `ArchiveError` for another suffix or a limit the archive would
        exceed.
        """
        from pytest_harness.errors import ArchiveError

        path = Path(dest)
        await self._open()
        if path.suffix == ".hx":
            from pytest_harness.archive.export import export_run

            record = await self.store.get_run(run_id)
            return await export_run(self.store, record, path, policy=policy)
        if path.suffix not in (".yaml", ".yml"):
            raise ArchiveError(
                f"cannot export to {path}: the destination must end in .hx (an incident "
                "archive) or .yaml (a golden recording)"
            )
        await self._open()
        recording = await self.recording(run_id)
        if self.evals is not None:  # a recording keeps the grades of the online evals
            from pytest_harness.evals.replay import with_grades

            recording = await with_grades(self, recording)
        return recording.save(path)

    # -- online evals -----------------------------------------------------------------------

    async def flush_evals(self) -> None:
        """Wait until the grades of the runs ended so far are stored (DESIGN §15).

        Grading runs in the background, so a run's samples may not be stored when `run()`
        returns; `aclose()` waits for them too.
        """
        if self.evals is not None:
            await self.evals.flush()

    async def samples(
        self,
        *,
        task: str | None = None,
        grader: str | None = None,
        since: datetime | timedelta | float | None = None,
        limit: int | None = 100,
    ) -> list[Sample]:
        """Online eval samples in the store, newest first (DESIGN §15).

        `since` is a moment (a `datetime`, or seconds since the epoch) or a `timedelta` (that
        long ago); `limit=None` returns every match.
        """
        await self._open()
        return await self.store.samples(task=task, grader=grader, since=_moment(since), limit=limit)

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
        *,
        history: list[Message] | None = None,
    ) -> tuple[RunRecord, bool, list[Message]]:
        """Create a run; return it, whether it is new, and its session's earlier conversation.

        In an existing session, the run takes the session's recording setting (saved with its
        first run); `history` replaces the conversation read from the session (replays).
        """
        plan = self._plan(task)
        if not isinstance(input, str):
            raise TypeError(f"input must be a string, got {type(input).__name__}")
        who = as_principal(principal)
        plan.check_live()
        await self._open()
        run_id = f"run_{uuid.uuid4().hex}"
        merged_labels = {**plan.spec.labels, **(labels or {})}
        record = self.record
        earlier: list[RunRecord] = []
        if session_id is not None:
            earlier = await self.store.session_runs(session_id)
            if earlier:
                record = self._session_record(session_id, earlier[0].record)
        if history is None:
            history = [
                message
                for run in earlier
                if run.status == RunStatus.COMPLETED.value
                for message in run.state.get("messages") or []
            ]
        tenant_ = tenant if tenant is not None else who.tenant
        journal = []
        if record:
            started = {
                "task": task,
                "input": input,
                "principal": who.to_dict(),
                "tenant": tenant_,
                "labels": merged_labels,
                "idempotency_key": idempotency_key,
                "spec": self.spec.document.name,
                "spec_digest": self.spec.digest,
                "history": list(history),
                # kept once: every request of the run has this prompt and these schemas
                "system": plan.spec.prompt,
                "tool_schemas": [
                    {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
                    for t in plan.schemas
                ],
            }
            journal.append(draft("run.started", started, step=0))
        stored, created = await self.store.create_run(
            NewRun(
                run_id=run_id,
                session_id=session_id or f"ses_{uuid.uuid4().hex}",
                task=task,
                tenant=tenant_,
                principal=who.to_dict(),
                input=input,
                labels=merged_labels,
                idempotency_key=idempotency_key,
                status=RunStatus.RUNNING.value,
                state=RunState().to_dict(),
                events=[EventDraft("run_started", {"task": task})],
                record=record,
                journal=journal,
                lease_owner=self.owner,
                lease_ttl=self.spec.document.state.lease,
            )
        )
        if created:
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
                was_ended = RunStatus(record.status).ended
                ctx = DriveContext(
                    store=store,
                    owner=self.owner,
                    lease=lease,
                    renew=store.kind != "memory",
                    keep_requests=self._keep_requests,
                    spec_digest=self.spec.digest,
                    hub=self._hub,
                    stopping=lambda: self._stopping,
                )
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
        status = RunStatus(record.status)
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
        """The messages of the session's earlier completed runs."""
        history: list[Message] = []
        for earlier in await self.store.session_runs(record.session_id, before=record.run_id):
            if earlier.status == RunStatus.COMPLETED.value:
                history.extend(earlier.state.get("messages") or [])
        return history


def _moment(since: datetime | timedelta | float | None) -> float | None:
    """Seconds since the epoch for `samples(since=...)`."""
    if since is None:
        return None
    if isinstance(since, timedelta):
        return time.time() - since.total_seconds()
    if isinstance(since, datetime):
        return since.timestamp()
    if isinstance(since, int | float) and not isinstance(since, bool):
        return float(since)
    raise TypeError(
        f"since must be a datetime, a timedelta or a number, not {type(since).__name__}"
    )


def _moot(rows: Iterable[ApprovalRow]) -> frozenset[str]:
    """The open requests whose call another request declined: closed, never to be answered."""
    rows = list(rows)
    declined = {r.execution_key for r in rows if r.status == "decline"}
    return frozenset(
        r.approval_id for r in rows if r.status == "pending" and r.execution_key in declined
    )


def _check_resolvable(record: RunRecord, key: str) -> None:
    """Raise unless `key` names an uncertain call of a run that waits for its resolution."""
    run_id = record.run_id
    state = record.state
    call = next((c for c in state.get("calls") or () if c.get("key") == key), None)
    if call is None:
        if key in _past_keys(record):
            raise ResolutionError(
                f"tool call {key} of run {run_id} already has its outcome (the run moved past it); "
                "only a call whose outcome a crash left uncertain can be resolved"
            )
        raise UnknownExecutionKey(run_id, key)
    name = call.get("name")
    if call.get("status") != "uncertain":
        done = call.get("resolution")
        if done:
            who = done.get("by") or "an operator"
            raise ResolutionError(
                f"tool call {key} ({name}) of run {run_id} was already resolved: "
                f"{done.get('how')} by {who}"
            )
        raise ResolutionError(
            f"tool call {key} ({name}) of run {run_id} is {call.get('status')}, not uncertain; "
            "only a call whose outcome a crash left uncertain can be resolved"
        )
    if record.status not in (RunStatus.AWAITING_RESOLUTION.value, RunStatus.PAUSED.value):
        raise ResolutionError(
            f"run {run_id} is {record.status}, not awaiting resolution; tool call {key} "
            f"({name}) can no longer be resolved"
        )


def _past_keys(record: RunRecord) -> set[str]:
    """The execution keys of the calls of the run's earlier model steps."""
    keys: set[str] = set()
    step = 0
    for message in record.state.get("messages") or ():
        if message.get("role") == "assistant":
            step += 1
            for index in range(len(message.get("tool_calls") or ())):
                keys.add(execution_key(record.run_id, step, index))
    return keys


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
    if record.tenant is not None and who.tenant != record.tenant:
        # A principal without a tenant is not a wildcard: it belongs to no tenant.
        theirs = "no tenant" if who.tenant is None else f"tenant {who.tenant!r}"
        raise ApprovalDenied(
            f"{who.id!r} belongs to {theirs}; run {record.run_id} belongs to tenant "
            f"{record.tenant!r}, and only a principal of that tenant may answer its approvals"
        )


def _check_binding(row: ApprovalRow, record: RunRecord) -> None:
    """The approval must still be bound to the run's pending call: same key, same arguments."""
    for call in record.state.get("calls") or ():
        if any(e["approval_id"] == row.approval_id for e in call_approvals(call)):
            if (
                call.get("key") == row.execution_key
                and args_digest(call["args"]) == row.args_digest
            ):
                return
            break
    raise ResolutionError(
        f"approval {row.approval_id} of run {record.run_id} does not match the run's pending "
        f"call (execution key {row.execution_key}); nothing was recorded"
    )
