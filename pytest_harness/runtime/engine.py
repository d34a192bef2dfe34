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
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_harness.errors import (
    HarnessError,
    LiveModelBlocked,
    ModelError,
    RecordingError,
    ReplayDiverged,
    StoreError,
)
from pytest_harness.models.base import (
    Message,
    ModelRequest,
    ModelResponse,
    content_digest,
)
from pytest_harness.models.live import live_models_allowed
from pytest_harness.plugins import notify_checkpoint
from pytest_harness.redaction import comparable
from pytest_harness.runtime.boundaries import Boundary
from pytest_harness.runtime.events import EventHub
from pytest_harness.runtime.guards import GuardContext, apply_guards
from pytest_harness.runtime.journal import Journal, write_with_retries
from pytest_harness.runtime.plan import ModelLink, PlanTool, TaskPlan
from pytest_harness.runtime.principal import Principal
from pytest_harness.runtime.results import RunResult, RunStatus
from pytest_harness.runtime.retrying import (
    FirstEvent,
    RetryClock,
    budget_message,
    first_event,
    first_event_message,
)
from pytest_harness.runtime.rules import evaluate_rules
from pytest_harness.runtime.state import RunState, call_approvals, result_from_state
from pytest_harness.runtime.trace import Decision
from pytest_harness.runtime.truncation import (
    CONTINUE_PROMPT,
    MAX_CONTINUATIONS,
    continuations,
    joined_output,
    truncation_error,
)
from pytest_harness.spec.schema import Effect, OnTruncation, ReplayPolicy
from pytest_harness.store.base import (
    ApprovalRow,
    EventDraft,
    NewApproval,
    RunRecord,
    Store,
    StoredArtifact,
)
from pytest_harness.tools.context import ToolContext

if TYPE_CHECKING:
    from pytest_harness.tools.registry import ToolOutcome

_UNSET: Any = object()
PARTS = ("system", "tools", "messages")
"""The parts of a model request a recording keeps a digest of."""

__all__ = ["DriveStopped", "Driver", "ToolHandoff", "approval_id", "args_digest", "execution_key"]


def execution_key(run_id: str, step: int, index: int) -> str:
    """The stable key of call `index` of model step `step` in a run."""
    digest = hashlib.blake2b(f"{run_id}:{step}:{index}".encode(), digest_size=16).hexdigest()
    return f"exk_{digest}"


def approval_id(key: str, rule_id: str, *, first: bool) -> str:
    """The id of the approval request of call `key` for rule `rule_id`.

    The first request of a call takes the call's own digest, so a call that needs one approval
    keeps the id it always had; each further one is told apart by its rule.
    """
    if first:
        return "apr_" + key.removeprefix("exk_")
    digest = hashlib.blake2b(f"{key}:{rule_id}".encode(), digest_size=16).hexdigest()
    return f"apr_{digest}"


def args_digest(args: Mapping[str, Any]) -> str:
    """A digest of tool arguments in canonical JSON, binding an approval to what was asked."""
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _answer(response: ModelResponse) -> dict[str, Any]:
    """A model answer as a recording keeps it.

    `thinking` (the provider's reasoning blocks, sent back unchanged in later requests) and
    `incomplete` (why the answer was cut) appear only when the answer has them.
    """
    answer: dict[str, Any] = {
        "text": response.text,
        "calls": [{"id": c.id, "name": c.name, "args": dict(c.args)} for c in response.calls],
        "usage": {
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
        },
    }
    if response.thinking:
        answer["thinking"] = [dict(block) for block in response.thinking]
    if response.incomplete:
        answer["incomplete"] = response.incomplete
    return answer


_UNKNOWN_CHARGE = frozenset({"server", "timeout", "malformed"})
"""Failed attempts the provider may have charged for: the run's usage is then incomplete."""


def _retryable(error: BaseException) -> bool:
    return isinstance(error, ModelError) and error.retryable


class ToolHandoff(Exception):
    """Raised by a driver's `_call_tool` to stop the drive at a committed tool dispatch.

    `drive()` lets it through (the run is neither ended nor failed): whoever drives the run
    invokes the call elsewhere and drives again with its outcome.
    """

    def __init__(self, call: Mapping[str, Any]) -> None:
        super().__init__(f"tool call {call.get('key')} ({call.get('name')}) handed off")
        self.call = dict(call)


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


@dataclass(frozen=True, slots=True, kw_only=True)
class DriveContext:
    """What a driver needs from the harness."""

    store: Store
    owner: str
    lease: float
    renew: bool
    keep_requests: bool = True
    """Keep each recorded model request's content, not only its digest."""
    spec_digest: str = ""
    hub: EventHub | None = None
    """Where committed and provisional events are announced to this process's streams."""
    stopping: Callable[[], bool] | None = None
    """Whether the worker is shutting down: the driver then stops at its next clean boundary
    (before a model call, or after a tool's result is committed) with `DriveStopped`."""


class Driver:
    """Drives one run from its stored state to an end or a suspension."""

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
        self.status = RunStatus(record.status)
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
        self._sent: tuple[int, Any, Any] | None = None
        """What this drive's last journaled request held: message count, system, tools."""
        self._last_attempt: str | None = None
        """The id of the last model attempt that ended (its later entries carry it)."""
        self._started = time.monotonic()
        self._elapsed0 = self.state.elapsed
        waiting = self.state.waiting
        if waiting is not None and interrupted:
            # An attempt its worker left waiting for a first event: the server had until that
            # worker's last sign of life (its last lease renewal) to start replying.
            alive = min(time.time(), last_alive if last_alive is not None else waiting["since"])
            waiting["carried"] = float(waiting.get("carried", 0.0)) + max(
                0.0, alive - float(waiting["since"])
            )
        self.journal = Journal(record.record)
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

    # -- the loop ---------------------------------------------------------------------------

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
        outcome = apply_guards(self.plan.guards, text, self._guard_context("input"), step=0)
        self._decide(*outcome.decisions)
        if outcome.blocked_by is not None:
            return await self._end(
                RunStatus.REFUSED, error={"type": "GuardBlocked", "message": outcome.reason}
            )
        self.state.messages.append({"role": "user", "content": outcome.text})
        self.state.phase = "model"
        return None

    # -- model ------------------------------------------------------------------------------

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
        self._note_model("model.completed", link, {"usage": _answer(response)["usage"]})
        calls = [{"name": c.name, "args": dict(c.args)} for c in response.calls]
        detail: dict[str, Any] = {"text": response.text, "calls": calls}
        if response.incomplete:
            detail["incomplete"] = response.incomplete
            state.truncated += 1
        self._decide(Decision(step, "model", link.name, detail))
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
        if text:
            outcome = apply_guards(self.plan.guards, text, self._guard_context("output"), step=step)
            self._decide(*outcome.decisions)
            if outcome.blocked_by is not None:
                self._note_model(
                    "model.processed", link, {"text": None, "blocked_by": outcome.blocked_by}
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

    def _spend(self, link: ModelLink, tokens_in: int, tokens_out: int) -> None:
        """Count tokens an attempt cost, and their price, against the run."""
        state, price = self.state, link.spec.price
        state.tokens_in += tokens_in
        state.tokens_out += tokens_out
        state.usd += (
            tokens_in * price.input_per_mtok + tokens_out * price.output_per_mtok
        ) / 1_000_000

    async def _ask_models(self) -> tuple[ModelLink, ModelResponse]:
        """Ask the task's model, retrying and then falling back; every attempt is a turn.

        A `rate_limit`, `server` or `timeout` error is retried `retries` times with the
        provider's backoff (tenacity drives the attempts), while the waits fit in what is left
        of the model's `retry_budget` for this run; each retry's failed attempt is committed
        (`model.failed`) with its wait charged before the wait starts. Then, or at once for
        another error, the next fallback model is asked. A `refusal` fails the run: another model
        would not make the request acceptable.
        """
        from tenacity import AsyncRetrying, retry_if_exception

        last: ModelError | None = None
        for link in self.plan.models:
            if link.provider.live and not live_models_allowed():
                raise LiveModelBlocked(
                    link.provider.name, link.name, getattr(link.provider, "blocked_hint", None)
                )
            clock = self._clock(link.name)
            retry_clock = RetryClock(
                link.provider,
                attempts=link.spec.retries + 1,
                budget=link.spec.retry_budget,
                clock=clock,
            )
            retrying = AsyncRetrying(
                stop=retry_clock.stop,
                retry=retry_if_exception(_retryable),
                wait=retry_clock.wait,
                sleep=self._retry_sleep(clock),
                reraise=True,
            )
            try:
                async for attempt in retrying:
                    with attempt:
                        response = await self._attempt(link)
            except ModelError as exc:
                clock.pop("call_failures", None)
                last = exc
                if retry_clock.spent is not None:
                    why = budget_message(link.name, link.spec.retry_budget, retry_clock.spent)
                    last = ModelError(exc.kind, f"{exc}; {why}", model=exc.model)
                if exc.kind == "refusal":
                    raise
                continue
            clock.pop("call_failures", None)
            return link, response
        assert last is not None
        tried = ", ".join(link.name for link in self.plan.models)
        raise ModelError(last.kind, f"every model failed (tried {tried}); last error: {last}")

    async def _attempt(self, link: ModelLink) -> ModelResponse:
        """One model attempt: a new request, a turn, and its answer or error in the record."""
        state = self.state
        arrived = asyncio.Event()
        request = self._request(link, arrived)
        if self._reset is not None:
            self._announce(
                EventDraft(
                    "attempt_reset",
                    {
                        "attempt": request.attempt_id,
                        "seq": 0,
                        "model": link.name,
                        "turn": request.turn,
                        "reason": self._reset,
                    },
                )
            )
            self._reset = None
        if self.journal.recording:
            await self._start_attempt(link, request)
        try:
            if link.spec.first_event_timeout is None:
                response: ModelResponse = await self._within_deadline(
                    link.provider.complete(request), link.spec.timeout, f"model {link.name}"
                )
            else:
                response = await self._timed_attempt(link, request, arrived)
        except _Deadline:
            self._end_attempt(
                "model.interrupted", link, {"reason": "the run's deadline passed during the call"}
            )
            raise
        except ModelError as exc:
            state.turns[link.name] = request.turn + 1
            failed: dict[str, Any] = {"error": exc.kind, "message": str(exc)}
            if exc.usage is not None:  # the failed answer said what it cost: count it
                self._spend(link, *exc.usage)
                failed["usage"] = {"input_tokens": exc.usage[0], "output_tokens": exc.usage[1]}
            self._end_attempt("model.failed", link, failed)
            self._decide(Decision(state.steps + 1, "model", link.name, {"error": exc.kind}))
            if exc.kind in _UNKNOWN_CHARGE and exc.usage is None:
                state.usage_incomplete = True
            if self._streamed == request.attempt_id:
                self._reset = "retry"  # its text was streamed: the next attempt replaces it
            raise
        except Exception as exc:
            self._end_attempt(
                "model.failed", link, {"exception": type(exc).__name__, "message": str(exc)}
            )
            raise
        state.turns[link.name] = request.turn + 1
        self._end_attempt("model.response", link, {"answer": _answer(response)})
        return response

    async def _timed_attempt(
        self, link: ModelLink, request: ModelRequest, arrived: asyncio.Event
    ) -> ModelResponse:
        """Ask the model, holding it to its `first_event_timeout`.

        What an attempt that a stopped worker left unanswered already waited is taken off the
        limit. The start and the first event are committed (`model.started`,
        `model.first_event`), so that a resumed run knows how long the server has been silent.
        """
        state = self.state
        limit = link.spec.first_event_timeout
        assert limit is not None
        waiting = state.waiting
        carried = 0.0
        if waiting is not None and waiting.get("model") == link.name:
            carried = min(limit, float(waiting.get("carried", 0.0)))
        state.waiting = {
            "model": link.name,
            "attempt": request.attempt_id,
            "since": time.time(),
            "carried": carried,
        }
        await self._commit([], phase=Boundary.MODEL_STARTED)
        started = time.monotonic()
        call = asyncio.ensure_future(
            self._within_deadline(
                link.provider.complete(request), link.spec.timeout, f"model {link.name}"
            )
        )
        outcome = await first_event(call, arrived, limit - carried)
        state.waiting = None
        if outcome is FirstEvent.NONE:
            raise ModelError(
                "timeout", first_event_message(link.name, limit, carried), model=link.name
            )
        clock = self._clock(link.name)
        latency = round(carried + time.monotonic() - started, 6)
        clock["first_event_last"] = latency
        clock["first_event_slowest"] = max(clock.get("first_event_slowest", 0.0), latency)
        if outcome is FirstEvent.STARTED:  # the reply has started and goes on: say so
            try:
                await self._commit([], phase=Boundary.MODEL_FIRST_EVENT)
            except BaseException:
                call.cancel()
                raise
        result: ModelResponse = await call
        return result

    def _clock(self, model: str) -> dict[str, float]:
        """The retry and first-event figures of `model` in this run's state."""
        return self.state.clocks.setdefault(model, {})

    async def _start_attempt(self, link: ModelLink, request: ModelRequest) -> None:
        """Commit `model.started` (the request, before the provider is called) with the state.

        The state committed is the one the attempt starts from, so a worker that resumes after
        a crash during the call asks again from the same point (with a new attempt id), and
        the attempt it lost is journaled as `model.interrupted`.
        """
        content = request.content()
        seen = comparable(content)  # one scan for the whole request and its parts
        self.state.attempt = {"id": request.attempt_id, "model": link.name}
        self.journal.note(
            "model.started",
            {
                "model": link.name,
                "turn": request.turn,
                # digests of the redacted request, so golden files compare equal: whole,
                # and part by part, so a replay can say which part changed
                "digest": content_digest(seen),
                "parts": {part: content_digest(seen[part]) for part in PARTS},
                "request": self._request_delta(content) if self.ctx.keep_requests else None,
            },
            step=self.state.steps + 1,
            attempt_id=request.attempt_id,
        )
        await self._commit([], phase=Boundary.MODEL_STARTED)

    def _request_delta(self, content: dict[str, Any]) -> dict[str, Any]:
        """The request as `model.started` keeps it: what changed since this drive's last one.

        A run's messages only grow, so each request records the messages after
        `messages_from` (the count the previous request of this drive had; 0 for a drive's
        first request), and its system prompt and tool schemas only when they changed. The
        journal stays linear in the run's length; `Recording.from_journal` rebuilds each
        request whole.
        """
        messages = content["messages"]
        sent = self._sent
        start = sent[0] if sent is not None and sent[0] <= len(messages) else 0
        delta: dict[str, Any] = {"messages_from": start, "messages": messages[start:]}
        if sent is None or start == 0 or sent[1] != content["system"]:
            delta["system"] = content["system"]
        if sent is None or start == 0 or sent[2] != content["tools"]:
            delta["tools"] = content["tools"]
        self._sent = (len(messages), content["system"], content["tools"])
        return delta

    def _end_attempt(self, kind: str, link: ModelLink, payload: dict[str, Any]) -> None:
        attempt = self.state.attempt
        self.state.attempt = None
        self.journal.note(
            kind,
            {"model": link.name, **payload},
            step=self.state.steps + 1,
            attempt_id=None if attempt is None else attempt.get("id"),
        )
        if attempt is not None:
            self._last_attempt = attempt.get("id")

    def _note_model(self, kind: str, link: ModelLink, payload: dict[str, Any]) -> None:
        self.journal.note(
            kind,
            {"model": link.name, **payload},
            step=self.state.steps,
            attempt_id=self._last_attempt,
        )

    def _request(self, link: ModelLink, arrived: asyncio.Event) -> ModelRequest:
        attempt_id = f"att_{uuid.uuid4().hex}"
        run_id = self.record.run_id
        hub = self.ctx.hub
        # Providers stream when given `on_text`. In-process ones (scripted, function) get it
        # always, at no cost; a live one only while a stream of this process follows the run,
        # so nobody pays for streaming that nobody reads.
        on_text = None
        if not link.provider.live or (hub is not None and hub.watching(run_id)):
            on_text = self._text_sink(attempt_id, arrived)
        return ModelRequest(
            task=self.plan.name,
            model=link.name,
            system=self.plan.spec.prompt,
            messages=(*self.history, *self.state.messages),
            tools=self.plan.schemas,
            run_id=run_id,
            turn=self.state.turns.get(link.name, 0),
            input=self.record.input,
            attempt_id=attempt_id,
            on_text=on_text,
            on_first_event=arrived.set,
        )

    def _text_sink(self, attempt_id: str, arrived: asyncio.Event) -> Callable[[str], None]:
        """The `on_text` of one attempt: each piece becomes a `text_delta` event."""
        seq = 0

        def on_text(delta: str) -> None:
            nonlocal seq
            if not delta:
                return
            arrived.set()
            seq += 1
            self._streamed = attempt_id
            self._announce(
                EventDraft("text_delta", {"attempt": attempt_id, "seq": seq, "text": delta})
            )

        return on_text

    def _announce(self, draft: EventDraft) -> None:
        """Queue an event for the next commit and hand it to this process's streams now."""
        self._pending.append(draft)
        hub = self.ctx.hub
        if hub is not None:
            hub.provisional(self.record.run_id, draft)

    async def _plan_calls(self, response: ModelResponse, step: int) -> RunResult | None:
        """Decide every proposed call with the rules; suspend when one needs an approval."""
        state = self.state
        run_id = self.record.run_id
        approvals: list[NewApproval] = []
        state.calls = []
        for index, proposed in enumerate(response.calls):
            key = execution_key(run_id, step, index)
            call: dict[str, Any] = {
                "id": proposed.id,
                "name": proposed.name,
                "args": dict(proposed.args),
                "key": key,
                "status": "planned",
                "attempt": 0,
            }
            self.journal.note(
                "tool.started",
                {"name": proposed.name, "args": dict(proposed.args), "call_id": proposed.id},
                step=step,
                execution_key=key,
            )
            if proposed.name not in self.plan.tools:
                call["verdict"] = "unknown"
            else:
                verdict = evaluate_rules(
                    self.plan.rules, self._rule_variables(proposed.name, proposed.args), step=step
                )
                self._decide(*verdict.decisions)
                call["verdict"] = verdict.effect.value
                if verdict.rule is not None:
                    call["rule"] = verdict.rule.id
                    call["message"] = verdict.rule.message
                if verdict.effect is Effect.APPROVE:
                    call["requested_by"] = self.principal.id
                    call["decision"] = None
                    call["approvals"] = []
                    for rule in verdict.approvals:
                        entry: dict[str, Any] = {
                            "approval_id": approval_id(key, rule.id, first=not call["approvals"]),
                            "rule": rule.id,
                            "approvers": list(rule.approvers),
                            "self_approve": rule.self_approve,
                            "decision": None,
                        }
                        call["approvals"].append(entry)
                        approvals.append(
                            NewApproval(
                                approval_id=entry["approval_id"],
                                execution_key=key,
                                args_digest=args_digest(proposed.args),
                                tool=proposed.name,
                                args=dict(proposed.args),
                                rule_id=rule.id,
                                approvers=tuple(rule.approvers),
                                requested_by=self.principal.id,
                                self_approve=rule.self_approve,
                            )
                        )
                        self.journal.note(
                            "approval.requested",
                            {
                                "approval_id": entry["approval_id"],
                                "tool": proposed.name,
                                "args": dict(proposed.args),
                                "rule": rule.id,
                                "approvers": list(rule.approvers),
                            },
                            step=step,
                            execution_key=key,
                        )
            state.calls.append(call)
        state.phase = "tools"
        if not approvals:
            return None
        events = [
            EventDraft(
                "approval_required",
                {"approval_id": a.approval_id, "tool": a.tool, "rule": a.rule_id},
            )
            for a in approvals
        ]
        return await self._suspend(
            RunStatus.AWAITING_APPROVAL, events, approvals, phase=Boundary.APPROVAL_REQUESTED
        )

    # -- tools ------------------------------------------------------------------------------

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
        call["attempt_id"] = f"att_{uuid.uuid4().hex}"
        self.journal.note(
            "tool.dispatched",
            {"name": call["name"], "args": call["args"], "attempt": call["attempt"]},
            step=state.steps,
            attempt_id=call["attempt_id"],
            execution_key=call["key"],
        )
        await self._commit(
            [
                EventDraft(
                    "tool_call_start",
                    {
                        "execution_key": call["key"],
                        "tool": call["name"],
                        "attempt": call["attempt"],
                    },
                )
            ],
            phase=Boundary.TOOL_DISPATCHED,
        )
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
        outcome = await self._call_tool(tool, call, context)
        if self.journal.recording:
            for artifact in outcome.artifacts:
                await self.ctx.store.put_artifact(
                    StoredArtifact(
                        sha256=artifact.sha256,
                        media_type=artifact.media_type,
                        data=artifact.data,
                        name=artifact.name,
                    )
                )
        self.journal.note(
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

    def _check_stopping(self) -> None:
        stopping = self.ctx.stopping
        if stopping is not None and stopping():
            raise DriveStopped(self.record.run_id)

    async def _call_tool(
        self, tool: PlanTool, call: dict[str, Any], context: ToolContext
    ) -> ToolOutcome:
        """Invoke a dispatched call (its dispatch is committed) and return its outcome.

        The seam of Temporal execution (`pytest_harness.temporal`): its driver raises
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
        self._decide(Decision(self.state.steps, "tool", call["name"], detail))

    def _tool_decision(self, call: dict[str, Any], outcome: ToolOutcome) -> None:
        detail: dict[str, Any] = {"args": call["args"], "outcome": outcome.kind}
        if outcome.ok:
            detail["result"] = outcome.value
        else:
            detail["error"] = outcome.text
        self._decide(Decision(self.state.steps, "tool", call["name"], detail))

    async def _answer_tools(self) -> RunResult | None:
        """Turn every settled call into a tool message, through the tool-result guards."""
        state = self.state
        for call in state.calls:
            text = call["outcome"]["text"]
            if call["outcome"]["kind"] in ("ok", "error", "resolved"):
                context = self._guard_context("tool_result", call["name"], call["args"])
                outcome = apply_guards(self.plan.guards, text, context, step=state.steps)
                self._decide(*outcome.decisions)
                if outcome.blocked_by is not None:
                    self.journal.note(
                        "tool.processed",
                        {"name": call["name"], "text": None, "blocked_by": outcome.blocked_by},
                        step=state.steps,
                        execution_key=call["key"],
                    )
                    return await self._end(
                        RunStatus.REFUSED, error={"type": "GuardBlocked", "message": outcome.reason}
                    )
                text = outcome.text
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

    # -- endings and commits ----------------------------------------------------------------

    async def _limit(self, which: str, limit: float, spent: float) -> RunResult:
        self._decide(Decision(self.state.steps, "limit", which, {"limit": limit, "spent": spent}))
        self.state.limit = which
        return await self._end(RunStatus.LIMITED)

    async def _limit_deadline(self) -> RunResult:
        deadline = self.plan.spec.deadline or 0.0
        return await self._limit("deadline", deadline, round(self._elapsed(), 3))

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
        self._decide(Decision(step, "output", "output", {"status": status.value}))
        events = []
        if status is RunStatus.COMPLETED:
            events.append(EventDraft("text_complete", {"text": state.output}))
        events.append(EventDraft("status_changed", {"status": status.value}))
        events.append(EventDraft("run_result", {"status": status.value}))
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
        state = self.state.to_dict()
        checkpoint = None
        if status is not RunStatus.RUNNING:
            checkpoint = {
                "status": status.value,
                "output": state["output"],
                "error": state["error"],
                "limit": state["limit"],
                "usage": state["usage"],
                "trace": state["trace"],
            }
        journal = self.journal.for_commit(events, self.state.steps, checkpoint)
        store = self.ctx.store

        async def write() -> str | None:
            return await store.commit(
                run_id,
                self.token,
                status=status.value,
                state=state,
                events=events,
                approvals=approvals or (),
                lease_ttl=self.ctx.lease if self.ctx.renew else None,
                release=release,
                clear_control=acted,
                journal=journal,
            )

        self.control = await write_with_retries(
            write, what=f"run {run_id} (step {self.state.steps})", journaled=bool(journal)
        )
        self.journal.committed(journal)
        del self._pending[:taken]
        self.released = release
        hub = self.ctx.hub
        if hub is not None:
            hub.committed(run_id)
        notify_checkpoint(
            session_id=self.record.session_id,
            run_id=run_id,
            status=status.value,
            phase=phase.value,
        )

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

    # -- helpers ----------------------------------------------------------------------------

    def _decide(self, *decisions: Decision) -> None:
        self.state.trace.extend(d.to_dict() for d in decisions)

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
        return self._elapsed0 + (time.monotonic() - self._started)

    def _remaining(self) -> float | None:
        deadline = self.plan.spec.deadline
        return None if deadline is None else deadline - self._elapsed()

    async def _within_deadline(self, awaitable: Any, timeout: float | None, what: str) -> Any:
        remaining = self._remaining()
        if remaining is not None and remaining <= 0:
            awaitable.close()
            raise _Deadline
        limits = [t for t in (remaining, timeout) if t is not None]
        if not limits:
            return await awaitable
        try:
            async with asyncio.timeout(min(limits)):
                return await awaitable
        except TimeoutError:
            if remaining is not None and (timeout is None or remaining <= timeout):
                raise _Deadline from None
            raise ModelError("timeout", f"{what} did not answer within {timeout}s") from None

    def _retry_sleep(self, clock: dict[str, float]) -> Callable[[float], Any]:
        """Tenacity's `sleep` for one model: charge the wait to its clock, commit, then wait.

        The failed attempt and the charged wait are committed before the wait starts, so a
        worker that stops during it leaves the wait counted: a resumed run never gets it back.
        """

        async def sleep(seconds: float) -> None:
            remaining = self._remaining()
            if seconds > 0 and remaining is not None and seconds >= remaining:
                raise _Deadline
            clock["retry_waited"] = round(clock.get("retry_waited", 0.0) + seconds, 6)
            clock["call_failures"] = clock.get("call_failures", 0) + 1
            await self._commit([], phase=Boundary.MODEL_FAILED)
            if seconds > 0:
                await asyncio.sleep(seconds)

        return sleep

    async def _renew_lease(self) -> None:
        """Extend the lease about every third of its length while the run is driven.

        When another worker has taken the run over, renewal stops; this worker's next commit
        is then rejected by its stale fencing token and the run stops here.
        """
        interval = self.ctx.lease / 3
        while True:
            await asyncio.sleep(interval)
            try:
                await self.ctx.store.renew_lease(self.record.run_id, self.token, self.ctx.lease)
            except StoreError:
                return

    def _model_next(self) -> bool:
        """Whether the next thing this run does, from its committed state, is a model call."""
        state = self.state
        if state.phase in ("start", "model"):
            return True
        return state.phase == "tools" and all(c["status"] == "done" for c in state.calls)

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

    async def checkpoint(self, status: RunStatus) -> RunResult:
        """Commit the state as it is with `status`; a waiting status gives the lease up."""
        changed = status.value != self.record.status
        self.status = status
        waiting = status is not RunStatus.RUNNING
        events = [EventDraft("status_changed", {"status": status.value})] if changed else []
        await self._commit(events, release=waiting, phase=Boundary.TOOL_RESOLVED)
        return self.result()

    def apply_decisions(self, decided: Mapping[str, ApprovalRow]) -> None:
        """Bring the answered approvals (by approval id) into the state.

        A call runs when every one of its requests is approved; one `decline` declines it at
        once, and its requests still open close as `moot`. Each answer is an `approval`
        decision, in the order of the rules that asked.
        """
        state = self.state
        for call in state.calls:
            if call.get("verdict") != "approve" or call.get("decision"):
                continue
            entries = call_approvals(call)
            changed = False
            for entry in entries:
                row = decided.get(entry["approval_id"])
                if entry.get("decision") is not None or row is None:
                    continue
                changed = True
                entry["decision"] = row.status
                detail = {"decision": row.status, "approver": row.approver, "rule": entry["rule"]}
                self._decide(Decision(state.steps, "approval", call["name"], detail))
                self.journal.note(
                    "tool.resolved",
                    {
                        "how": "approval",
                        "approval_id": entry["approval_id"],
                        "tool": call["name"],
                        "args": call["args"],
                        "rule": entry["rule"],
                        "decision": row.status,
                        "approver": {"id": row.approver, "roles": list(row.approver_roles)},
                        "reason": row.reason,
                    },
                    step=state.steps,
                    execution_key=call["key"],
                )
            if any(e.get("decision") == "decline" for e in entries):
                for entry in entries:
                    if entry.get("decision") is None:
                        changed = True
                        entry["decision"] = "moot"
                        detail = {"decision": "moot", "rule": entry["rule"]}
                        self._decide(Decision(state.steps, "approval", call["name"], detail))
                call["decision"] = "decline"
            elif entries and all(e.get("decision") == "approve" for e in entries):
                call["decision"] = "approve"
            if changed:
                call["approvals"] = entries
