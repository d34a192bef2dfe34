"""The `HarnessRun` workflow: one run of a task, its state and its run loop in the workflow.

The workflow keeps the run's snapshot (record, state, approval requests, events) and runs the
built-in engine on it (`segment.drive_segment`: models, rules, guards, budgets, CEL) from the
snapshot to the next boundary, in the workflow itself: deterministic, its clock and ids bound
to the workflow's (`runtime.clock.using`), the plan read from the worker's registry of hosted
specs (`hosted`) by the run's spec digest. Every model attempt is a `harness_model` activity
(tried once: the engine owns model retries and fallbacks; an attempt lost with its worker comes
back as a lost attempt the engine asks again). Every tool call is a `harness_tool` activity,
its id being the call's execution key, heartbeating, with the tool's replay policy as its retry
policy (both started in `dispatch`). Approvals, resolutions, pauses and cancels are updates; a
refused approval is rejected by the update's validator and never reaches history. The
workflow completes after a `harness_end` local activity, never in the activation that answers
an update (`HarnessRun._apart`).
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    import pytest_harness.temporal.checks as checks
    import pytest_harness.temporal.conversation as conversation
    import pytest_harness.temporal.dispatch as dispatch
    import pytest_harness.temporal.hosted as hosted
    import pytest_harness.temporal.paging as paging
    import pytest_harness.temporal.segment as segment
    from pytest_harness.models.base import ModelRequest
    from pytest_harness.plugins import notify_checkpoint
    from pytest_harness.runtime import clock
    from pytest_harness.runtime.boundaries import Boundary
    from pytest_harness.runtime.plan import ModelLink
    from pytest_harness.runtime.results import RunStatus
    from pytest_harness.store.base import JOURNAL_FORMAT
    from pytest_harness.temporal.checks import RESTING

__all__ = ["HarnessRun"]

_WAITING = ("awaiting_approval", "awaiting_resolution", "paused")
_ENDED = ("completed", "failed", "refused", "limited", "cancelled")
_APART = "harness-end-apart"
"""The patch of the runs whose workflow completes apart from the run's last step (`_apart`)."""


class _WorkflowClock:
    """The engine's clock and ids inside the workflow: the workflow's, replayed identically."""

    def now(self) -> float:
        return workflow.now().timestamp()

    def monotonic(self) -> float:
        return workflow.time()

    def new_id(self) -> uuid.UUID:
        return workflow.uuid4()


def _tell(notify: Callable[[], None]) -> None:
    """Tell the `harness_checkpoint` hooks of a boundary the run just reached, as locally.

    On the worker's hook thread, outside the sandbox (a hook may write a file or a socket;
    nothing it does reaches the run, and the workflow task never waits for it), and only the
    first time: a worker replaying the history to rebuild the run stays quiet for boundaries
    that were told already.
    """
    if workflow.unsafe.is_replaying():
        return
    with workflow.unsafe.sandbox_unrestricted():
        hosted.tell_later(notify)


@workflow.defn(name="HarnessRun")
class HarnessRun:
    """One run: its snapshot, the next operation asked for, and the loop that applies them."""

    @workflow.init
    def __init__(self, start: dict[str, Any]) -> None:
        self.snap: dict[str, Any] = dict(start["snapshot"])
        self.conf: dict[str, Any] = dict(start["conf"])
        self.wire_conf = {k: v for k, v in self.conf.items() if k != "history"}
        """What activities are told of the run's settings (not the session's conversation,
        which their requests carry when they need it)."""
        self.sent = conversation.Sent()
        """The conversation the run's last model attempt sent (the next sends what it adds)."""
        self.next: dict[str, Any] | None = {"op": "drive"}
        self.active = False
        """A step or tool activity is under way (the snapshot is about to change)."""
        self.settled = 0
        """How often the run has come to rest (ended or suspended): updates wait on it."""
        self.rev = 0
        """How often the snapshot changed: a reader of its pages starts over when it did."""
        self.text: tuple[int, tuple[str, ...], str] | None = None
        """The snapshot's JSON text (of the keys read, or all: ()) at a revision, cut into
        pages for readers (a query's cache: nothing the run decides depends on it)."""

    @workflow.run
    async def run(self, start: dict[str, Any]) -> dict[str, Any]:
        """Drive the run until it ends; between suspensions, wait for what resumes it.

        Returns the run's head (ids, status, times), never its state, events or journal: a
        reader takes those from the `snapshot_page` query, in pages (a run's snapshot can be
        larger than one Temporal payload).
        """
        apart = workflow.patched(_APART)  # asked first: a run started before it answers False
        snap = self.snap
        _tell(
            lambda: notify_checkpoint(
                session_id=snap["session_id"],
                run_id=snap["run_id"],
                status=RunStatus.RUNNING.value,
                phase=Boundary.RUN_STARTED.value,
            )
        )
        while self.snap["status"] not in _ENDED:
            if self.next is None:
                await workflow.wait_condition(lambda: self.next is not None)
            op, self.next = self.next, None
            assert op is not None
            self.active = True
            try:
                await self._step(op)
            finally:
                self.active = False
            if self.snap["status"] != "running" and self.next is None:
                self.settled += 1
        self.settled += 1
        if self.conf.get("grade"):
            await dispatch.grade(self._bare(), conf=self.conf, wire_conf=self.wire_conf)
        await workflow.wait_condition(workflow.all_handlers_finished)
        if apart:
            await self._apart()
        return self._result()

    async def _apart(self) -> None:
        """Let the workflow complete in a workflow activation of its own, after the run's end.

        The run ends in the activation that also answers the update that ended it (`approve`,
        `control`, `wait`, ...). If the workflow's completion went with that answer, a history
        that no longer replays there (new code ends the run where the history goes on) would
        be stuck: Temporal's core, told to fail the workflow on nondeterminism, drops the
        activation's first command that did not match (the update's answer) and adds a
        failure after the others, and the server refuses a completion followed by a failure,
        so the workflow task would fail forever. The `harness_end` local activity (it does
        nothing) runs in the same workflow task: the workflow still completes in the task
        that ended the run, and its answer and completion reach the server together.

        Only for runs that recorded the `harness-end-apart` patch when they started: an older
        run's history has no `harness_end` marker and must replay without one.
        """
        await workflow.execute_local_activity(
            "harness_end", start_to_close_timeout=timedelta(seconds=30)
        )

    async def _step(self, op: dict[str, Any]) -> None:
        """Drive from the snapshot as `op` says, running each handed-off tool call."""
        try:
            plan = hosted.plan_for(self.conf, self.snap["task"])
        except hosted.NotHosted as exc:
            self._fail_with(exc.kind, str(exc))
            return
        while True:
            with clock.using(_WorkflowClock()):
                answer = await segment.drive_segment(
                    plan,
                    copy.deepcopy(self._bare()),
                    op,
                    spec_digest=str(self.conf["spec_digest"]),
                    history=copy.deepcopy(list(self.conf.get("history") or ())),
                    ask=self._ask,
                    tell=_tell,
                )
            self._apply(answer)
            handoff = answer.get("handoff")
            if handoff is None:
                return
            next_op = await self._tool(handoff)
            if next_op is None:
                return
            op = next_op

    async def _ask(
        self, link: ModelLink, request: ModelRequest, first: Mapping[str, float] | None
    ) -> dict[str, Any]:
        """Run one model attempt as the `harness_model` activity (`dispatch.ask_model`)."""
        return await dispatch.ask_model(
            link, request, first, sent_so_far=self.sent, conf=self.conf, wire_conf=self.wire_conf
        )

    async def _tool(self, handoff: dict[str, Any]) -> dict[str, Any] | None:
        """Run one tool call as an activity; the next step's operation (None: the run failed)."""
        try:
            return await dispatch.call_tool(
                handoff, self.snap, conf=self.conf, wire_conf=self.wire_conf
            )
        except dispatch.RunFails as failed:
            self._fail_with(failed.kind, str(failed))
            return None

    def _bare(self) -> dict[str, Any]:
        """The snapshot without its events and journal (a step needs neither)."""
        return {k: v for k, v in self.snap.items() if k not in ("events", "journal")}

    def _head(self) -> dict[str, Any]:
        """The run without its state, input, approvals, events and journal: `paged` says so."""
        bulky = ("state", "input", "approvals", "events", "journal")
        return {"paged": True, **{k: v for k, v in self.snap.items() if k not in bulky}}

    def _result(self) -> dict[str, Any]:
        """The workflow's result: the whole run when it fits in a page, else its head.

        A run that fits is read from its closed workflow without a worker; a larger one is
        read in pages from a worker that replays its history.
        """
        return self.snap if paging.encoded_size(self.snap) <= paging.PAGE_BUDGET else self._head()

    def _answer(self) -> dict[str, Any]:
        """An update's answer: the run without its events and journal, or its head.

        The head when the rest does not fit in a page (the client then reads the pages).
        """
        bare = self._bare()
        return bare if paging.encoded_size(bare) <= paging.PAGE_BUDGET else self._head()

    def _apply(self, answer: dict[str, Any]) -> None:
        self.rev += 1
        snap = self.snap
        snap["status"] = answer["status"]
        snap["state"] = answer["state"]
        snap["control"] = answer["control"]
        snap["updated_at"] = workflow.time()
        snap.setdefault("events", []).extend(answer["events"])
        snap.setdefault("approvals", []).extend(answer["approvals"])
        journal = snap.setdefault("journal", [])
        seen = {entry["id"] for entry in journal}
        for entry in answer["journal"]:
            if entry["id"] not in seen:  # a step retried after its answer was lost
                journal.append({**entry, "seq": len(journal) + 1})

    def _fail_with(self, kind: str, message: str) -> None:
        """End the run `failed` with an error of type `kind`."""
        self.rev += 1
        state = dict(self.snap["state"])
        state["phase"] = "ended"
        state["error"] = {"type": kind, "message": message}
        self.snap["state"] = state
        self.snap["status"] = "failed"
        event = {"type": "run_result", "data": {"status": "failed"}}
        self.snap.setdefault("events", []).append(event)
        if self.snap.get("record"):  # the journal ends as a driver's would: the event, the outcome
            outcome = {k: state.get(k) for k in ("output", "error", "limit", "usage", "trace")}
            self._journal("event", {"event": event["type"], "data": event["data"]})
            self._journal("checkpoint", {"status": "failed", **outcome})

    def _journal(self, kind: str, payload: dict[str, Any], *, key: str | None = None) -> None:
        """Append an entry the workflow itself writes (ids and times from the workflow)."""
        self.rev += 1
        journal = self.snap.setdefault("journal", [])
        journal.append(
            {
                "id": str(workflow.uuid4()),
                "seq": len(journal) + 1,
                "format": JOURNAL_FORMAT,
                "step": int((self.snap["state"].get("usage") or {}).get("steps") or 0),
                "attempt_id": None,
                "ts": workflow.time(),
                "execution_key": key,
                "kind": kind,
                "payload": payload,
            }
        )

    # -- reading ------------------------------------------------------------------------------

    @workflow.query(name="snapshot")
    def snapshot(self) -> dict[str, Any]:
        """The run as the workflow holds it now, whole, as clients of earlier versions read it.

        A run larger than one payload cannot be answered so: see `snapshot_page`.
        """
        return self.snap

    @workflow.query(name="snapshot_page")
    def snapshot_page(self, want: dict[str, Any]) -> dict[str, Any]:
        """A page of the run's JSON text from `want["offset"]` (`paging.page`, `read_pages`).

        With `want["keys"]`, of those keys of the snapshot only (a stream polls its events).

        A query writes nothing to the history; the text of the current revision is kept for
        the next page, until the last page is read.
        """
        keys = tuple(str(k) for k in want.get("keys") or ())
        if self.text is None or self.text[:2] != (self.rev, keys):
            part = {k: self.snap.get(k) for k in keys} if keys else self.snap
            self.text = (self.rev, keys, json.dumps(part, separators=(",", ":")))
        answer = paging.page(self.text[2], int(want.get("offset") or 0), self.rev)
        if answer["offset"] + len(answer["text"]) >= answer["total"]:
            self.text = None  # read to its end: the worker need not hold it
        return answer

    # -- answering ----------------------------------------------------------------------------

    @workflow.update(name="approve")
    async def approve(self, answer: dict[str, Any]) -> dict[str, Any]:
        """Record an approval's answer; resume the run when none is left open."""
        self.rev += 1
        for row in self.snap["approvals"]:
            if row["approval_id"] == answer["approval_id"]:
                row["status"] = answer["decision"]
                row["approver"] = answer["approver"]["id"]
                row["approver_roles"] = list(answer["approver"].get("roles") or ())
                row["reason"] = answer.get("reason")
                if self.snap.get("record"):
                    answered = {
                        "approval_id": row["approval_id"],
                        "tool": row["tool"],
                        "decision": row["status"],
                        "approver": {"id": row["approver"], "roles": row["approver_roles"]},
                        "reason": row["reason"],
                    }
                    self._journal("approval.answered", answered, key=row["execution_key"])
        self.snap.setdefault("events", []).append(
            {
                "type": "approval_answered",
                "data": {
                    "approval_id": answer["approval_id"],
                    "decision": answer["decision"],
                    "approver": answer["approver"]["id"],
                },
            }
        )
        if checks.open_approvals(self.snap) or self.snap["status"] != "awaiting_approval":
            return self._answer()
        return await self._resume({"op": "decide"})

    @approve.validator
    def _check_approve(self, answer: dict[str, Any]) -> None:
        checks.check_approval(self.snap, answer)

    @workflow.update(name="resolve")
    async def resolve(self, how: dict[str, Any]) -> dict[str, Any]:
        """Settle an uncertain call, then go on; the result once the run rests again."""
        # a racing resolver validated in the same workflow task as this one is refused here
        checks.check_resolution(self.snap, how["key"], busy=self.active or self.next is not None)
        return await self._resume({"op": "resolve", **how})

    @resolve.validator
    def _check_resolve(self, how: dict[str, Any]) -> None:
        checks.check_resolution(self.snap, how["key"], busy=self.active or self.next is not None)

    @workflow.update(name="resume")
    async def resume(self) -> dict[str, Any]:
        """Continue a paused run (a run that still waits for an answer stays as it is)."""
        if self.snap["status"] != "paused":
            return self._answer()
        return await self._resume({"op": "drive"})

    def _resting(self) -> bool:
        return bool(self.snap["status"] != "running" and self.next is None)

    @workflow.update(name="wait")
    async def wait(self) -> None:
        """Return once the run ends or suspends (then read it with the `snapshot` query)."""
        await workflow.wait_condition(self._resting)

    @wait.validator
    def _check_wait(self) -> None:
        # A run at rest refuses the wait: a refused update leaves nothing in the history, so
        # a reader polling a run that waits for days never makes its history grow.
        if self._resting():
            raise ApplicationError("the run rests", type=RESTING)

    @workflow.update(name="control")
    async def control(self, what: str) -> dict[str, Any]:
        """Ask for a pause or a cancel: acted on at once when the run waits, else at a boundary.

        Returns the run once it acted (waiting), or as it is (running: its next boundary acts).
        """
        status = self.snap["status"]
        if status in _ENDED or (what == "pause" and status == "paused"):
            return self._answer()
        self.snap["control"] = what
        self.rev += 1
        if status in _WAITING and self.next is None:
            return await self._resume({"op": "control"})
        return self._answer()

    async def _resume(self, op: dict[str, Any]) -> dict[str, Any]:
        mark = self.settled
        self.next = op
        await workflow.wait_condition(lambda: self.settled > mark)
        return self._answer()
