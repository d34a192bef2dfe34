"""Asking the models: attempts, retries and fallbacks, first-event timeouts, streaming.

`ModelCalls` is the part of the run loop (`runtime.engine.Driver`) that turns one model step
into one answer: each attempt is journaled (`model.started`, `model.response`,
`model.failed`), its cost counted, its failures retried within the model's `retry_budget`
(each retry committed before its wait) and then handed to the next fallback model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

from pytest_harness.eager import start
from pytest_harness.errors import ModelError
from pytest_harness.models.base import ModelRequest, ModelResponse
from pytest_harness.models.live import check_live
from pytest_harness.runtime.answers import check_answer
from pytest_harness.runtime.boundaries import Boundary
from pytest_harness.runtime.clock import id_hex, monotonic, now
from pytest_harness.runtime.driver_base import AttemptLost, DriverBase, _Deadline
from pytest_harness.runtime.plan import ModelLink
from pytest_harness.runtime.retrying import (
    FirstEvent,
    RetryClock,
    budget_message,
    first_event,
    first_event_message,
    timeout_message,
)
from pytest_harness.runtime.texts import schemas_text
from pytest_harness.store.base import EventDraft
from pytest_harness.store.helpers import PreparedJSON, json_text

__all__ = ["ModelCalls"]


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


def _quoted(value: Any) -> str:
    """The JSON text of `value`; printable ASCII without a quote or a backslash, quoted as is."""
    if (
        type(value) is str
        and value.isascii()
        and value.isprintable()
        and '"' not in value
        and "\\" not in value
    ):
        return f'"{value}"'
    return json_text(value)


def _started_text(payload: dict[str, Any]) -> str:
    """The text of a `model.started` payload with its request: what encoding it gives.

    Its names and digests are quoted as they are, its request's text is its own
    (`_request_delta`).
    """
    turn = payload["turn"]
    parts = ",".join(f"{_quoted(key)}:{_quoted(value)}" for key, value in payload["parts"].items())
    return (
        f'{{"model":{_quoted(payload["model"])},'
        f'"turn":{turn if type(turn) is int else json_text(turn)},'
        f'"digest":{_quoted(payload["digest"])},"parts":{{{parts}}},'
        f'"request":{payload["request"].text()}}}'
    )


_UNKNOWN_CHARGE = frozenset({"server", "timeout", "malformed"})
"""Failed attempts the provider may have charged for: the run's usage is then incomplete."""


class ModelCalls(DriverBase):
    """The model side of a drive: ask, retry, fall back, stream, journal."""

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
        provider's backoff, while the waits fit in what is left of the model's `retry_budget`
        for this run (`RetryClock`); each retry's failed attempt is committed (`model.failed`)
        with its wait charged before the wait starts. Then, or at once for another error, the
        next fallback model is asked. A `refusal` fails the run: another model would not make
        the request acceptable. A model whose live calls are refused here (`_check_live`) fails
        the run with `LiveModelBlocked` before it is asked.
        """
        last: ModelError | None = None
        for link in self.plan.models:
            self._check_live(link)
            clock = self._clock(link.name)
            retry_clock = RetryClock(
                link.provider,
                attempts=link.spec.retries + 1,
                budget=link.spec.retry_budget,
                clock=clock,
            )
            try:
                response = await self._attempts(link, retry_clock, clock)
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

    def _check_live(self, link: ModelLink) -> None:
        """Raise `LiveModelBlocked` when this process may not call `link`'s live provider.

        The seam of Temporal execution: there the provider is called by the `harness_model`
        activity, whose worker checks each attempt, and the run loop (workflow code, which
        must not read its process's settings) checks nothing.
        """
        check_live(link.provider, link.name)

    async def _attempts(
        self, link: ModelLink, retry_clock: RetryClock, clock: dict[str, float]
    ) -> ModelResponse:
        """Attempt `link` until it answers, or raise the error that no retry follows."""
        number = 0
        while True:
            number += 1
            try:
                return await self._asked(link, partial(retry_clock.delay, number))
            except ModelError as exc:
                if not exc.retryable or retry_clock.stop(number, exc):
                    raise
                await self._retry_sleep(clock, retry_clock.wait(number, exc))

    async def _asked(self, link: ModelLink, delay: Callable[[ModelError], float]) -> ModelResponse:
        """An attempt's answer; an attempt lost with its worker is asked again (not a retry)."""
        while True:
            try:
                return await self._attempt(link, delay)
            except AttemptLost:
                continue

    async def _attempt(
        self, link: ModelLink, delay: Callable[[ModelError], float]
    ) -> ModelResponse:
        """One model attempt: a new request, a turn, and its answer or error in the record.

        A retryable error is recorded with the `wait` its provider asks before a retry
        (`delay`, the retry clock's, so it is asked once): a replay charges the same waits to
        the retry budget, and so stops retrying where the run did, or where today's budget says.
        """
        state = self.state
        # only a model with a `first_event_timeout` waits for its first event
        arrived = asyncio.Event() if link.spec.first_event_timeout is not None else None
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
                    self._complete(link, request), link.spec.timeout, link.name
                )
            else:
                assert arrived is not None
                response = await self._timed_attempt(link, request, arrived)
            check_answer(response, link.name)
        except _Deadline:  # a turn of its recording: a replay cuts the call there too
            reason = "the run's deadline passed during the call"
            self._end_attempt("model.interrupted", link, {"reason": reason, "deadline": True})
            raise
        except AttemptLost as lost:  # as a worker that stopped during the call leaves it
            self._end_attempt("model.interrupted", link, {"reason": lost.reason})
            self._reset = "interrupted"
            raise
        except ModelError as exc:
            state.turns[link.name] = request.turn + 1
            failed: dict[str, Any] = {"error": exc.kind, "message": str(exc)}
            if exc.usage is not None:  # the failed answer said what it cost: count it
                self._spend(link, *exc.usage)
                failed["usage"] = {"input_tokens": exc.usage[0], "output_tokens": exc.usage[1]}
            if exc.retryable:
                failed["wait"] = delay(exc)
            self._end_attempt("model.failed", link, failed)
            self._decision(state.steps + 1, "model", link.name, {"error": exc.kind})
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
        answer = {"answer": _answer(response)} if self.journal.recording else {}
        self._end_attempt("model.response", link, answer)
        return response

    async def _complete(self, link: ModelLink, request: ModelRequest) -> ModelResponse:
        """Send one attempt's request to the model's provider and return its answer.

        The seam of Temporal execution (`pytest_harness.temporal`): its driver runs the request
        as an activity instead, and raises `AttemptLost` when that activity's worker is lost.
        """
        return await link.provider.complete(request)

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
            "since": now(),
            "carried": carried,
        }
        await self._commit([], phase=Boundary.MODEL_STARTED)
        started = monotonic()
        call = asyncio.ensure_future(
            self._within_deadline(self._complete(link, request), link.spec.timeout, link.name)
        )
        outcome = await first_event(call, arrived, limit - carried)
        state.waiting = None
        if outcome is FirstEvent.NONE:
            raise ModelError(
                "timeout", first_event_message(link.name, limit, carried), model=link.name
            )
        clock = self._clock(link.name)
        latency = round(carried + monotonic() - started, 6)
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
        the attempt it lost is journaled as `model.interrupted`. A drive that is not `durable`
        (a replay's) sends the entry with its next commit instead.
        """
        # imported here: only a recorded run digests its requests (redaction comes with it)
        from pytest_harness.runtime.request_digests import request_digests

        content = request.content()
        # digests of the request as golden files compare it: whole, and part by part, so a
        # replay can say which part changed (and of the task's hidden deny messages it holds)
        digest, parts = request_digests(request, content, self.plan.rules)
        self.state.attempt = {"id": request.attempt_id, "model": link.name}
        delta = self._request_delta(request, content) if self.ctx.keep_requests else None
        payload = {
            "model": link.name,
            "turn": request.turn,
            "digest": digest,
            "parts": parts,
            "request": delta,
        }
        self.journal.note(
            "model.started",
            payload if delta is None else PreparedJSON(payload, lambda: _started_text(payload)),
            step=self.state.steps + 1,
            attempt_id=request.attempt_id,
        )
        if self.ctx.durable:
            await self._commit([], phase=Boundary.MODEL_STARTED)

    def _request_delta(self, request: ModelRequest, content: dict[str, Any]) -> PreparedJSON:
        """The request as `model.started` keeps it: what changed since this drive's last one.

        A run's messages only grow, so each request records the messages after
        `messages_from` (the count the previous request of this drive had; 0 for a drive's
        first request), and its system prompt and tool schemas only when they changed. The
        journal stays linear in the run's length; `Recording.from_journal` rebuilds each
        request whole. Its text takes each message's from the state's (encoded for the commit
        that carries it) and the tool schemas' from `texts.schemas_text`.
        """
        messages = content["messages"]
        sent = self._sent
        start = sent[0] if sent is not None and sent[0] <= len(messages) else 0
        delta: dict[str, Any] = {"messages_from": start, "messages": messages[start:]}
        if sent is None or start == 0 or sent[1] != content["system"]:
            delta["system"] = content["system"]
        tools = request.tools
        if sent is None or start == 0 or (sent[2] is not tools and sent[3] != content["tools"]):
            delta["tools"] = content["tools"]
        self._sent = (len(messages), content["system"], tools, content["tools"])
        originals = request.messages
        history = len(originals) - len(self.state.messages)
        state_text = self._state_text

        def text() -> str:
            items = ",".join(
                [
                    state_text.item_text("messages", i - history, originals[i])
                    if i >= history and type(originals[i]) is dict
                    else json_text(messages[i])
                    for i in range(start, len(originals))
                ]
            )
            text = f'{{"messages_from":{start},"messages":[{items}]'
            if "system" in delta:
                text += ',"system":' + json_text(delta["system"])
            if "tools" in delta:
                text += ',"tools":' + schemas_text(tools)
            return text + "}"

        return PreparedJSON(delta, text)

    def _end_attempt(self, kind: str, link: ModelLink, payload: dict[str, Any]) -> None:
        attempt = self.state.attempt
        self.state.attempt = None
        if self.journal.recording:  # no payload to build for a run that does not record
            self.journal.note(
                kind,
                {"model": link.name, **payload},
                step=self.state.steps + 1,
                attempt_id=None if attempt is None else attempt.get("id"),
            )
        if attempt is not None:
            self._last_attempt = attempt.get("id")

    def _note_model(self, kind: str, link: ModelLink, payload: dict[str, Any]) -> None:
        if self.journal.recording:
            self.journal.note(
                kind,
                {"model": link.name, **payload},
                step=self.state.steps,
                attempt_id=self._last_attempt,
            )

    def _request(self, link: ModelLink, arrived: asyncio.Event | None) -> ModelRequest:
        attempt_id = f"att_{id_hex()}"
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
            on_first_event=None if arrived is None else arrived.set,
        )

    def _text_sink(self, attempt_id: str, arrived: asyncio.Event | None) -> Callable[[str], None]:
        """The `on_text` of one attempt: each piece becomes a `text_delta` event."""
        seq = 0

        def on_text(delta: str) -> None:
            nonlocal seq
            if not delta:
                return
            if arrived is not None:
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

    async def _within_deadline(self, awaitable: Any, timeout: float | None, model: str) -> Any:
        remaining = self._remaining()
        if remaining is not None and remaining <= 0:
            awaitable.close()
            raise _Deadline
        limits = [t for t in (remaining, timeout) if t is not None]
        if not limits:
            return await awaitable
        since = asyncio.get_running_loop().time()
        try:
            started = start(awaitable)  # an answer that needs no waiting needs no timer
            if started.done:
                return started.value
            async with asyncio.timeout_at(since + min(limits)):
                return await started
        except TimeoutError:
            if remaining is not None and (timeout is None or remaining <= timeout):
                raise _Deadline from None
            raise ModelError("timeout", timeout_message(model, timeout)) from None

    async def _retry_sleep(self, clock: dict[str, float], seconds: float) -> None:
        """Charge the wait before a retry to the model's clock, commit, then wait.

        The failed attempt and the charged wait are committed before the wait starts, so a
        worker that stops during it leaves the wait counted: a resumed run never gets it back.
        """
        remaining = self._remaining()
        if seconds > 0 and remaining is not None and seconds >= remaining:
            raise _Deadline
        clock["retry_waited"] = round(clock.get("retry_waited", 0.0) + seconds, 6)
        clock["call_failures"] = clock.get("call_failures", 0) + 1
        await self._commit([], phase=Boundary.MODEL_FAILED)
        if seconds <= 0:
            return
        if self.ctx.waits:
            await asyncio.sleep(seconds)
        else:  # a replay's wait passes at once, and counts towards the deadline as it did
            self._elapsed0 += seconds
