"""`Worker`: hosts one spec's `HarnessRun` workflows and activities on a Temporal task queue.

It is identified as `<name>@<spec digest>`, and registers its plans in `hosted`, where the
workflow's run loop finds them. A run started for another digest ends `failed` with an error
naming both (`SpecDigestMismatch`, never retried), unless the digest is accepted (`accept=`,
the CLI's `--accept DIGEST`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker as _TemporalWorker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.workflow import NondeterminismError

import pytest_harness.temporal.hosted as hosted
from pytest_harness.errors import LiveModelBlocked, ModelError
from pytest_harness.evals.online import OnlineEvals
from pytest_harness.models.live import check_live
from pytest_harness.principal import Principal
from pytest_harness.runtime.harness import Harness
from pytest_harness.runtime.retrying import FirstEvent, first_event, first_event_message
from pytest_harness.runtime.tool_calls import keep_artifacts
from pytest_harness.temporal.answers import answer_of, request_of
from pytest_harness.temporal.client import connect
from pytest_harness.temporal.conversation import UNKNOWN, Conversations
from pytest_harness.temporal.paging import PAYLOAD_LIMIT, encoded_size, too_large, wire_outcome
from pytest_harness.temporal.records import result_of
from pytest_harness.temporal.workflow import HarnessRun
from pytest_harness.tools.context import ToolContext

__all__ = ["Worker"]

_PASSTHROUGH = (
    "pytest_harness",
    "pydantic",
    "pydantic_core",
    "cel",
    "yaml",
    "jsonschema",
)
"""Modules the workflow sandbox imports once, outside it: the run loop runs in the workflow on
these, deterministically (its clock and ids are the workflow's, its plan is built once per
worker process and never changed by a workflow, and it does no I/O)."""


@contextlib.asynccontextmanager
async def _heartbeating(every: float) -> AsyncIterator[None]:
    """Heartbeat the current activity about every `every` seconds while the block runs."""

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(every)

    task = asyncio.ensure_future(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@activity.defn(name="harness_end")
async def _end() -> None:
    """Nothing: the local activity after which a run's workflow completes (`HarnessRun._apart`)."""


class _Activities:
    """The activities of one spec: `harness_model` (an attempt), `harness_tool` (a call)."""

    def __init__(self, harness: Harness, accept: Iterable[str]) -> None:
        self.harness = harness
        self.accept = tuple(accept)
        self.digest = harness.spec.digest
        self.lease = harness.spec.document.state.lease
        self.conversations = Conversations()
        """The conversations of the runs this worker asked a model for last (their tails)."""

    def host(self) -> None:
        """Register the spec where the workflow finds its plans, its CEL compiled first.

        A spec read from the spec cache compiles each rule and guard condition on first use;
        here that use is now, in this thread, before the worker polls. Workflow tasks run on
        threads of their own, several at once (a new worker replays every run it takes over),
        and none of them then compiles an expression or loads the CEL extension.
        """
        spec = self.harness.spec
        for programs in (spec.rule_programs, spec.guard_programs):
            dict(programs)  # each program, compiled
        hosted.host(
            self.harness.plans,
            name=spec.document.name,
            digest=self.digest,
            path=str(spec.path),
            accept=self.accept,
        )

    def _check(self, conf: Mapping[str, Any], task: str) -> None:
        wanted = str(conf.get("spec_digest") or "")
        if wanted != self.digest and wanted not in self.accept:
            name = self.harness.spec.document.name
            raise ApplicationError(
                f"this run was started for spec {name}@{wanted}, but the worker hosts "
                f"{name}@{self.digest} ({self.harness.spec.path}); start a worker on that spec, "
                f"or this one with --accept {wanted}",
                type="SpecDigestMismatch",
                non_retryable=True,
            )
        if task not in self.harness.plans.tasks:
            raise ApplicationError(
                f"the worker's spec {self.harness.spec.path} has no task {task!r}",
                type="UnknownTask",
                non_retryable=True,
            )

    @activity.defn(name="harness_model")
    async def model(self, payload: dict[str, Any]) -> dict[str, Any]:
        """One model attempt: the provider asked once, heartbeating; its answer or error.

        Text the provider streams is returned as `deltas`; with `first_event` (`limit`,
        `carried`) the provider is held to its first-event timeout here, and `first_event`
        in the answer says when the reply started. A live model this worker may not call
        (`HARNESS_ALLOW_LIVE=0`, `models.live.check_live`) fails the activity for good with
        `LiveModelBlocked` (its provider, model and hint as details): the run fails with it.
        """
        wanted = payload["request"]
        self._check(payload["conf"], wanted["task"])
        plan = self.harness.plans.tasks[wanted["task"]]
        link = next(link for link in plan.models if link.name == wanted["model"])
        try:
            check_live(link.provider, link.name)
        except LiveModelBlocked as exc:
            raise ApplicationError(
                str(exc),
                exc.provider,
                exc.model,
                exc.hint,
                type=type(exc).__name__,
                non_retryable=True,
            ) from None
        deltas: list[str] = []
        arrived = asyncio.Event()
        started = time.monotonic()
        seen: list[float] = []

        def on_first_event() -> None:
            if not seen:
                seen.append(time.monotonic() - started)
            arrived.set()

        def on_text(piece: str) -> None:
            if piece:
                deltas.append(piece)
                on_first_event()

        messages = self.conversations.messages(str(wanted["run_id"]), wanted["conversation"])
        if messages is None:  # another worker served the run's last attempt: send it all
            raise ApplicationError(
                f"this worker does not hold the conversation of run {wanted['run_id']}",
                type=UNKNOWN,
                non_retryable=True,
            )
        request = request_of(
            plan,
            wanted,
            messages,
            on_text=None if link.provider.live else on_text,
            on_first_event=on_first_event,
        )
        first = payload.get("first_event")
        outcome: Any
        async with _heartbeating(self.lease / 3):
            call = asyncio.ensure_future(link.provider.complete(request))
            try:
                if first is not None:
                    left = float(first["limit"]) - float(first["carried"])
                    if await first_event(call, arrived, left) is FirstEvent.NONE:
                        message = first_event_message(
                            link.name, float(first["limit"]), float(first["carried"])
                        )
                        raise ModelError("timeout", message, model=link.name)
                outcome = await call
            except asyncio.CancelledError:
                call.cancel()
                raise
            except Exception as exc:  # the engine decides what a failed attempt means
                outcome = exc
        answer = answer_of(outcome)
        answer["deltas"] = deltas
        answer["first_event"] = seen[0] if seen else time.monotonic() - started
        _check_fits(answer, f"the answer of model {link.name}")
        return answer

    @activity.defn(name="harness_grade")
    async def grade(self, payload: dict[str, Any]) -> int:
        """Grade an ended run with the spec's online evals; the number of samples stored."""
        snapshot, conf = payload["snapshot"], payload["conf"]
        self._check(conf, snapshot["task"])
        evals = self.harness.evals
        if not isinstance(evals, OnlineEvals):
            return 0
        async with _heartbeating(self.lease / 3):
            samples = await evals.grade(
                result_of(snapshot), str(snapshot["input"]), snapshot["principal"]
            )
        return len(samples)

    @activity.defn(name="harness_tool")
    async def tool(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Invoke one tool call, heartbeating; attempt n of Temporal is attempt n of the call."""
        call = payload["call"]
        self._check(payload["conf"], payload["task"])
        tool = self.harness.plans.tasks[payload["task"]].tools[call["name"]]
        context = ToolContext(
            tool=call["name"],
            execution_key=call["key"],
            run_id=payload["run_id"],
            principal=Principal.from_dict(dict(payload["principal"])),
            attempt=int(call["attempt"]) + activity.info().attempt - 1,
        )
        started = time.monotonic()
        remaining = payload.get("remaining")
        async with _heartbeating(self.lease / 3):
            # in a thread of its own, so a tool that blocks never stops the heartbeats
            outcome = await asyncio.to_thread(
                asyncio.run,
                tool.invoke(call["args"], context, overall_timeout=remaining),
            )
        if payload.get("record"):  # the journal refers to them; the worker's store keeps them
            await keep_artifacts(self.harness.store, outcome)
        answer = {
            "outcome": wire_outcome(outcome.to_dict()),
            "seconds": time.monotonic() - started,
            "artifacts": [
                {"sha256": a.sha256, "media_type": a.media_type, "name": a.name}
                for a in outcome.artifacts
            ],
        }
        _check_fits(answer, f"the result of tool {call['name']}")
        return answer


def _check_fits(answer: Mapping[str, Any], what: str) -> None:
    """Fail the activity for good (`PayloadTooLarge`) when its answer is over one payload.

    Temporal would refuse to take the answer (and retry the activity); instead the run ends
    `failed` with the error, naming `what`, the size and the limit.
    """
    size = encoded_size(answer)
    if size > PAYLOAD_LIMIT:
        exc = too_large(what, size)
        raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True)


class Worker:
    """Hosts the runs of one loaded spec (`execution.use: temporal`) until `stop()`.

    `harness` is a `pytest_harness.load(...)` result (the worker uses its spec, tools and
    models); `accept` names other spec digests whose runs it also drives.
    """

    def __init__(self, harness: Harness, *, accept: Iterable[str] = ()) -> None:
        self.harness = harness
        self.accept = tuple(accept)
        self.identity = f"{harness.spec.document.name}@{harness.spec.digest}"
        """`<name>@<spec digest>`: the spec this worker hosts."""
        self._stop = asyncio.Event()

    async def run(self, *, ready: Callable[[], None] | None = None) -> None:
        """Poll the spec's task queue until `stop()` is called (or the task is cancelled).

        `ready` is called once the worker polls.
        """
        execution = self.harness.spec.document.execution
        client = await connect(self.harness.spec)
        acts = _Activities(self.harness, self.accept)
        acts.host()
        runner = SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(*_PASSTHROUGH)
        )
        async with _TemporalWorker(
            client,
            task_queue=execution.task_queue,
            workflows=[HarnessRun],
            activities=[acts.model, acts.tool, acts.grade, _end],
            workflow_runner=runner,
            identity=f"{self.identity} pid {os.getpid()}",
            sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
            # history that no longer replays fails the run's workflow (the client says so,
            # naming the run) instead of retrying its workflow task forever
            workflow_failure_exception_types=[NondeterminismError],
            graceful_shutdown_timeout=timedelta(seconds=1),
        ):
            if ready is not None:
                ready()
            await self._stop.wait()

    def stop(self) -> None:
        """Ask `run()` to return (its activities get a second to finish)."""
        self._stop.set()


async def serve(harness: Harness, *, accept: Iterable[str] = ()) -> int:
    """`pytest-harness worker` on Temporal: host the runs until SIGTERM or SIGINT; exit code 0.

    Says `worker <name>@<digest> ready on <address> …` on stderr once it polls.
    """
    host = Worker(harness, accept=accept)
    execution = harness.spec.document.execution
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, host.stop)

    def ready() -> None:
        print(
            f"worker {host.identity} ready on {execution.address} "
            f"(namespace {execution.namespace}, task queue {execution.task_queue})",
            file=sys.stderr,
            flush=True,
        )

    try:
        await host.run(ready=ready)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    return 0
