"""The checks on answers given to a run, and its result as stored.

A decision's word (`_check_decision`), the approval answered (`_approval_row`), who may answer
it (`_check_approver`), whether it is still bound to the run's pending call (`_check_binding`),
how a `resolve()` settles a call (`_how_resolved`) and whether the call can be resolved
(`_check_resolvable`), which open requests are moot (`_moot`); used by `Harness` and by the
Temporal client alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pytest_harness.errors import ApprovalDenied, ResolutionError, UnknownExecutionKey
from pytest_harness.principal import Principal
from pytest_harness.runtime.call_keys import args_digest, execution_key
from pytest_harness.runtime.results import RunResult, RunStatus
from pytest_harness.runtime.state import call_approvals, result_from_state
from pytest_harness.store.base import ApprovalRow, RunRecord

__all__: list[str] = []


def _moot(rows: Iterable[ApprovalRow]) -> frozenset[str]:
    """The open requests whose call another request declined: closed, never to be answered."""
    rows = list(rows)
    declined = {r.execution_key for r in rows if r.status == "decline"}
    return frozenset(
        r.approval_id for r in rows if r.status == "pending" and r.execution_key in declined
    )


def _check_decision(decision: str, run_id: str, approval_id: str) -> None:
    """Raise unless `decision` is `approve` or `decline`."""
    if decision not in ("approve", "decline"):
        raise ResolutionError(
            f"decision must be 'approve' or 'decline', got {decision!r} "
            f"(run {run_id}, approval {approval_id})"
        )


def _approval_row(rows: Mapping[str, ApprovalRow], run_id: str, approval_id: str) -> ApprovalRow:
    """The row of `approval_id` among the run's `rows` (by id).

    `ResolutionError` when the run has no such approval, or when it is moot (another approval
    declined its call).
    """
    row = rows.get(approval_id)
    if row is None:
        known = ", ".join(rows) or "none"
        raise ResolutionError(
            f"run {run_id} has no approval {approval_id!r} (its approvals: {known})"
        )
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
    return row


def _how_resolved(run_id: str, key: str, *, result: bool, retry: bool, abort: bool) -> str:
    """Which of `result=`, `retry=True` and `abort=True` a `resolve()` gave.

    `result` says whether it gave a `result=`; `ResolutionError` unless exactly one was given.
    """
    given = [name for name, on in (("result", result), ("retry", retry), ("abort", abort)) if on]
    if len(given) != 1:
        what = " and ".join(f"{g}=" for g in given) if given else "none of them"
        raise ResolutionError(
            f"resolve() takes exactly one of result=..., retry=True or abort=True; got "
            f"{what} (run {run_id}, execution key {key})"
        )
    return given[0]


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
