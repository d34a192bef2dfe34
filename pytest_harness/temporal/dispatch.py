"""The activities the `HarnessRun` workflow runs: a model attempt, a tool call, the grade.

Each is started from inside the workflow, deterministically: its input checked against the
payload limit first (in runs started by this version: the `payload-size-checks` patch marker),
its timeouts, its retry policy, and what its failure means for the run. A model attempt
(`ask_model`) is tried once: the engine owns model retries and fallbacks, and an attempt lost
with its worker comes back as `AttemptLost`, which the engine asks again. A tool call
(`call_tool`) has the call's execution key as its activity id, heartbeats, and has the tool's
replay policy as its retry policy; a call that fails the run raises `RunFails`. The grade
(`grade`) runs once the run has ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError

with workflow.unsafe.imports_passed_through():
    import pytest_harness.temporal.checks as checks
    import pytest_harness.temporal.conversation as conversation
    import pytest_harness.temporal.paging as paging
    from pytest_harness.errors import LiveModelBlocked
    from pytest_harness.models.base import ModelRequest
    from pytest_harness.runtime.driver_base import AttemptLost
    from pytest_harness.runtime.plan import ModelLink
    from pytest_harness.temporal.answers import named_error, request_payload
    from pytest_harness.temporal.conversation import UNKNOWN

__all__ = ["RunFails", "ask_model", "call_tool", "grade"]

_ONCE = RetryPolicy(maximum_attempts=1)
_SAFE_ATTEMPTS = 5
"""How often a `safe` or `idempotent` call is tried before the run fails."""


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Take a cancelled attempt's outcome, which nobody awaits any more."""
    if not task.cancelled():
        task.exception()


def _sizes_checked() -> bool:
    """Whether this run checks what it sends against the payload limit before sending it.

    True for a run started by this version (a marker in its history says so); False for a run
    in flight from an earlier version, whose history scheduled what it sent unchecked: checking
    now could replay it as another command (a nondeterminism error).
    """
    return workflow.patched("payload-size-checks")


class RunFails(Exception):
    """A tool call that ends the run `failed`, with an error of type `kind`."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


async def grade(
    bare: dict[str, Any], *, conf: Mapping[str, Any], wire_conf: dict[str, Any]
) -> None:
    """Grade the ended run once (online evals, DESIGN §15): its samples go to `state:`.

    The run has ended already (readers and updates see it so); a grader or a store that
    fails is logged by the worker and never changes the run.
    """
    given = {"snapshot": bare, "conf": wire_conf}
    size = paging.encoded_size(given)
    if size > paging.PAYLOAD_LIMIT and _sizes_checked():
        workflow.logger.warning(
            "online evals: run %s was not graded: %s",
            bare["run_id"],
            paging.too_large("its state", size),
        )
        return
    try:
        await workflow.execute_activity(
            "harness_grade",
            given,
            start_to_close_timeout=timedelta(hours=1),
            heartbeat_timeout=timedelta(seconds=conf["lease"]),
            retry_policy=RetryPolicy(
                maximum_attempts=3,
                initial_interval=timedelta(milliseconds=200),
                non_retryable_error_types=list(checks.FATAL),
            ),
        )
    except ActivityError:
        workflow.logger.warning("online evals: run %s was not graded", bare["run_id"])


def _blocked(cause: ApplicationError) -> LiveModelBlocked | None:
    """The `LiveModelBlocked` a model activity's worker raised, rebuilt from its details."""
    details = tuple(cause.details)
    if (
        len(details) == 3
        and all(isinstance(d, str) for d in details[:2])
        and (details[2] is None or isinstance(details[2], str))
    ):
        return LiveModelBlocked(*details)
    return None


async def ask_model(
    link: ModelLink,
    request: ModelRequest,
    first: Mapping[str, float] | None,
    *,
    sent_so_far: conversation.Sent,
    conf: Mapping[str, Any],
    wire_conf: dict[str, Any],
) -> dict[str, Any]:
    """Run one model attempt as the `harness_model` activity; its answer.

    Tried once (the engine retries and falls back itself); an attempt lost with its worker
    (heartbeat or start-to-close timeout, a worker that shut down) raises `AttemptLost`; a
    failure of the activity itself (another spec digest) ends the run `failed` with its type;
    a worker that may not call a live model refuses the attempt, which raises the
    `LiveModelBlocked` it raised there (rebuilt from the failure's details, in the history).
    The model's `timeout` and the run's deadline are the engine's own timers here, which
    cancel the activity.
    """
    timeout = link.spec.timeout
    close = timeout + 30.0 if timeout is not None else 24 * 3600.0
    for full in (False, True):
        wire = sent_so_far.wire(request.messages, full=full)
        given = {
            "request": request_payload(request, wire),
            "first_event": None if first is None else dict(first),
            "conf": wire_conf,
        }
        size = paging.encoded_size(given)
        if size > paging.PAYLOAD_LIMIT and _sizes_checked():
            sent = "the whole conversation" if wire["known"] == 0 else "the new messages"
            what = f"the request to model {link.name} ({sent}, turn {request.turn})"
            exc = paging.too_large(what, size)
            raise named_error(type(exc).__name__, str(exc))
        handle = workflow.start_activity(
            "harness_model",
            given,
            result_type=dict,
            start_to_close_timeout=timedelta(seconds=close),
            heartbeat_timeout=timedelta(seconds=conf["lease"]),
            retry_policy=_ONCE,
        )
        try:
            answer: dict[str, Any] = await asyncio.shield(handle)
        except asyncio.CancelledError:  # the engine's timer (model timeout, deadline) fired
            handle.cancel()
            handle.add_done_callback(_retrieved)
            raise
        except ActivityError as exc:
            cause = exc.cause
            if isinstance(cause, TimeoutError):
                what = cause.type.name.lower().replace("_", "-") if cause.type else "a"
                raise AttemptLost(
                    f"the worker running the call was lost ({what} timeout)"
                ) from None
            if isinstance(cause, ApplicationError):
                if cause.type == UNKNOWN and not full:
                    continue  # that worker did not hold the conversation: send it all
                blocked = _blocked(cause) if cause.type == LiveModelBlocked.__name__ else None
                if blocked is not None:
                    # the worker may not call the live model: the run fails as a local one
                    raise blocked from None
                # a wrong spec digest, a bug: the run fails
                raise named_error(cause.type or "Error", cause.message) from None
            # cancelled by its worker shutting down: the attempt is lost with it
            raise AttemptLost(f"the call's worker stopped without an answer ({cause})") from None
        sent_so_far.sent(request.messages, wire)
        return answer
    raise AssertionError("unreachable: a full conversation is never unknown")


async def call_tool(
    handoff: dict[str, Any],
    snap: Mapping[str, Any],
    *,
    conf: Mapping[str, Any],
    wire_conf: dict[str, Any],
) -> dict[str, Any]:
    """Run one tool call as an activity; the next step's operation (`RunFails`: the run failed)."""
    call = handoff["call"]
    manual = handoff["replay"] == "manual"
    limits = [t for t in (handoff["timeout"], handoff["remaining"]) if t is not None]
    # the tool's own timeout ends inside the activity as a `timeout` outcome; the margin
    # lets it, so Temporal's start-to-close only ends an attempt nobody reports on
    close = min(limits) + 30.0 if limits else 7 * 24 * 3600.0
    started = workflow.time()
    given = {
        "call": call,
        "run_id": snap["run_id"],
        "task": snap["task"],
        "principal": snap["principal"],
        "record": bool(snap.get("record")),
        "remaining": handoff["remaining"],
        "conf": wire_conf,
    }
    size = paging.encoded_size(given)
    if size > paging.PAYLOAD_LIMIT and _sizes_checked():
        exc = paging.too_large(f"the call of tool {call['name']} (its arguments)", size)
        raise RunFails(type(exc).__name__, str(exc))
    try:
        answer = await workflow.execute_activity(
            "harness_tool",
            given,
            result_type=dict,
            activity_id=call["key"],
            start_to_close_timeout=timedelta(seconds=close),
            heartbeat_timeout=timedelta(seconds=conf["lease"]),
            retry_policy=RetryPolicy(
                maximum_attempts=1 if manual else _SAFE_ATTEMPTS,
                initial_interval=timedelta(milliseconds=200),
                non_retryable_error_types=list(checks.FATAL),
            ),
        )
    except ActivityError as exc:
        if manual and not checks.fatal(exc):
            # the attempt was lost (its worker died): whether the tool ran is unknown
            return {"op": "drive", "interrupted": True}
        raise _failure(exc) from None
    return {
        "op": "drive",
        "outcome": {
            "key": call["key"],
            "outcome": paging.outcome_of(answer["outcome"]),
            "previous": handoff["previous"],
            "seconds": workflow.time() - started,
            "artifacts": answer.get("artifacts") or [],
        },
    }


def _failure(exc: ActivityError) -> RunFails:
    """The run's failure for the activity's error (a wrong spec digest, a lost call)."""
    cause = exc.cause if exc.cause is not None else exc
    kind = cause.type if isinstance(cause, ApplicationError) and cause.type else "Error"
    return RunFails(kind, str(getattr(cause, "message", cause)))
