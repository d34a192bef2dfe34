"""Replay: run a recording's task again on today's spec and code, answered from the recording.

The replay runs in a twin of the harness over a private memory store: same spec, same rules
and guards, but every model answer, tool result and approval decision comes from the tape. An
approval the recording answered is answered again by the same approver, checked against
today's rules (an approver who would be refused now does not count); one it never answered
leaves the replay waiting, as a live run would stop.

Today's tool contracts apply as in a live run: a recorded call whose arguments today's schema
rejects gets `invalid_arguments`, a tool no longer in the task gets the live run's `unknown`
outcome. With `tools="safe"`, tools whose replay policy is `safe` really run and their results
are compared with the recorded ones (a changed `tool` decision when they differ).

The twin records only what its own recording is read from (`recording.model.STORED_FROM`),
and, since nothing ever resumes it, commits an attempt's start together with its outcome and a
tool call's dispatch together with its result (at once when the tool raised, so a diverged
report reads the store a durable drive would leave); the report redacts only what it shows, and
what is the same on both sides is not redacted twice.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pytest_harness.errors import ApprovalDenied, HarnessError, ReplayDiverged
from pytest_harness.models.base import Message
from pytest_harness.principal import Principal
from pytest_harness.recording.kept import kept_trace
from pytest_harness.recording.model import STORED_FROM, Recording
from pytest_harness.redaction import redact, stable_ids
from pytest_harness.replay.report import (
    DecisionChange,
    Deferred,
    Divergence,
    ReplayReport,
    diff_decisions,
    diff_fields,
    output_diff,
)
from pytest_harness.replay.requests import request_changes
from pytest_harness.replay.tape import Tape, TapeModel, TapeTool
from pytest_harness.replay.twin_store import TwinStore
from pytest_harness.runtime.guard_memory import GuardMemory
from pytest_harness.runtime.harness_control import HarnessControl
from pytest_harness.runtime.results import RunResult, RunStatus
from pytest_harness.runtime.trace import Trace
from pytest_harness.spec.schema import ReplayPolicy

if TYPE_CHECKING:
    from pytest_harness.runtime.harness import Harness

__all__ = ["TOOL_MODES", "load_source", "replay"]


async def load_source(harness: Harness, source: str | os.PathLike[str] | Recording) -> Recording:
    """The recording behind a run id, a file path, or a `Recording`."""
    if isinstance(source, Recording):
        return source
    text = os.fspath(source)
    if text.startswith("run_") and not Path(text).exists():
        # what leaves the store is redacted, the same way as a golden file
        return (await harness.recording(text)).redacted()
    return Recording.load(Path(text))


TOOL_MODES = ("safe",)
"""What `replay(..., tools=)` accepts besides None (no tool runs)."""


async def replay(
    harness: Harness, source: str | os.PathLike[str] | Recording, *, tools: str | None = None
) -> ReplayReport:
    """Replay `source` against `harness`'s spec and return the report.

    `tools="safe"` really invokes the tools whose replay policy is `safe`; None runs none.
    """
    if tools is not None and tools not in TOOL_MODES:
        raise HarnessError(
            f"replay tools={tools!r}: choose None (no tool runs) or 'safe' (tools whose "
            "replay policy is safe run for real)"
        )
    recording = await load_source(harness, source)
    plan = harness._plan(recording.task)
    tape = Tape(
        recording,
        deadline=plan.spec.deadline,
        timeouts={link.name: link.spec.timeout for link in plan.models},
        first_event_timeouts={link.name: link.spec.first_event_timeout for link in plan.models},
    )
    model = TapeModel(tape)
    twin_plan = replace(
        plan,
        models=tuple(replace(link, provider=model) for link in plan.models),
        tools={
            name: TapeTool(
                tool, tape, invoke=tools == "safe" and tool.spec.replay is ReplayPolicy.SAFE
            )
            for name, tool in plan.tools.items()
        },
        # guards shown the text the golden holds of what they saw take their recorded decision
        guard_memory=GuardMemory.of(recording.trace),
    )
    twin = HarnessControl(  # the runtime's own class: this module sits above `Harness`
        harness.spec,
        harness.plans,
        TwinStore(),  # keeps no events, and the journal as noted (read once, below)
        tasks={plan.name: twin_plan},
        record=True,
        keep_requests=False,  # the replay's recording is compared and saved by digest only
        journal_kinds=STORED_FROM,  # and its journal keeps what that recording is read from
        durable=False,  # nothing resumes it: an attempt's start goes with its outcome
        waits=False,  # a recorded wait before a retry is charged as it was, never slept
        hooks=False,  # not a run of the app's: plugins counting runs never see it
        # the conversation before the run, at its first drive and after each approval
        history=[cast(Message, dict(m)) for m in recording.history],
    )
    divergence: Divergence | None = None
    control: Mapping[str, Any] | None = None
    async with twin:
        record, _, history = await twin._create(
            recording.task,
            recording.input,
            Principal.from_dict(dict(recording.principal)),
            recording.tenant,
            None,
            # the caller's labels, merged with today's task labels as a run today would be
            recording.labels if recording.given_labels is None else recording.given_labels,
            None,
        )
        try:
            result = await twin._drive(record, created=True, history=history)
            result = await _answer_approvals(twin, tape, result, recording.tenant)
            result, control = await _apply_control(twin, recording.control, result)
        except ReplayDiverged as exc:
            expected, actual = redact(exc.expected), redact(exc.actual)
            divergence = Divergence(
                reason=redact(exc.reason),
                expected=expected,
                actual=actual,
                fields=(
                    diff_fields(expected, actual)
                    if isinstance(expected, dict) and isinstance(actual, dict)
                    else ()
                ),
            )
            result = await twin.result(record.run_id)
        # the twin's own recording: its journal, and the outcome in hand (not read back)
        replayed = Recording.from_journal(
            await twin.store.journal(record.run_id), outcome=_outcome(result)
        )
    # A report leaves the store: what it shows of either side is redacted (DESIGN §6), and
    # values are compared redacted. Redaction is deterministic: values equal before it are
    # equal after it, so what is the same on both sides is neither redacted nor diffed.
    recorded_output = redact(recording.output)
    output = recorded_output if result.output == recording.output else redact(result.output)
    decisions: tuple[DecisionChange, ...] = ()  # none are compared when the replay stopped
    if divergence is None and tools is not None:
        # Real tool results are raw, a golden file's are redacted: compare both redacted,
        # with generated ids made stable.
        decisions = diff_decisions(
            Trace.from_list(stable_ids(kept_trace(recording.trace.to_list()))),
            Trace.from_list(stable_ids(kept_trace(result.trace.to_list()))),
        )
    elif divergence is None and result.trace != recording.trace:
        decisions = diff_decisions(  # redacted as golden files keep them (`recording.kept`)
            Trace.from_list(kept_trace(recording.trace.to_list())),
            Trace.from_list(kept_trace(result.trace.to_list())),
        )
    requests = request_changes(recording, replayed, tape.requests)
    not_regraded: tuple[str, ...] = ()
    if harness.evals is not None and divergence is None:  # graders in the gate (evals/)
        from pytest_harness.evals.replay import regrade

        grading = await regrade(harness, recording, result)
        decisions += grading.changes
        not_regraded = grading.not_regraded
        replayed = replace(replayed, grades=grading.grades)
    own = replace(
        replayed,
        control=control if divergence is None else None,
        run_id=None,
        source=recording.source,
    )
    return ReplayReport(
        task=recording.task,
        run_id=recording.run_id,
        source=None if recording.source is None else str(recording.source),
        status=(recording.status, result.status.value),
        output=(recorded_output, output),
        output_diff=() if divergence else output_diff(recorded_output, output),
        decisions=decisions,
        model_requests_changed=(requests.changed, tape.requests),
        requests_explained=requests.explained,
        prompt_diff=requests.prompt_diff,
        model_answers_used=(tape.turns_used, len(tape.turns)),
        divergence=divergence,
        not_regraded=not_regraded,
        replayed=Deferred(own.redacted),  # redacted when first read: most are never saved
    )


def _outcome(result: RunResult) -> dict[str, Any]:
    """The outcome fields of the recording of the run that ended as `result`."""
    return {
        "status": result.status.value,
        "output": result.output,
        "error": result.error,
        "limit": result.limit,
        "usage": result.usage.to_dict(),
        "trace": result.trace,
    }


async def _apply_control(
    twin: HarnessControl, control: Mapping[str, Any] | None, result: RunResult
) -> tuple[RunResult, Mapping[str, Any] | None]:
    """Cancel or pause the replay where the recorded run was: at the status and step it had.

    A control that found the recorded run `running` (mid-step, at a moment no replay can
    find again), or a replay that stopped elsewhere, is not applied: the statuses differ.
    """
    if (
        control is None
        or control.get("status") == RunStatus.RUNNING.value
        or result.status.value != control.get("status")
        or result.usage.steps != control.get("step")
    ):
        return result, None
    if control.get("action") == "cancel":
        return await twin.cancel(result.run_id), control
    return await twin.pause(result.run_id), control


async def _answer_approvals(
    twin: HarnessControl, tape: Tape, result: RunResult, tenant: str | None
) -> RunResult:
    """Answer the replay's approvals with the recorded decisions, while any apply."""
    while result.status is RunStatus.AWAITING_APPROVAL:
        rules = {row.approval_id: row.rule_id for row in await twin.store.approvals(result.run_id)}
        answered = False
        # Decisions recorded for each request's own rule first, then stand-ins (renamed rules).
        asks = [
            (pending, exact)
            for exact in (True, False)
            for pending in result.pending
            if pending.status == "approval" and pending.approval_id is not None
        ]
        for pending, exact in asks:
            assert pending.approval_id is not None
            rule = rules.get(pending.approval_id)
            decision = tape.approval(pending.call.name, pending.call.args, rule, exact=exact)
            if decision is None:
                continue
            approver = Principal(
                id=str(decision.approver.get("id")),
                roles=tuple(decision.approver.get("roles") or ()),
                # An answer was only taken from a principal of the run's tenant.
                tenant=decision.approver.get("tenant", tenant),
            )
            try:
                result = await twin.approve(
                    result.run_id,
                    pending.approval_id,
                    "approve" if decision.decision == "approve" else "decline",
                    approver=approver,
                    reason=decision.reason,
                )
            except ApprovalDenied:
                continue  # an approver refused today does not count
            answered = True
            break
        if not answered:
            return result
    return result
