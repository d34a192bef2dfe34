"""The `Harness` methods that answer and steer runs: approvals, resolutions, pause, cancel, resume.

Each one writes its answer or request to the store first, then drives the run under this
worker's lease when it may go on (DESIGN §5, §7).
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pytest_harness.errors import RecordingError, ResolutionError, RunBusy
from pytest_harness.principal import Principal, as_principal
from pytest_harness.runtime.approval_checks import (
    _approval_row,
    _check_approver,
    _check_binding,
    _check_decision,
    _check_resolvable,
    _how_resolved,
    _moot,
    _result,
)
from pytest_harness.runtime.arguments import check_principal, check_result, check_text, known_run
from pytest_harness.runtime.harness_base import HarnessBase
from pytest_harness.runtime.journal import draft
from pytest_harness.runtime.results import RunResult, RunStatus
from pytest_harness.store.base import EventDraft, RunRecord

__all__ = ["HarnessControl", "checked_approval", "checked_resolution"]

_UNSET: Any = object()
"""`resolve(result=...)` was not given (None is a result like any other)."""

_PAUSABLE = (
    RunStatus.RUNNING.value,
    RunStatus.AWAITING_APPROVAL.value,
    RunStatus.AWAITING_RESOLUTION.value,
)
_CANCELLABLE = (*_PAUSABLE, RunStatus.PAUSED.value)


def checked_approval(
    run_id: str,
    approval_id: str,
    decision: str,
    approver: Principal | str,
    reason: str | None,
) -> Principal:
    """The approver of an `approve()` whose arguments could be an answer; else the error.

    `ResolutionError` for a decision other than `approve`/`decline`, `StoreError` naming
    the argument for text no store can keep, `UnknownRun` for a run id no store can hold:
    checked before anything is read or sent, by every harness (local or Temporal) alike.
    """
    _check_decision(decision, run_id, approval_id)
    who = as_principal(approver)
    check_principal(who, "approver")
    check_text(reason, "reason")
    known_run(run_id)
    return who


def checked_resolution(
    run_id: str,
    execution_key: str,
    result: Any,
    retry: bool,
    abort: bool,
    resolver: Principal | str | None,
) -> tuple[str, str | None]:
    """How a `resolve()` settles the call (`result`, `retry`, `abort`) and the resolver's id.

    `result` is `_UNSET` when not given. `ResolutionError` unless exactly one way is given,
    `StoreError` naming the place for a resolver or result no store can keep, `UnknownRun`
    for a run id no store can hold; checked before anything is read or sent, as
    `checked_approval` is.
    """
    how = _how_resolved(
        run_id, execution_key, result=result is not _UNSET, retry=retry, abort=abort
    )
    by = None if resolver is None else as_principal(resolver).id
    check_text(by, "resolver id")
    if how == "result":
        check_result(result, run_id, execution_key)
    known_run(run_id)
    return how, by


class HarnessControl(HarnessBase):
    """Answering and steering runs: the approval, resolution and control methods of `Harness`."""

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
        who = checked_approval(run_id, approval_id, decision, approver, reason)
        await self._open()
        record = await self.store.get_run(run_id)
        rows = {row.approval_id: row for row in await self.store.approvals(run_id)}
        row = _approval_row(rows, run_id, approval_id)
        answerable = (RunStatus.AWAITING_APPROVAL.value, RunStatus.PAUSED.value)
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
        how, by = checked_resolution(run_id, execution_key, result, retry, abort, resolver)
        await self._open()
        record = await self.store.get_run(run_id)
        _check_resolvable(record, execution_key)
        return await self._drive(record, resolution=(execution_key, how, result, by))

    async def pause(self, run_id: str) -> RunResult:
        """Ask the run to pause: no new step or tool call starts, a running tool settles first.

        A run that no worker drives (waiting for an approval or a resolution, or interrupted)
        is paused at once; one that a worker drives (in any process) pauses at its next
        boundary, and the result returned here may still say `running`. While paused, its
        deadline does not run; approvals and resolutions are still taken; `resume()` continues
        it. An ended or already paused run is returned as it is.
        """
        known_run(run_id)
        await self._open()
        record = await self.store.request_control(run_id, "pause", statuses=_PAUSABLE)
        return await self._after_control(record)

    async def cancel(self, run_id: str) -> RunResult:
        """Ask the run to stop for good: it ends `cancelled` at its next boundary.

        Cooperative like `pause`: a running tool settles first (nothing already done is
        undone), and a run no worker drives is cancelled at once. A cancelled run is never
        resumed: `recover()` skips it, and `resume()` returns it as it is.
        """
        known_run(run_id)
        await self._open()
        record = await self.store.request_control(run_id, "cancel", statuses=_CANCELLABLE)
        return await self._after_control(record)

    async def resume(self, run_id: str, *, record: bool | None = None) -> RunResult:
        """Continue a suspended or interrupted run from its last checkpoint.

        A run that has ended, or that still waits for an answer, is returned as it is.
        `RunBusy` when another worker's lease on it is live. `record` omitted: the run keeps
        the recording setting it started with; one that conflicts with it is refused with
        `RecordingError` (recording is never turned on for a run that did not record, nor
        off for one that does).
        """
        known_run(run_id)
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
