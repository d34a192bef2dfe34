"""How long a run may wait on a model: retry waits within a budget, and the first event.

Both are measured in the run's checkpoint state (`RunState.clocks`, `RunState.waiting`), so a
run resumed in another process, after a crash or an approval, continues with what is left:

* `retry_budget`: the seconds of waits before retries (backoff, a server's `Retry-After`) one
  run may spend on one model, over all its steps. A wait is charged, and committed, before it
  starts; a retry whose wait would pass the budget is not made, and the error goes on to the
  fallback models (or fails the run) with a message that says so.
* `first_event_timeout`: how long an attempt may wait for its first byte (its first event when
  streamed). The attempt's start is committed; so is the first event's arrival. An attempt a
  stopped worker left waiting counts, up to that worker's last lease renewal, against the
  attempt the resumed run sends in its place.
"""

from __future__ import annotations

import asyncio
import contextlib
from enum import Enum
from typing import Any

from pytest_harness.errors import ModelError
from pytest_harness.models.base import ModelProvider

__all__ = [
    "FirstEvent",
    "RetryClock",
    "budget_message",
    "first_event",
    "first_event_message",
    "first_event_prefix",
    "timeout_message",
]

_SLACK = 1e-9
"""Floating-point slack when a wait exactly fills the budget."""


class RetryClock:
    """The waits before the retries of one model in one step, within its `retry_budget`.

    After each failed attempt that may be retried, the run loop asks `stop` and then `wait`;
    both use one delay per attempt, asked of the provider once, so a jittered backoff is the
    same number for both. Attempts are numbered from the failures of this call that a stopped
    worker already committed (`call_failures`), so a resumed call keeps its `retries` count
    and its backoff too. `spent` is set when the budget stopped the retries: `(seconds waited,
    the wait the next retry needed)`.
    """

    def __init__(
        self,
        provider: ModelProvider,
        *,
        attempts: int,
        budget: float,
        clock: dict[str, float],
    ) -> None:
        self.provider = provider
        self.attempts = attempts
        self.budget = budget
        self.clock = clock
        """The model's figures in the run's state; `retry_waited` is what it spent so far."""
        self.before = int(clock.get("call_failures", 0))
        """Failed attempts of this call committed by an earlier drive of the run."""
        self.spent: tuple[float, float] | None = None
        self._delays: dict[int, float] = {}

    def delay(self, attempt: int, error: ModelError | None) -> float:
        """The provider's delay before the retry that follows attempt `attempt` (1-based)."""
        number = self.before + attempt
        if number not in self._delays:
            self._delays[number] = max(0.0, self.provider.retry_delay(number, error))
        return self._delays[number]

    def wait(self, attempt: int, error: ModelError | None) -> float:
        """The wait after attempt `attempt` failed: nothing after the last one."""
        if self.before + attempt >= self.attempts:
            return 0.0
        return self.delay(attempt, error)

    def stop(self, attempt: int, error: ModelError | None) -> bool:
        """Whether no retry follows attempt `attempt`: the last, or its wait passes the budget."""
        if self.before + attempt >= self.attempts:
            return True
        delay = self.delay(attempt, error)
        waited = self.clock.get("retry_waited", 0.0)
        if waited + delay > self.budget + _SLACK:
            self.spent = (waited, delay)
            return True
        return False


def budget_message(model: str, budget: float, spent: tuple[float, float]) -> str:
    """Why a model's retries stopped before its `retries` count did."""
    waited, delay = spent
    return (
        f"retry budget of model {model!r} spent: {waited:g}s of its {budget:g}s waited in this "
        f"run, and the next retry would wait {delay:g}s more (models.{model}.retry_budget)"
    )


def timeout_message(model: str, timeout: float | None) -> str:
    """The `timeout` error of a model call that got no answer within the model's `timeout`.

    A replay reads it back to tell this harness's own timeout from a provider's.
    """
    return f"model {model} did not answer within {timeout}s"


def first_event_message(model: str, timeout: float, carried: float) -> str:
    """The `timeout` error of an attempt that got no first byte or event in time.

    It starts with `first_event_prefix(model)` and the timeout (`0.3s`), then says how much of
    it an earlier attempt waited, if any: a replay reads it back to tell the timeout it had.
    """
    earlier = (
        f", {carried:.3g}s of it waited by an attempt a stopped worker left unanswered"
        if carried > 0
        else ""
    )
    return f"{first_event_prefix(model)}{timeout:g}s{earlier}"


def first_event_prefix(model: str) -> str:
    """What every `first_event_message` of `model` starts with, up to the timeout."""
    return f"model {model!r} sent no first byte or event within its first_event_timeout of "


class FirstEvent(Enum):
    """How a model call met its first-event deadline."""

    ANSWERED = "answered"
    """The call ended (with an answer or an error) before anything else was seen."""
    STARTED = "started"
    """The reply started (`arrived` was set) and the call goes on."""
    NONE = "none"
    """Nothing in time: the call was cancelled."""


async def first_event(
    call: asyncio.Future[Any], arrived: asyncio.Event, timeout: float
) -> FirstEvent:
    """Wait at most `timeout` seconds for `call` to end or `arrived` to be set.

    On `NONE` the call is cancelled and awaited; if the caller is cancelled meanwhile, the
    call is cancelled too. The call's own outcome is left in it, for the caller to await.
    """
    signal = asyncio.ensure_future(arrived.wait())
    try:
        done, _ = await asyncio.wait(
            {call, signal}, timeout=max(0.0, timeout), return_when=asyncio.FIRST_COMPLETED
        )
    except BaseException:
        call.cancel()
        raise
    finally:
        signal.cancel()
    if call in done:
        return FirstEvent.ANSWERED
    if done:
        return FirstEvent.STARTED
    call.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await call
    return FirstEvent.NONE
