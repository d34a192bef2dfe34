"""The run loop (DESIGN §5): model step, guards, rules, approvals, tools, limits.

One `Driver` drives one run from its last committed state until it ends or suspends. Every
boundary is committed before the next begins, fenced by the worker's lease token:

* a tool's dispatch intent (with its execution key) before the tool is invoked, together with
  the model answer that proposed it;
* the tool's raw result right after it returns;
* a failed model attempt that is retried, with its wait charged to the `retry_budget`, and,
  for a model with a `first_event_timeout`, an attempt's start and its first event;
* a suspension (with its approval requests) or the end of the run.

Each has a name (`runtime.boundaries.Boundary`), and the `harness_checkpoint` hooks are told of
it after it commits.

What happens between two commits is recomputed from the last one after a crash: a model answer
that was never committed is asked for again (a new attempt), guards on a committed result run
again, and a committed result is never produced twice.

Recovery by the last committed boundary, when a worker resumes a run another one left
`running` (DESIGN §5):

* no dispatch committed: the model is asked again, with a new attempt id, and an
  `attempt_reset` event tells streams to drop the text of the lost attempt (it is emitted when
  the next thing the run does is a model call, which is where an interrupted worker spends
  nearly all of its time outside tools);
* dispatch committed, no result: a `manual` tool's call becomes `uncertain` and the run waits
  (`awaiting_resolution`, a `recovery_required` event) for `Harness.resolve`; a `safe` one is
  invoked again, an `idempotent` one too, with the same execution key (attempt + 1);
* result committed: reused, never invoked again.

Pause and cancel are cooperative: `Store.commit` returns the run's pending control request, so
the driver acts on one at its next boundary: after a tool's result (the tool settles first),
or after the dispatch commit of a call it has not invoked yet (the dispatch is undone).

The driver is put together from parts, each in its own module: `runtime.driver_base` (state,
endings, commits), `runtime.model_calls` (asking the models), `runtime.approvals` (rules and
approvals of proposed calls) and `runtime.tool_calls` (dispatching and settling calls); this
module holds the step loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pytest_harness.errors import (
    HarnessError,
    ModelError,
    RecordingError,
    ReplayDiverged,
    StoreError,
)
from pytest_harness.models.base import Message
from pytest_harness.runtime.approvals import CallApprovals
from pytest_harness.runtime.driver_base import DriveContext, DriveStopped, ToolHandoff, _Deadline
from pytest_harness.runtime.guards import apply_guards
from pytest_harness.runtime.model_calls import ModelCalls, _answer
from pytest_harness.runtime.results import RunResult, RunStatus
from pytest_harness.runtime.tool_calls import ToolCalls
from pytest_harness.runtime.truncation import (
    CONTINUE_PROMPT,
    MAX_CONTINUATIONS,
    continuations,
    joined_output,
    truncation_error,
)
from pytest_harness.spec.schema import OnTruncation
from pytest_harness.store.base import EventDraft

__all__ = ["DriveContext", "DriveStopped", "Driver", "ToolHandoff"]


class Driver(ModelCalls, CallApprovals, ToolCalls):
    """Drives one run from its stored state to an end or a suspension."""

    # -- the loop ------------------------------------------------------------------------

    async def drive(self, history: list[Message]) -> RunResult:
        """Run until the run ends or waits; return its result as committed."""
        self.history = history
        renewer = None
        if self.ctx.renew:
            renewer = asyncio.create_task(self._renew_lease())
        try:
            return await self._loop()
        except (
            StoreError,
            RecordingError,
            ReplayDiverged,
            DriveStopped,
            ToolHandoff,
            asyncio.CancelledError,
        ):
            raise
        except Exception as exc:  # a bug in a plugin or in user code outside a tool
            error = {"type": type(exc).__name__, "message": str(exc)}
            self.journal.note(
                "command.failed", {"command": "drive", **error}, step=self.state.steps
            )
            return await self._end(RunStatus.FAILED, error=error)
        finally:
            if renewer is not None:
                renewer.cancel()

    async def _loop(self) -> RunResult:
        state = self.state
        if self.control is not None:
            return await self._stop()
        if self.status is not RunStatus.RUNNING:
            self.status = RunStatus.RUNNING
            self._pending.append(EventDraft("status_changed", {"status": "running"}))
        elif self.interrupted and self._model_next():
            self._reset = "interrupted"
        if state.phase == "start":
            refused = await self._check_input()
            if refused is not None:
                return refused
        while True:
            if state.phase == "model":
                result = await self._model_step()
            else:
                result = await self._tool_step()
            if result is not None:
                return result

    async def _check_input(self) -> RunResult | None:
        text = self.record.input
        if "input" in self.plan.watched:
            outcome = apply_guards(
                self.plan.guards,
                text,
                self._guard_context("input"),
                step=0,
                memory=self.plan.guard_memory,
            )
            self._decide(*outcome.decisions)
            if outcome.blocked_by is not None:
                return await self._end(
                    RunStatus.REFUSED, error={"type": "GuardBlocked", "message": outcome.reason}
                )
            text = outcome.text
        self.state.messages.append({"role": "user", "content": text})
        self.state.phase = "model"
        return None

    # -- model ---------------------------------------------------------------------------

    async def _model_step(self) -> RunResult | None:
        self._check_stopping()  # everything since the last commit is recomputed from it
        state, budget = self.state, self.plan.budget
        if budget.steps is not None and state.steps >= budget.steps:
            return await self._limit("steps", budget.steps, state.steps)
        try:
            link, response = await self._ask_models()
        except _Deadline:
            return await self._limit_deadline()
        except (ReplayDiverged, RecordingError):
            raise
        except ModelError as exc:
            return await self._end(
                RunStatus.FAILED, error={"type": "ModelError", "message": str(exc)}
            )
        except HarnessError as exc:
            return await self._end(
                RunStatus.FAILED, error={"type": type(exc).__name__, "message": str(exc)}
            )
        self._spend(link, response.usage.input_tokens, response.usage.output_tokens)
        state.steps += 1
        step = state.steps
        if self.journal.keeps("model.completed"):
            self._note_model("model.completed", link, {"usage": _answer(response)["usage"]})
        calls = [{"name": c.name, "args": dict(c.args)} for c in response.calls]
        detail: dict[str, Any] = {"text": response.text, "calls": calls}
        if response.incomplete:
            detail["incomplete"] = response.incomplete
            state.truncated += 1
        self._decision(step, "model", link.name, detail)
        spent_tokens = state.tokens_in + state.tokens_out
        if budget.tokens is not None and spent_tokens > budget.tokens:
            return await self._limit("tokens", budget.tokens, spent_tokens)
        if budget.usd is not None and state.usd > budget.usd:
            return await self._limit("usd", budget.usd, round(state.usd, 6))
        cut, go_on = response.incomplete is not None, False
        if cut and link.spec.on_truncation is not OnTruncation.ACCEPT:
            continued = len(continuations(state.messages))
            go_on = link.spec.on_truncation is OnTruncation.CONTINUE and (
                response.incomplete == "max_tokens"  # a full context window would stay full
            )
            if not go_on or (not response.calls and continued >= MAX_CONTINUATIONS):
                error = truncation_error(link.name, response, continued=continued)
                return await self._end(
                    RunStatus.FAILED, error={"type": type(error).__name__, "message": str(error)}
                )
            go_on = not response.calls  # a cut answer with calls goes on with its calls
        text = response.text
        if text and "output" in self.plan.watched:
            outcome = apply_guards(
                self.plan.guards,
                text,
                self._guard_context("output"),
                step=step,
                memory=self.plan.guard_memory,
            )
            self._decide(*outcome.decisions)
            if outcome.blocked_by is not None:
                self._note_model(
                    "model.processed", link, {"text": None, "blocked_by": outcome.blocked_by.id}
                )
                return await self._end(
                    RunStatus.REFUSED, error={"type": "GuardBlocked", "message": outcome.reason}
                )
            text = outcome.text
        self._note_model("model.processed", link, {"text": text, "calls": calls})
        message: Message = {"role": "assistant", "content": text}
        if response.calls:
            message["tool_calls"] = [
                {"id": c.id, "name": c.name, "args": dict(c.args)} for c in response.calls
            ]
        if response.thinking:
            message["thinking"] = [dict(block) for block in response.thinking]
        output = joined_output(state.messages, text or "")
        state.messages.append(message)
        if go_on:
            state.messages.append({"role": "user", "content": CONTINUE_PROMPT})
            return None  # the next model step continues the answer
        if not response.calls:
            state.output = output
            return await self._end(RunStatus.COMPLETED)
        return await self._plan_calls(response, step)
