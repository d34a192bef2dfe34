"""The driver's run state, its endings and its commits, under the worker's lease.

`DriverBase` holds what every part of the run loop (`runtime.engine.Driver`) shares: the run's
state as the last commit left it, the recovery notes of a resumed run, the endings (end,
suspend, limit, stop), the one commit of a boundary (`_commit`) and the small helpers the steps
use. The steps themselves live in `runtime.model_calls`, `runtime.approvals`,
`runtime.tool_calls` and `runtime.engine`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from pytest_harness.errors import StoreError
from pytest_harness.models.base import Message
from pytest_harness.plugins import checkpoint_hooked, notify_checkpoint
from pytest_harness.principal import Principal
from pytest_harness.runtime.boundaries import Boundary
from pytest_harness.runtime.clock import monotonic, now
from pytest_harness.runtime.events import EventHub
from pytest_harness.runtime.guards import GuardContext
from pytest_harness.runtime.journal import Journal, write_with_retries
from pytest_harness.runtime.plan import TaskPlan
from pytest_harness.runtime.results import RunResult, RunStatus, run_status
from pytest_harness.runtime.state import RunState, StateText, result_from_state
from pytest_harness.runtime.texts import composed
from pytest_harness.runtime.trace import Decision, decision_dict
from pytest_harness.store.base import EventDraft, NewApproval, RunRecord, Store

__all__ = ["AttemptLost", "DriveContext", "DriveStopped", "DriverBase", "ToolHandoff"]


class ToolHandoff(Exception):
    """Raised by a driver's `_call_tool` to stop the drive at a committed tool dispatch.

    `drive()` lets it through (the run is neither ended nor failed): whoever drives the run
    invokes the call elsewhere and drives again with its outcome.
    """

    def __init__(self, call: Mapping[str, Any]) -> None:
        super().__init__(f"tool call {call.get('key')} ({call.get('name')}) handed off")
        self.call = dict(call)


class AttemptLost(Exception):
    """Raised by a driver's `_complete` when a model attempt was lost with the worker running it.

    The engine counts it as it counts an attempt a stopped worker left unanswered: journaled as
    `model.interrupted`, followed by an `attempt_reset`, and asked again with a new attempt id
    (not a retry of the model's `retries`, not a failure).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Deadline(Exception):
    """The run's deadline passed while waiting on a model or a tool."""


class DriveStopped(Exception):
    """The driver stopped at a clean boundary because its worker is shutting down.

    Nothing is lost: the last commit holds everything done so far, and the run stays `running`
    for another worker to claim once the lease is released.
    """

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id}: its worker stopped driving it at a boundary")
        self.run_id = run_id


@dataclass(slots=True, kw_only=True, unsafe_hash=True)  # not frozen: built per run, never changed
class DriveContext:
    """What a driver needs from the harness."""

    store: Store
    owner: str
    lease: float
    renew: bool
    keep_requests: bool = True
    """Keep each recorded model request's content, not only its digest."""
    journal_kinds: frozenset[str] | None = None
    """The journal entry kinds a recorded run keeps (None: all of them)."""
    durable: bool = True
    """Commit a recorded attempt's start before the model is asked, and a tool call's dispatch
    before the tool runs. A replay's twin, on a private memory store nothing resumes from,
    sends each with its outcome instead (a dispatch whose tool raised, right after it)."""
    waits: bool = True
    """Sleep the waits before model retries. A replay's twin charges each recorded wait to the
    retry budget and the deadline, as the run did, and sleeps none."""
    hooks: bool = True
    """Tell the `harness_checkpoint` hooks of each committed boundary (a replay's twin, a
    private run of a recording, tells none)."""
    spec_digest: str = ""
    hub: EventHub | None = None
    """Where committed and provisional events are announced to this process's streams."""
    stopping: Callable[[], bool] | None = None
    """Whether the worker is shutting down: the driver then stops at its next clean boundary
    (before a model call, or after a tool's result is committed) with `DriveStopped`."""


class DriverBase:
    """A drive's state, endings and commits: the base of `runtime.engine.Driver`."""

    def __init__(
        self,
        ctx: DriveContext,
        plan: TaskPlan,
        record: RunRecord,
        token: int,
        *,
        interrupted: bool = False,
        last_alive: float | None = None,
        resumed: bool = False,
    ) -> None:
        self.ctx = ctx
        self.plan = plan
        self.record = record
        self.token = token
        self.state = RunState.from_dict(record.state)
        self.status = run_status(record.status)
        self.principal = Principal.from_dict(dict(record.principal))
        self.principal_vars = self.principal.to_dict()
        self.labels = dict(record.labels)
        self.history: list[Message] = []
        self.released = False
        """Whether the last commit gave the lease up (the run ended or suspended)."""
        self.control: str | None = record.control
        """The pending pause or cancel request, as the last commit (or read) returned it."""
        self.interrupted = interrupted
        """The run was left `running` by a worker that stopped: recover from its last commit."""
        self._pending: list[EventDraft] = []
        """Events to commit with the next boundary (text deltas, attempt resets, resolutions)."""
        self._reset: str | None = None
        """Why the next model request replaces an earlier attempt (`interrupted`, `retry`)."""
        self._streamed: str | None = None
        """The last attempt that streamed text."""
        self._sent: tuple[int, Any, Any, Any] | None = None
        """What this drive's last journaled request held: message count, system, the tool
        schemas (as given, and as content)."""
        self._last_attempt: str | None = None
        """The id of the last model attempt that ended (its later entries carry it)."""
        self._started = monotonic()
        self._elapsed0 = self.state.elapsed
        waiting = self.state.waiting
        if waiting is not None and interrupted:
            # An attempt its worker left waiting for a first event: the server had until that
            # worker's last sign of life (its last lease renewal) to start replying.
            alive = min(now(), last_alive if last_alive is not None else waiting["since"])
            waiting["carried"] = float(waiting.get("carried", 0.0)) + max(
                0.0, alive - float(waiting["since"])
            )
        self._state_text = StateText()
        """The state's text for each commit, its entries encoded once (not at every commit)."""
        self.journal = Journal(record.record, kinds=ctx.journal_kinds)
        """The flight recorder's notes for the next commit (none when the run does not record)."""
        if resumed:
            self._note_resume(record.status)

    def _note_resume(self, status: str) -> None:
        """Journal the resume, and the attempts a stopped worker left without an outcome."""
        note = self.journal.note
        state = self.state
        note("run.resumed", {"status": status, "interrupted": self.interrupted}, step=state.steps)
        if not self.interrupted:
            return
        attempt = state.attempt
        if attempt is not None:
            note(
                "model.interrupted",
                {"model": attempt.get("model"), "reason": "the worker stopped during the call"},
                step=state.steps + 1,
                attempt_id=attempt.get("id"),
            )
            state.attempt = None
        for call in state.calls:
            if call.get("status") == "dispatched":
                note(
                    "tool.interrupted",
                    {
                        "name": call["name"],
                        "attempt": call["attempt"],
                        "reason": "the worker stopped before the result was committed",
                    },
                    step=state.steps,
                    attempt_id=call.get("attempt_id"),
                    execution_key=call["key"],
                )

    # -- endings and commits -------------------------------------------------------------

    async def _limit(self, which: str, limit: float, spent: float | None) -> RunResult:
        """End the run `limited` by `which`; its decision says what was `spent` (None: time)."""
        detail = {"limit": limit} if spent is None else {"limit": limit, "spent": spent}
        self._decision(self.state.steps, "limit", which, detail)
        self.state.limit = which
        return await self._end(RunStatus.LIMITED)

    async def _limit_deadline(self) -> RunResult:
        """End the run at its deadline.

        Its decision holds no duration: the time a run took is never compared (DESIGN §6) nor
        kept in a golden file, and its replay takes none.
        """
        return await self._limit("deadline", self.plan.spec.deadline or 0.0, None)

    async def _stop(self) -> RunResult:
        """Act on the pending control request: `cancel` ends the run, `pause` suspends it."""
        if self.control == "cancel":
            return await self._end(RunStatus.CANCELLED)
        return await self._suspend(RunStatus.PAUSED, [], [], phase=Boundary.RUN_PAUSED)

    async def stop(self) -> RunResult:
        """Act on the run's pending control request under this driver's lease, and nothing else."""
        return await self._stop()

    async def _end(self, status: RunStatus, *, error: dict[str, str] | None = None) -> RunResult:
        state = self.state
        state.phase = "ended"
        state.error = error
        self.status = status
        # The output closes the last step the trace reached (a model call that failed is a step
        # the counter never took), so it never reads `step 0 output` after `step 1 model`.
        step = max([state.steps, *(int(d.get("step") or 0) for d in state.trace)])
        value = status.value
        ended: dict[str, Any] = {"status": value}
        if error is not None:  # what failed the run is part of how it ended (not the message)
            ended["error"] = error.get("type")
            if status is RunStatus.REFUSED:
                # except a refusal's: what the caller is told, the blocking guard's `message`
                # (or its default wording), spec text with nothing volatile in it
                ended["message"] = error.get("message")
        self._decision(step, "output", "output", ended)
        events = []
        if status is RunStatus.COMPLETED:
            events.append(EventDraft("text_complete", {"text": state.output}))
        events.append(EventDraft("status_changed", {"status": value}))
        events.append(EventDraft("run_result", {"status": value}))
        await self._commit(events, release=True, phase=Boundary.RUN_ENDED)
        return self.result()

    async def _suspend(
        self,
        status: RunStatus,
        events: list[EventDraft],
        approvals: list[NewApproval],
        *,
        phase: Boundary = Boundary.RUN_SUSPENDED,
    ) -> RunResult:
        self.status = status
        events.append(EventDraft("status_changed", {"status": status.value}))
        await self._commit(events, approvals, release=True, phase=phase)
        return self.result()

    async def _commit(
        self,
        events: list[EventDraft],
        approvals: list[NewApproval] | None = None,
        *,
        release: bool = False,
        phase: Boundary,
    ) -> None:
        """Commit the state as one boundary, then tell the `harness_checkpoint` hooks.

        The queued events go with it; those queued while the write is under way (a stream's
        text arriving meanwhile) wait for the next boundary.
        """
        self.state.elapsed = self._elapsed()
        taken = len(self._pending)
        if taken:
            events = [*self._pending, *events]
        status = self.status
        # A pause or an end acts on the pending request; a suspension for a person keeps it,
        # so the harness acts on it after this drive (the run must not resume on an answer).
        acted = self.control if status is RunStatus.PAUSED or status.ended else None
        run_id = self.record.run_id
        state = self._state_text.prepared(self.state.to_dict())
        value = status.value
        checkpoint = None
        if status is not RunStatus.RUNNING and self.journal.keeps("checkpoint"):
            trace = state["trace"]
            checkpoint = composed(
                {
                    "status": value,
                    "output": state["output"],
                    "error": state["error"],
                    "limit": state["limit"],
                    "usage": state["usage"],
                    "trace": trace,
                },
                lambda: {"trace": self._state_text.list_text("trace", trace)},
            )
        journal = self.journal.for_commit(events, self.state.steps, checkpoint)
        write = partial(
            self.ctx.store.commit,
            run_id,
            self.token,
            status=value,
            state=state,
            events=events,
            approvals=approvals or (),
            lease_ttl=self.ctx.lease if self.ctx.renew else None,
            release=release,
            clear_control=acted,
            journal=journal,
        )
        if journal:  # the flight recorder's entries: a failed write is tried again
            what = f"run {run_id} (step {self.state.steps})"
            self.control = await write_with_retries(write, what=what, journaled=True)
        else:
            self.control = await write()
        self.journal.committed(journal)
        del self._pending[:taken]
        self.released = release
        hub = self.ctx.hub
        if hub is not None:
            hub.committed(run_id)
        self.notify(status, phase)

    def notify(self, status: RunStatus, phase: Boundary) -> None:
        """Tell the `harness_checkpoint` hooks that the run committed `phase` with `status`."""
        if not self.ctx.hooks or not checkpoint_hooked():
            return
        notify_checkpoint(
            session_id=self.record.session_id,
            run_id=self.record.run_id,
            status=status.value,
            phase=phase.value,
        )

    async def checkpoint(self, status: RunStatus) -> RunResult:
        """Commit the state as it is with `status`; a waiting status gives the lease up."""
        changed = status.value != self.record.status
        self.status = status
        waiting = status is not RunStatus.RUNNING
        events = [EventDraft("status_changed", {"status": status.value})] if changed else []
        await self._commit(events, release=waiting, phase=Boundary.TOOL_RESOLVED)
        return self.result()

    def result(self) -> RunResult:
        """The run's result as of the last commit."""
        record = self.record
        return result_from_state(
            run_id=record.run_id,
            session_id=record.session_id,
            task=record.task,
            status=self.status.value,
            state=self.state.to_dict(),
            labels=self.labels,
        )

    # -- helpers -------------------------------------------------------------------------

    def _decide(self, *decisions: Decision) -> None:
        self.state.trace.extend(d.to_dict() for d in decisions)

    def _decision(self, step: int, kind: str, key: str, detail: Mapping[str, Any]) -> None:
        """Append `Decision(step, kind, key, detail).to_dict()`, without the `Decision`."""
        self.state.trace.append(decision_dict(step, kind, key, detail))

    def _guard_context(
        self, on: str, tool: str | None = None, args: Mapping[str, Any] | None = None
    ) -> GuardContext:
        return GuardContext(
            on=on,
            task=self.plan.name,
            principal=self.principal_vars,
            labels=self.labels,
            tool=tool,
            args=args or {},
        )

    def _rule_variables(self, tool: str, args: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "tool": tool,
            "args": dict(args),
            "task": self.plan.name,
            "principal": self.principal_vars,
            "step": self.state.steps,
            "spent": self.state.spent(),
            "labels": self.labels,
        }

    def _elapsed(self) -> float:
        return self._elapsed0 + (monotonic() - self._started)

    def _remaining(self) -> float | None:
        deadline = self.plan.spec.deadline
        return None if deadline is None else deadline - self._elapsed()

    async def _renew_lease(self) -> None:
        """Extend the lease about every third of its length while the run is driven.

        When another worker has taken the run over, renewal stops; this worker's next commit
        is then rejected by its stale fencing token and the run stops here. Any other failure
        (a write lock another process held past the busy timeout, a dropped connection) is
        tried again at the next interval: giving up on the first would let the lease lapse
        while the run is still driven here, and another worker take it over and run its tool
        again.
        """
        interval = self.ctx.lease / 3
        while True:
            await asyncio.sleep(interval)
            try:
                await self.ctx.store.renew_lease(self.record.run_id, self.token, self.ctx.lease)
            except StoreError as exc:
                if exc.stale:
                    return

    def _model_next(self) -> bool:
        """Whether the next thing this run does, from its committed state, is a model call."""
        state = self.state
        if state.phase in ("start", "model"):
            return True
        return state.phase == "tools" and all(c["status"] == "done" for c in state.calls)

    def _check_stopping(self) -> None:
        stopping = self.ctx.stopping
        if stopping is not None and stopping():
            raise DriveStopped(self.record.run_id)
