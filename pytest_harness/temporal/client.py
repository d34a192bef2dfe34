"""`TemporalHarness`: the `Harness` API over runs that execute as `HarnessRun` workflows.

`pytest_harness.load()` returns one when the spec says `execution: {use: temporal}`. Starting a
run starts a workflow whose id is the run id; `result`, `runs` and `stream` read the workflows;
`approve`, `resolve`, `resume`, `pause` and `cancel` are updates (a refused one is rejected by the
workflow's validator and raises the same error as locally). The spec's store still
holds what Temporal does not: the artifacts tools return and the online eval samples (both
written by workers); `export` to `.hx` reads the journal from the workflow and the artifacts
from that store (`temporal.records`). A session's runs take slots (`temporal.sessions`), so a
new run finds the session's earlier runs without waiting for Temporal's visibility.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from pytest_harness.errors import (
    ApprovalDenied,
    ExecutionError,
    HarnessError,
    RecordingError,
    ResolutionError,
    UnknownExecutionKey,
)
from pytest_harness.principal import Principal
from pytest_harness.recording.model import Recording
from pytest_harness.runtime.arguments import known_run
from pytest_harness.runtime.harness import Harness, RunHandle
from pytest_harness.runtime.harness_control import _UNSET, checked_approval, checked_resolution
from pytest_harness.runtime.journal import started_payload
from pytest_harness.runtime.results import RunResult, RunStatus, RunSummary
from pytest_harness.spec.spec import Spec
from pytest_harness.store.base import Event, parse_cursor
from pytest_harness.temporal.converter import DATA_CONVERTER
from pytest_harness.temporal.grading import PendingGrades, graded
from pytest_harness.temporal.paging import PAYLOAD_LIMIT, encoded_size, too_large
from pytest_harness.temporal.reading import Listing, listed_runs, read_run, whole
from pytest_harness.temporal.records import result_of
from pytest_harness.temporal.segment import record_of
from pytest_harness.temporal.sessions import place
from pytest_harness.temporal.starting import first_snapshot

if TYPE_CHECKING:
    from pytest_harness.archive import ExportPolicy

__all__ = ["TemporalHarness", "connect"]

log = logging.getLogger("pytest_harness.temporal")

_CONNECT_TIMEOUT = 10.0
_SLOT_TRIES = 20
"""How often a run tries the next slot of its session when runs started at once took it."""
_GRADES_WAIT = 120.0
"""How long `aclose()` waits for the grades of ended runs (`flush_evals()` waits as long as it
takes); a worker stores them later all the same."""


async def connect(spec: Spec) -> Client:
    """A client of the spec's Temporal server; `ExecutionError` naming it when unreachable."""
    execution = spec.document.execution
    try:
        async with asyncio.timeout(_CONNECT_TIMEOUT):
            return await Client.connect(
                execution.address, namespace=execution.namespace, data_converter=DATA_CONVERTER
            )
    except (RuntimeError, TimeoutError, RPCError) as exc:
        raise ExecutionError(
            f"{spec.path} execution.address: cannot reach the Temporal server at "
            f"{execution.address} (namespace {execution.namespace!r}): "
            f"{str(exc) or type(exc).__name__}; start one (`temporal server start-dev`) or "
            "fix the address"
        ) from None


_REFUSALS: dict[str, type[HarnessError]] = {
    "ApprovalDenied": ApprovalDenied,
    "ResolutionError": ResolutionError,
}


class TemporalHarness(Harness):
    """A `Harness` whose runs execute on Temporal (DESIGN §14). Every method is async."""

    _client: Client | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._grades = PendingGrades()

    async def _open(self) -> None:
        await super()._open()
        if self._client is None:
            self._client = await connect(self.spec)

    async def _handle(self, run_id: str) -> WorkflowHandle[Any, Any]:
        """The run's workflow; `UnknownRun` for an id no workflow can have (`known_run`)."""
        known_run(run_id)
        await self._open()
        assert self._client is not None
        return self._client.get_workflow_handle(run_id)

    # -- starting -----------------------------------------------------------------------------

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
        """Start the run's `HarnessRun` workflow (id: the run id) and return a handle at once.

        With `idempotency_key`, the run id is derived from it, the tenant and the task, so a
        second submit with the same key, tenant and task returns the first run (another
        tenant's run with that key is never returned). In an existing session of another
        tenant, `SessionDenied` and nothing starts. A start that cannot cross in one Temporal
        payload (its input and the session's earlier conversation over
        `paging.PAYLOAD_LIMIT`) raises `PayloadTooLarge` and starts nothing.
        """
        plan, who, tenant_, merged = self._starting(
            task, input, principal, tenant, labels, session_id, idempotency_key
        )
        await self._open()
        assert self._client is not None
        execution = self.spec.document.execution
        session = session_id or f"ses_{uuid.uuid4().hex}"
        for _ in range(_SLOT_TRIES):
            try:
                run_id, history = await place(
                    self._client,
                    execution.task_queue,
                    session,
                    idempotency_key=idempotency_key,
                    new=session_id is None,
                    snapshot=self._ended_snapshot,
                    tenant=tenant_,
                    task=task,
                )
            except RPCError as exc:
                raise ExecutionError(f"session {session}: Temporal answered {exc}") from None
            started = started_payload(
                self.spec,
                plan,
                input,
                who,
                tenant_,
                merged,
                idempotency_key,
                history,
                given_labels=labels,
            )
            snapshot = first_snapshot(run_id, session, started, record=self.record)
            conf = {
                "spec_digest": self.spec.digest,
                "lease": self.spec.document.state.lease,
                "history": history,
                "grade": graded(self.evals, task, run_id),
            }
            start = {"snapshot": snapshot, "conf": conf}
            size = encoded_size(start)
            if size > PAYLOAD_LIMIT:
                # the server would refuse it with a bare RPC error; nothing is started, so
                # the session's slot stays free
                raise too_large(
                    f"the start of a run of task {task} in session {session} (its input, "
                    f"{encoded_size(input)} bytes, and the session's earlier conversation, "
                    f"{encoded_size(history)} bytes)",
                    size,
                )
            try:
                await self._client.start_workflow(
                    "HarnessRun",
                    start,
                    id=run_id,
                    task_queue=execution.task_queue,
                    # what `runs()` lists of a run whose workflow ends outside the harness
                    memo={
                        "spec": self.spec.document.name,
                        "task": task,
                        "session": session,
                        "tenant": tenant_,
                        "principal": who.id,
                    },
                    # a run id is never reused, even once its run ended (idempotency keys and
                    # session slots rely on it)
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                )
            except WorkflowAlreadyStartedError:
                if idempotency_key is None:
                    continue  # a run started at the same moment took the session's slot
                snapshot = await self._snapshot(run_id)  # the idempotency key's run, as it is
            except RPCError as exc:
                raise ExecutionError(f"cannot start run {run_id} on Temporal: {exc}") from None
            break
        else:
            raise ExecutionError(
                f"cannot start a run in session {session}: its next slot was taken by another "
                f"run {_SLOT_TRIES} times in a row; retry"
            )
        if conf["grade"]:
            self._grades.note(run_id)
        job = asyncio.ensure_future(self._rested(run_id))
        self._background.add(job)
        job.add_done_callback(self._background.discard)
        return RunHandle(run_id, str(snapshot["session_id"]), job, self)

    async def _ended_snapshot(self, run_id: str) -> dict[str, Any] | None:
        """The run's snapshot; None when its workflow failed or was ended outside the harness."""
        try:
            return await self._snapshot(run_id)
        except HarnessError:
            return None

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
        """Start the run's workflow and return its result once it ends or suspends."""
        handle = await self.submit(
            task,
            input,
            principal=principal,
            tenant=tenant,
            session_id=session_id,
            labels=labels,
            idempotency_key=idempotency_key,
        )
        return await handle.result()

    # -- reading ------------------------------------------------------------------------------

    async def _snapshot(
        self,
        run_id: str,
        *,
        rested: bool = False,
        head_only: bool = False,
        keys: tuple[str, ...] | None = None,
    ) -> dict[str, Any]:
        """The workflow's snapshot of the run (`reading.read_run`), read in pages."""
        handle = await self._handle(run_id)
        return await read_run(handle, run_id, rested=rested, head_only=head_only, keys=keys)

    async def _rested(self, run_id: str) -> RunResult:
        return result_of(await self._snapshot(run_id, rested=True))

    async def result(self, run_id: str) -> RunResult:
        """The run's result as its workflow holds it now."""
        return result_of(await self._snapshot(run_id))

    async def recording(self, run_id: str) -> Recording:
        """The recording of a recorded run, from the journal its workflow holds."""
        snap = await self._snapshot(run_id)
        if not snap.get("record"):
            raise RecordingError(
                f"run {run_id} was not recorded: start runs with state.record: true "
                "(or load(..., record=True)) to replay them"
            )
        return Recording.from_journal(snap.get("journal") or (), record=record_of(snap))

    async def export(
        self,
        run_id: str,
        dest: str | os.PathLike[str],
        *,
        policy: ExportPolicy | None = None,
    ) -> Path:
        """Write a recorded run as a `.hx` archive or a `.yaml` golden recording, by suffix.

        As locally (see `Harness.export`): the archive's journal and run come from the run's
        workflow, the artifacts from the `state:` store the workers write them to. Nothing
        is started or resumed.
        """
        path = Path(dest)
        if path.suffix != ".hx":
            return await super().export(run_id, dest, policy=policy)
        from pytest_harness.archive.export import export_run
        from pytest_harness.temporal.records import RunView

        snap = await self._snapshot(run_id)
        view = RunView(snap, self.store)
        return await export_run(view, record_of(snap), path, policy=policy, spec=self.spec)

    async def runs(
        self,
        *,
        status: RunStatus | str | None = None,
        task: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
    ) -> list[RunSummary]:
        """The runs of this spec in the namespace, newest first (`reading.listed_runs`).

        A run whose head cannot be read is listed from its workflow's memo (logged with why).
        """
        await self._open()
        assert self._client is not None
        wanted = RunStatus.parse(status).value if status is not None else None
        listing = Listing(self._client, self.spec.document.execution.task_queue)
        return await listed_runs(
            listing, self.spec.document.name, task=task, status=wanted, tenant=tenant, limit=limit
        )

    def stream(self, run_id: str, *, after: str = "0") -> AsyncIterator[Event]:
        """The run's events after the cursor `after`, then new ones until it ends or waits.

        Read from the workflow (polled every 0.2 s); the cursor is the event's position.
        """
        start = parse_cursor(after)
        return self._follow(run_id, start)

    async def _follow(self, run_id: str, start: int) -> AsyncIterator[Event]:
        seen = start
        while True:
            snap = await self._snapshot(run_id, keys=("status", "updated_at", "events"))
            events = snap.get("events") or []
            for index in range(seen, len(events)):
                event = events[index]
                yield Event(
                    run_id=run_id,
                    cursor=str(index + 1),
                    kind=event["type"],
                    data=event["data"],
                    at=float(snap["updated_at"]),
                )
            seen = max(seen, len(events))
            if snap["status"] != RunStatus.RUNNING.value:
                return
            await asyncio.sleep(0.2)

    # -- answering ----------------------------------------------------------------------------

    async def _update(self, run_id: str, name: str, arg: Any = None) -> RunResult:
        handle = await self._handle(run_id)
        try:
            if arg is None:
                snap = await handle.execute_update(name, result_type=dict)
            else:
                snap = await handle.execute_update(name, arg, result_type=dict)
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError):
                error = _REFUSALS.get(cause.type or "")
                if error is not None:
                    raise error(cause.message) from None
                if cause.type == "UnknownExecutionKey" and isinstance(arg, dict):
                    raise UnknownExecutionKey(run_id, str(arg.get("key"))) from None
            raise ExecutionError(f"run {run_id}: {name} failed: {cause or exc}") from None
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                # no such run (UnknownRun), a workflow that failed (ExecutionError), or one
                # that ended meanwhile
                ended = await self._snapshot(run_id)
                raise ResolutionError(
                    f"run {run_id} is {ended['status']}; its {name} can no longer be changed"
                ) from None
            raise ExecutionError(f"run {run_id}: Temporal answered {exc}") from None
        if graded(self.evals, snap["task"], run_id):
            self._grades.note(run_id)
        if not whole(snap):  # the run is larger than a page: read it in pages
            snap = await self._snapshot(run_id)
        return result_of(snap)

    async def approve(
        self,
        run_id: str,
        approval_id: str,
        decision: Literal["approve", "decline"],
        *,
        approver: Principal | str,
        reason: str | None = None,
    ) -> RunResult:
        """Answer an approval (the workflow's `approve` update, validated like locally).

        Its arguments are checked as `Harness.approve` checks them (`checked_approval`)
        before anything is sent: a refused answer never reaches the workflow's history.
        """
        who = checked_approval(run_id, approval_id, decision, approver, reason)
        answer = {
            "approval_id": approval_id,
            "decision": decision,
            "approver": who.to_dict(),
            "reason": reason,
        }
        return await self._update(run_id, "approve", answer)

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
        """Settle an uncertain call (the workflow's `resolve` update), then continue the run.

        Its arguments are checked as `Harness.resolve` checks them (`checked_resolution`)
        before anything is sent.
        """
        given, by = checked_resolution(run_id, execution_key, result, retry, abort, resolver)
        how = {
            "key": execution_key,
            "how": given,
            "value": None if result is _UNSET else result,
            "by": by,
        }
        return await self._update(run_id, "resolve", how)

    async def resume(self, run_id: str, *, record: bool | None = None) -> RunResult:
        """Continue a paused run; any other run is returned as it is.

        `record` given must be the run's own setting (`RecordingError` otherwise).
        """
        snap = await self._snapshot(run_id)
        if record is not None and bool(record) != bool(snap.get("record")):
            raise RecordingError(
                f"run {run_id} {'records' if snap.get('record') else 'was not recorded'}; "
                f"resume(record={record}) conflicts with the setting it started with"
            )
        if snap["status"] != RunStatus.PAUSED.value:
            return result_of(snap)
        return await self._update(run_id, "resume")

    async def pause(self, run_id: str) -> RunResult:
        """Ask the run to pause (an update); an ended run is returned as it is.

        A waiting run pauses at once; a driven one at its next boundary.
        """
        return await self._control(run_id, "pause")

    async def cancel(self, run_id: str) -> RunResult:
        """Ask the run to stop for good (an update; a waiting run is cancelled at once)."""
        return await self._control(run_id, "cancel")

    async def _control(self, run_id: str, what: str) -> RunResult:
        snap = await self._snapshot(run_id)
        if RunStatus(snap["status"]).ended:
            return result_of(snap)
        return await self._update(run_id, "control", what)

    async def recover(self) -> list[RunResult]:
        """Nothing to do: Temporal resumes the runs of a worker that stopped."""
        return []

    async def flush_evals(self) -> None:
        """Wait until the ended runs this harness started or answered are graded (DESIGN §15).

        A worker grades a run once its workflow has ended it; the workflow closes when the
        samples are stored. Runs still under way are graded when they end.
        """
        if self._grades.runs:
            await self._open()
            assert self._client is not None
            await self._grades.flush(self._client)

    async def aclose(self) -> None:
        """Wait for submitted runs' handles and their grades; close the store (not the client)."""
        if not self._closed and self._grades.runs:
            if self._background:
                await asyncio.gather(*self._background, return_exceptions=True)
            try:
                async with asyncio.timeout(_GRADES_WAIT):
                    await self.flush_evals()
            except (HarnessError, TimeoutError) as exc:  # no server, or no worker: theirs now
                log.warning(
                    "online evals: stopped waiting for the grades of Temporal runs %s: %s",
                    ", ".join(sorted(self._grades.runs)),
                    str(exc) or f"none stored within {_GRADES_WAIT:g}s (is a worker running?)",
                )
        await super().aclose()
