"""Carrying a model answer's calls to their outcomes: dispatch, invoke, settle, resolve.

`ToolCalls` is the part of the run loop (`runtime.engine.Driver`) that commits each call's
dispatch before the tool runs and its result right after (a replay's twin, which nothing
resumes, commits both together), recovers a call a stopped worker
left dispatched (DESIGN §5), settles calls that will not run, resolves uncertain ones, and
turns the outcomes into tool messages through the tool-result guards.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_harness.runtime.boundaries import Boundary
from pytest_harness.runtime.clock import id_hex
from pytest_harness.runtime.driver_base import DriverBase
from pytest_harness.runtime.guards import apply_guards
from pytest_harness.runtime.plan import PlanTool
from pytest_harness.runtime.results import RunResult, RunStatus
from pytest_harness.spec.schema import ReplayPolicy
from pytest_harness.store.base import EventDraft, StoredArtifact
from pytest_harness.tools.context import ToolContext

if TYPE_CHECKING:
    from pytest_harness.store.base import Store
    from pytest_harness.tools.registry import ToolOutcome


__all__ = ["ToolCalls", "keep_artifacts"]

_UNSET: Any = object()


async def keep_artifacts(store: Store, outcome: ToolOutcome) -> None:
    """Keep the bytes of the artifacts `outcome` carries in `store`, by SHA-256.

    A recorded run's journal refers to them; a local driver and a Temporal worker alike.
    """
    for artifact in outcome.artifacts:
        await store.put_artifact(
            StoredArtifact(
                sha256=artifact.sha256,
                media_type=artifact.media_type,
                data=artifact.data,
                name=artifact.name,
            )
        )


class ToolCalls(DriverBase):
    """The tool side of a drive: dispatch, invoke, settle, resolve, answer the model."""

    async def _tool_step(self) -> RunResult | None:
        """Carry the current answer's calls to an outcome each, then answer the model."""
        state = self.state
        for call in state.calls:
            if call["status"] == "done":
                continue
            verdict = call["verdict"]
            if verdict == "approve" and call.get("decision") is None:
                return await self._suspend(RunStatus.AWAITING_APPROVAL, [], [])
            if verdict == "unknown":
                offered = ", ".join(sorted(self.plan.tools)) or "none"
                self._settle(
                    call,
                    "unknown",
                    f"Error: there is no tool named {call['name']!r} (tools: {offered})",
                )
            elif verdict == "deny":
                text = call.get("message") or f"Denied: rule {call.get('rule')} forbids this call"
                self._settle(call, "denied", text)
            elif verdict == "approve" and call["decision"] == "decline":
                self._settle(call, "declined", "Permission denied")
            else:
                result = await self._invoke(call)
                if result is not None:
                    return result
        return await self._answer_tools()

    async def _invoke(self, call: dict[str, Any]) -> RunResult | None:
        state, budget = self.state, self.plan.budget
        tool = self.plan.tools[call["name"]]
        if call["status"] == "uncertain":  # still unresolved (a paused run was resumed)
            return await self._suspend(RunStatus.AWAITING_RESOLUTION, [], [])
        if call["status"] == "dispatched" and tool.spec.replay is ReplayPolicy.MANUAL:
            # Dispatched by a worker that stopped before the result was committed: whether
            # the tool ran cannot be known here, and it may not be repeated on a guess.
            call["status"] = "uncertain"
            event = EventDraft(
                "recovery_required",
                {
                    "execution_key": call["key"],
                    "tool": call["name"],
                    "attempt": call["attempt"],
                },
            )
            return await self._suspend(
                RunStatus.AWAITING_RESOLUTION, [event], [], phase=Boundary.TOOL_INTERRUPTED
            )
        if budget.tool_calls is not None and state.tool_calls >= budget.tool_calls:
            return await self._limit("tool_calls", budget.tool_calls, state.tool_calls)
        remaining = self._remaining()
        if remaining is not None and remaining <= 0:
            return await self._limit_deadline()
        previous = call["status"]
        previous_attempt_id = call.get("attempt_id")
        call["status"] = "dispatched"
        call["attempt"] += 1
        call["attempt_id"] = f"att_{id_hex()}"
        journal = self.journal
        if journal.recording:  # no payloads to build for a run that does not record
            journal.note(
                "tool.dispatched",
                {"name": call["name"], "args": call["args"], "attempt": call["attempt"]},
                step=state.steps,
                attempt_id=call["attempt_id"],
                execution_key=call["key"],
            )
        started = EventDraft(
            "tool_call_start",
            {"execution_key": call["key"], "tool": call["name"], "attempt": call["attempt"]},
        )
        durable = self.ctx.durable
        if durable:
            await self._commit([started], phase=Boundary.TOOL_DISPATCHED)
        else:  # a replay's twin: nothing resumes it, so the dispatch goes with the result
            self._pending.append(started)
        if self.control is not None and previous != "dispatched":
            # Asked to stop before the tool started: undo the dispatch, so a resumed run
            # dispatches it afresh instead of treating it as interrupted.
            self.journal.note(
                "tool.interrupted",
                {
                    "name": call["name"],
                    "attempt": call["attempt"],
                    "reason": "stopped before it ran",
                },
                step=state.steps,
                attempt_id=call["attempt_id"],
                execution_key=call["key"],
            )
            call["status"] = previous
            call["attempt"] -= 1
            call["attempt_id"] = previous_attempt_id
            return await self._stop()
        context = ToolContext(
            tool=call["name"],
            execution_key=call["key"],
            run_id=self.record.run_id,
            principal=self.principal,
            attempt=call["attempt"],
        )
        try:
            outcome = await self._call_tool(tool, call, context)
        except Exception as exc:
            if not durable:  # the store is left as a durable drive leaves it (a replay's report)
                try:
                    await self._commit([], phase=Boundary.TOOL_DISPATCHED)
                except Exception as failed:  # the tool's error is what happened: it goes on
                    exc.add_note(f"and committing its dispatch after it failed: {failed!r}")
            raise
        if journal.recording:
            await keep_artifacts(self.ctx.store, outcome)
            journal.note(
                "tool.returned" if outcome.ok else "tool.failed",
                {
                    "name": call["name"],
                    "args": call["args"],
                    "attempt": call["attempt"],
                    "invoked": True,
                    "outcome": outcome.to_dict(),
                    "artifacts": [a.uri for a in outcome.artifacts],
                },
                step=state.steps,
                attempt_id=call["attempt_id"],
                execution_key=call["key"],
            )
        state.tool_calls += 1
        call["status"] = "done"
        call["outcome"] = outcome.to_dict()
        self._tool_decision(call, outcome)
        await self._commit(
            [
                EventDraft(
                    "tool_result",
                    {"execution_key": call["key"], "tool": call["name"], "ok": outcome.ok},
                )
            ],
            phase=Boundary.TOOL_RETURNED,
        )
        if outcome.kind == "deadline":
            return await self._limit_deadline()
        if self.control is not None:
            return await self._stop()  # the tool settled; stop before anything new starts
        self._check_stopping()
        return None

    async def _call_tool(
        self, tool: PlanTool, call: dict[str, Any], context: ToolContext
    ) -> ToolOutcome:
        """Invoke a dispatched call and return its outcome.

        Its dispatch is committed first, except in a replay's twin, where it goes with the
        outcome. The seam of Temporal execution (`pytest_harness.temporal`): its driver raises
        `ToolHandoff` here, and the call runs as an activity instead.
        """
        return await tool.invoke(call["args"], context, overall_timeout=self._remaining())

    def _settle(self, call: dict[str, Any], outcome: str, text: str) -> None:
        """Give a call that will not run its outcome (denied, declined, unknown tool)."""
        call["status"] = "done"
        call["outcome"] = {"ok": False, "kind": outcome, "value": None, "text": text, "error": None}
        self.journal.note(
            "tool.failed",
            {
                "name": call["name"],
                "args": call["args"],
                "invoked": False,
                "outcome": call["outcome"],
            },
            step=self.state.steps,
            execution_key=call["key"],
        )
        detail = {"args": call["args"], "outcome": outcome}
        self._decision(self.state.steps, "tool", call["name"], detail)

    def _tool_decision(self, call: dict[str, Any], outcome: ToolOutcome) -> None:
        detail: dict[str, Any] = {"args": call["args"], "outcome": outcome.kind}
        if outcome.ok:
            detail["result"] = outcome.value
        else:
            detail["error"] = outcome.text
        self._decision(self.state.steps, "tool", call["name"], detail)

    async def _answer_tools(self) -> RunResult | None:
        """Turn every settled call into a tool message, through the tool-result guards."""
        state = self.state
        for call in state.calls:
            text = call["outcome"]["text"]
            if call["outcome"]["kind"] in ("ok", "error", "resolved") and (
                "tool_result" in self.plan.watched
            ):
                context = self._guard_context("tool_result", call["name"], call["args"])
                outcome = apply_guards(
                    self.plan.guards,
                    text,
                    context,
                    step=state.steps,
                    memory=self.plan.guard_memory,
                )
                self._decide(*outcome.decisions)
                if outcome.blocked_by is not None:
                    self.journal.note(
                        "tool.processed",
                        {"name": call["name"], "text": None, "blocked_by": outcome.blocked_by.id},
                        step=state.steps,
                        execution_key=call["key"],
                    )
                    return await self._end(
                        RunStatus.REFUSED, error={"type": "GuardBlocked", "message": outcome.reason}
                    )
                text = outcome.text
            if self.journal.recording:
                self.journal.note(
                    "tool.processed",
                    {"name": call["name"], "text": text},
                    step=state.steps,
                    execution_key=call["key"],
                )
            state.messages.append(
                {"role": "tool", "tool_call_id": call["id"], "name": call["name"], "content": text}
            )
        state.calls = []
        state.phase = "model"
        return None

    def resolve(self, key: str, how: str, *, value: Any = _UNSET, by: str | None = None) -> None:
        """Settle the uncertain call `key`: `result` (with `value`), `retry` or `abort`.

        The caller has checked that the call is uncertain. The resolution is a `tool_resolved`
        event committed with the next boundary; a result or an abort is the call's outcome (a
        trace decision, and a tool result in the recording, so a replay answers it the same).
        """
        from pytest_harness.tools.registry import ToolOutcome

        state = self.state
        call = next(c for c in state.calls if c["key"] == key)
        who = by or "an operator"
        call["resolution"] = {"how": how, "by": by}
        resolved: dict[str, Any] = {"name": call["name"], "how": how, "by": by}
        self._pending.append(
            EventDraft(
                "tool_resolved",
                {"execution_key": key, "tool": call["name"], "resolution": how, "by": by},
            )
        )
        if how == "retry":
            call["status"] = "retry"  # invoked again: attempt + 1, the same execution key
            self.journal.note(
                "tool.resolved",
                resolved,
                step=state.steps,
                execution_key=key,
                attempt_id=call.get("attempt_id"),
            )
            return
        if how == "result":
            outcome = ToolOutcome.resolved(value)
        else:
            outcome = ToolOutcome.failure(
                "aborted",
                f"Error: this call of {call['name']} was aborted by {who}: its worker stopped "
                "before the result was known, and it was not retried. It may or may not have "
                "taken effect.",
                type="Aborted",
                message=f"aborted by {who} after its outcome became uncertain",
            )
        self.journal.note(
            "tool.resolved",
            {**resolved, "args": call["args"], "outcome": outcome.to_dict()},
            step=state.steps,
            execution_key=key,
            attempt_id=call.get("attempt_id"),
        )
        state.tool_calls += 1
        call["status"] = "done"
        call["outcome"] = outcome.to_dict()
        self._tool_decision(call, outcome)
