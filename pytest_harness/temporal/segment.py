"""One stretch of a run's loop, driven inside the `HarnessRun` workflow from the state it holds.

The workflow keeps the run (its record, state and approval requests) and drives it with the
built-in engine (`runtime.engine.Driver`) from that state until the next boundary it must act
on: a tool call to dispatch (`ToolHandoff`: the call becomes its own activity), a suspension,
or the end. Each model attempt is sent to `ask` (the workflow runs it as the `harness_model`
activity) through the engine's `_complete` seam, so the engine's own retries, fallbacks,
budgets and accounting are the ones used; whether a live model may be called is for the
activity's worker to say (the `_check_live` seam), so a history replays on any worker. The
engine's commits go to `_Capture`, which keeps them for the workflow instead of writing a store,
so the decision logic (rules, guards, budgets, CEL, approvals, recovery of interrupted calls)
is exactly the local one. Nothing here does I/O: the workflow binds the engine's clock and ids
to its own deterministic ones (`runtime.clock.using`), and a tool's artifacts are written by
the tool activity.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from pytest_harness.models.base import Message, ModelRequest, ModelResponse
from pytest_harness.runtime.boundaries import Boundary
from pytest_harness.runtime.engine import DriveContext, Driver, ToolHandoff
from pytest_harness.runtime.plan import ModelLink, PlanTool, TaskPlan
from pytest_harness.runtime.results import RunStatus
from pytest_harness.store.base import (
    JOURNAL_FORMAT,
    ApprovalRow,
    EventDraft,
    JournalDraft,
    NewApproval,
    RunRecord,
    Store,
    StoredArtifact,
)
from pytest_harness.temporal.answers import ProviderFailed, named_error, response_of
from pytest_harness.tools.artifacts import Artifact, artifact_uri
from pytest_harness.tools.context import ToolContext
from pytest_harness.tools.registry import ToolOutcome

Ask = Callable[[ModelLink, ModelRequest, "Mapping[str, float] | None"], Awaitable[dict[str, Any]]]
"""Runs one model attempt elsewhere: `(link, request, first_event)` to the activity's answer
(`answers.answer_of`, plus `deltas` and `first_event` seconds); raises `AttemptLost` when the
attempt was lost with its worker. `first_event` is `{limit, carried}` for a model with a
`first_event_timeout`: the activity holds the provider to it."""

Tell = Callable[[Callable[[], None]], None]
"""Runs a notification of the `harness_checkpoint` hooks as the workflow allows: once, outside
its sandbox, and not again when a worker replays the history."""

__all__ = ["approval_rows", "drive_segment", "journal_dict", "record_of"]


class _Capture:
    """Stands for the store in a driver: keeps each commit for the workflow.

    Artifacts (bytes a tool produced) were written by the tool activity to the worker's own
    store (`state:`); Temporal keeps only their references, in the journal.
    """

    kind = "temporal"

    def __init__(self, control: str | None) -> None:
        self.control = control
        self.status: str | None = None
        self.state: Mapping[str, Any] | None = None
        self.events: list[dict[str, Any]] = []
        self.approvals: list[NewApproval] = []
        self.journal: list[dict[str, Any]] = []

    async def put_artifact(self, artifact: StoredArtifact) -> None:
        """Nothing to write: the tool activity has written it."""

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
        self.journal.extend(journal_dict(j) for j in journal)
        self.status = status
        self.state = state
        self.events.extend({"type": e.kind, "data": dict(e.data)} for e in events)
        self.approvals.extend(approvals)
        if clear_control is not None and self.control == clear_control:
            self.control = None
        return self.control


@dataclass(frozen=True, slots=True)
class _Written:
    """An artifact the tool activity wrote: its reference, without its bytes."""

    sha256: str
    media_type: str
    name: str | None
    data: bytes = b""

    @property
    def uri(self) -> str:
        return artifact_uri(self.sha256)


class _Segment(Driver):
    """A driver that hands tool calls back to the workflow and model attempts to `ask`."""

    given: tuple[str, ToolOutcome] | None = None
    held: str | None = None
    """A pause or cancel that waits until the handed-off call's outcome is in (it settled)."""
    ask: Ask | None = None
    tell: Tell | None = None

    def notify(self, status: RunStatus, phase: Boundary) -> None:
        told = super().notify
        if self.tell is None:
            told(status, phase)
        else:
            self.tell(lambda: told(status, phase))

    async def _call_tool(
        self, tool: PlanTool, call: dict[str, Any], context: ToolContext
    ) -> ToolOutcome:
        if self.given is not None and self.given[0] == call["key"]:
            outcome, self.given = self.given[1], None
            cast(_Capture, self.ctx.store).control = self.held
            return outcome
        raise ToolHandoff(call)

    def _check_live(self, link: ModelLink) -> None:
        if self.ask is None:
            super()._check_live(link)
        # else the worker that runs the attempt checks it (its refusal comes back as the
        # attempt's `LiveModelBlocked`): a worker's settings are no part of the history

    async def _complete(self, link: ModelLink, request: ModelRequest) -> ModelResponse:
        if self.ask is None:
            return await super()._complete(link, request)
        first: dict[str, float] | None = None
        limit = link.spec.first_event_timeout
        if limit is not None:
            waiting = self.state.waiting or {}
            first = {"limit": float(limit), "carried": float(waiting.get("carried", 0.0))}
            if request.on_first_event is not None:
                request.on_first_event()  # the activity holds the provider to the limit
        answer = await self.ask(link, request, first)
        if request.on_text is not None:
            for piece in answer.get("deltas") or ():
                request.on_text(piece)  # committed with the next boundary, as locally
        if first is not None and answer.get("first_event") is not None:
            clock = self._clock(link.name)
            clock["first_event_last"] = round(first["carried"] + answer["first_event"], 6)
            clock["first_event_slowest"] = max(
                clock.get("first_event_slowest", 0.0), clock["first_event_last"]
            )
        try:
            return response_of(answer)
        except ProviderFailed as failed:  # failed as locally, under the provider's class name
            raise named_error(failed.kind, str(failed)) from None


def journal_dict(entry: JournalDraft) -> dict[str, Any]:
    """A journal entry as the workflow keeps it (a stored entry's fields; `seq` set on append)."""
    return {
        "id": entry.id,
        "seq": 0,
        "format": JOURNAL_FORMAT,
        "step": entry.step,
        "attempt_id": entry.attempt_id,
        "ts": entry.ts,
        "execution_key": entry.execution_key,
        "kind": entry.kind,
        "payload": dict(entry.payload),
    }


def record_of(snapshot: Mapping[str, Any]) -> RunRecord:
    """The run the workflow holds, as the engine and recordings read it."""
    return RunRecord(
        run_id=snapshot["run_id"],
        session_id=snapshot["session_id"],
        task=snapshot["task"],
        tenant=snapshot.get("tenant"),
        principal=snapshot["principal"],
        input=snapshot["input"],
        labels=snapshot.get("labels") or {},
        idempotency_key=None,
        status=snapshot["status"],
        state=snapshot["state"],
        created_at=float(snapshot.get("created_at") or 0.0),
        updated_at=float(snapshot.get("updated_at") or 0.0),
        control=snapshot.get("control"),
        record=bool(snapshot.get("record")),
    )


def approval_rows(snapshot: Mapping[str, Any]) -> list[ApprovalRow]:
    """The run's approval requests, as the workflow keeps them."""
    return [
        ApprovalRow(
            approval_id=r["approval_id"],
            run_id=snapshot["run_id"],
            execution_key=r["execution_key"],
            args_digest=r["args_digest"],
            tool=r["tool"],
            args=r["args"],
            rule_id=r["rule_id"],
            approvers=tuple(r["approvers"]),
            requested_by=r["requested_by"],
            self_approve=bool(r["self_approve"]),
            status=r["status"],
            approver=r.get("approver"),
            approver_roles=tuple(r.get("approver_roles") or ()),
            reason=r.get("reason"),
        )
        for r in snapshot.get("approvals") or ()
    ]


def _approval_dict(a: NewApproval) -> dict[str, Any]:
    return {
        "approval_id": a.approval_id,
        "execution_key": a.execution_key,
        "args_digest": a.args_digest,
        "tool": a.tool,
        "args": dict(a.args),
        "rule_id": a.rule_id,
        "approvers": list(a.approvers),
        "requested_by": a.requested_by,
        "self_approve": a.self_approve,
        "status": "pending",
    }


async def drive_segment(
    plan: TaskPlan,
    snapshot: Mapping[str, Any],
    op: Mapping[str, Any],
    *,
    spec_digest: str,
    history: list[Message],
    ask: Ask | None = None,
    tell: Tell | None = None,
) -> dict[str, Any]:
    """Drive the run from `snapshot` as `op` says; return what the workflow must apply.

    `op["op"]`: `drive` (go on; with `outcome` = `{key, outcome, seconds}` the handed-off call's
    result, with `interrupted` the last tool attempt was lost), `decide` (bring answered
    approvals in, then go on), `resolve` (`key`, `how`, `value`, `by`), `control` (act on a
    pending pause or cancel). The answer has the new `status`, `state`, `events`, `approvals`
    (new requests), `control` and, when a call must run, `handoff`. `ask` runs each model
    attempt (None: the provider is called here). `tell` is how the `harness_checkpoint` hooks
    are told of a boundary (None: at once).
    """
    record_ = record_of(snapshot)
    capture = _Capture(snapshot.get("control"))
    ctx = DriveContext(
        store=cast(Store, capture),
        owner="temporal",
        lease=0.0,
        renew=False,
        spec_digest=spec_digest,
    )
    kind = op["op"]
    status = RunStatus(record_.status)
    interrupted = bool(op.get("interrupted"))
    # a drive after a suspension or a lost attempt is journaled as a resume, as locally (a
    # step that goes on from a handed-off call's outcome is the same drive)
    resumed = interrupted or kind != "drive" or status is RunStatus.PAUSED
    driver = _Segment(ctx, plan, record_, 1, interrupted=interrupted, resumed=resumed)
    driver.ask = ask
    driver.tell = tell
    given = op.get("outcome")
    handoff: dict[str, Any] | None = None
    if given is not None:
        call = next(c for c in driver.state.calls if c["key"] == given["key"])
        given = {**given, "attempt_id": call.get("attempt_id")}
        call["status"] = given["previous"]  # dispatched again, with the outcome it had
        call["attempt"] -= 1
        driver.state.elapsed += float(given.get("seconds") or 0.0)
        outcome = ToolOutcome.from_dict(given["outcome"])
        written = [
            _Written(a["sha256"], a["media_type"], a.get("name"))
            for a in given.get("artifacts") or ()
        ]
        if written:
            outcome = replace(outcome, artifacts=cast(tuple[Artifact, ...], tuple(written)))
        driver.given = (given["key"], outcome)
        driver.held, driver.control, capture.control = capture.control, None, None
    if status in (RunStatus.AWAITING_APPROVAL, RunStatus.PAUSED):
        # answers given while the run waited or was paused (as `Harness._continue` does)
        decided = {r.approval_id: r for r in approval_rows(snapshot) if r.status != "pending"}
        driver.apply_decisions(decided)
    try:
        if kind == "resolve":
            driver.resolve(op["key"], op["how"], value=op.get("value"), by=op.get("by"))
            if status is RunStatus.PAUSED and driver.control != "cancel":
                await driver.checkpoint(RunStatus.PAUSED)
            else:
                await driver.checkpoint(RunStatus.RUNNING)
                if driver.control is not None:
                    await driver.stop()
                else:
                    await driver.drive(history)
        elif driver.control is not None:
            await driver.stop()
        elif kind == "control":
            await driver.checkpoint(status)  # the request was withdrawn meanwhile
        elif status is RunStatus.AWAITING_APPROVAL and any(
            c.get("verdict") == "approve" and c.get("decision") is None for c in driver.state.calls
        ):
            await driver.checkpoint(status)  # another request of the call is still open
        else:
            await driver.drive(history)
    except ToolHandoff as handed:
        tool = plan.tools[handed.call["name"]]
        handoff = {
            "call": handed.call,
            "previous": "retry" if handed.call["attempt"] > 1 else "planned",
            "replay": tool.spec.replay.value,
            "timeout": tool.spec.timeout,
            "remaining": driver._remaining(),
        }
    events = capture.events
    state = dict(capture.state) if capture.state is not None else dict(record_.state)
    journal = capture.journal
    if given is not None:  # the repeated dispatch of the handed-off call is not news
        events = [
            e
            for e in events
            if not (
                e["type"] == "tool_call_start" and e["data"].get("execution_key") == given["key"]
            )
        ]
        journal = _one_dispatch(journal, state, given["key"], given.get("attempt_id"))
    return {
        "status": capture.status or record_.status,
        "state": state,
        "events": events,
        "approvals": [_approval_dict(a) for a in capture.approvals],
        "control": capture.control,
        "journal": journal,
        "handoff": handoff,
    }


def _one_dispatch(
    journal: list[dict[str, Any]], state: dict[str, Any], key: str, attempt_id: str | None
) -> list[dict[str, Any]]:
    """The journal with the handed-off call dispatched once, as a local run journals it.

    The step that takes the call's outcome dispatches it again (under a new attempt id) to
    reach the point where the outcome is used; that repeated `tool.dispatched` and the copy of
    its `tool_call_start` event are dropped, and what follows keeps the attempt id of the
    dispatch the first step journaled (`attempt_id`), so every attempt has one outcome.
    """
    if attempt_id is None:
        return journal
    again = next(
        (
            e
            for e in journal
            if e["kind"] == "tool.dispatched"
            and e["execution_key"] == key
            and e["attempt_id"] != attempt_id
        ),
        None,
    )
    if again is None:
        return journal
    repeated = again["attempt_id"]
    kept: list[dict[str, Any]] = []
    copy_dropped = False
    for entry in journal:
        if entry is again:
            continue
        payload = entry["payload"]
        if (
            not copy_dropped
            and entry["kind"] == "event"
            and payload.get("event") == "tool_call_start"
            and (payload.get("data") or {}).get("execution_key") == key
        ):
            copy_dropped = True
            continue
        if entry["attempt_id"] == repeated:
            entry = {**entry, "attempt_id": attempt_id}
        kept.append(entry)
    for call in state.get("calls") or ():
        if call.get("key") == key and call.get("attempt_id") == repeated:
            call["attempt_id"] = attempt_id
    return kept
