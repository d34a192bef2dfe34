"""The checks of the `HarnessRun` workflow's update validators: the local ones, on its snapshot.

Pure functions of the snapshot (deterministic, no I/O), so the workflow can call them. A check
that refuses raises `ApplicationError` whose `type` is the harness error's class name
(`ApprovalDenied`, `ResolutionError`, `UnknownExecutionKey`); the client raises that class again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from temporalio.exceptions import ActivityError, ApplicationError

from pytest_harness.errors import HarnessError, ResolutionError
from pytest_harness.principal import Principal
from pytest_harness.runtime.approval_checks import (
    _approval_row,
    _check_approver,
    _check_binding,
    _check_decision,
    _check_resolvable,
    _moot,
)
from pytest_harness.temporal.segment import approval_rows, record_of

__all__ = ["FATAL", "RESTING", "check_approval", "check_resolution", "fatal", "open_approvals"]

FATAL = ("SpecDigestMismatch", "UnknownTask", "SpecError", "PayloadTooLarge", "PayloadsTooLarge")
"""Activity failures never retried: the run ends `failed` with the error.

`PayloadTooLarge` is the worker's own check of an activity's answer; `PayloadsTooLarge` is the
SDK's, should an answer still be refused (a retry would only refuse it again)."""

RESTING = "RunResting"
"""The `wait` update's refusal: the run already ended or suspended (read it with a query)."""


def fatal(exc: ActivityError) -> bool:
    """Whether an activity failed for a reason retrying cannot change."""
    cause = exc.cause
    return isinstance(cause, ApplicationError) and cause.type in FATAL


def open_approvals(snapshot: Mapping[str, Any]) -> bool:
    """Whether an approval request of the run is still open (neither answered nor moot)."""
    rows = approval_rows(snapshot)
    moot = _moot(rows)
    return any(r.status == "pending" and r.approval_id not in moot for r in rows)


def _refusing(check: Callable[[], None]) -> None:
    try:
        check()
    except HarnessError as exc:
        raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from None


def check_approval(snapshot: Mapping[str, Any], answer: Mapping[str, Any]) -> None:
    """Refuse an answer the local `Harness.approve` would refuse (same checks, same words)."""
    _refusing(lambda: _approval(snapshot, answer))


def _approval(snapshot: Mapping[str, Any], answer: Mapping[str, Any]) -> None:
    record = record_of(snapshot)
    run_id = record.run_id
    approval_id = answer["approval_id"]
    decision = answer["decision"]
    _check_decision(decision, run_id, approval_id)
    rows = {row.approval_id: row for row in approval_rows(snapshot)}
    row = _approval_row(rows, run_id, approval_id)
    if row.status != "pending":
        raise ResolutionError(
            f"approval {approval_id} of run {run_id} was already answered: {row.status} by "
            f"{row.approver}"
        )
    if record.status not in ("awaiting_approval", "paused"):
        raise ResolutionError(
            f"run {run_id} is {record.status}, not awaiting approval; "
            f"approval {approval_id} can no longer be answered"
        )
    who = Principal.from_dict(dict(answer["approver"]))
    _check_approver(row.approvers, row.requested_by, row.self_approve, who, record)
    _check_binding(row, record)


def check_resolution(snapshot: Mapping[str, Any], key: str, *, busy: bool = False) -> None:
    """Refuse a resolution the local `Harness.resolve` would refuse.

    `busy`: another answer is being applied (a racing resolver's): this one is refused, as a
    second resolution is locally.
    """
    _refusing(lambda: _resolvable(snapshot, key, busy))


def _resolvable(snapshot: Mapping[str, Any], key: str, busy: bool) -> None:
    _check_resolvable(record_of(snapshot), key)
    if busy:
        raise ResolutionError(
            f"run {snapshot['run_id']} is already going on with another answer; tool call "
            f"{key} can no longer be resolved by this one"
        )
