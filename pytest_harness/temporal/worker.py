"""`Worker`: hosts one spec's `HarnessRun` workflows and activities on a Temporal task queue.

It is identified as `<name>@<spec digest>`. A run started for another digest ends `failed`
with an error naming both (a non-retryable activity failure), unless the digest is accepted
(`accept=`, the CLI's `--accept DIGEST`).
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

from pytest_harness.evals.online import OnlineEvals
from pytest_harness.runtime.harness import Harness
from pytest_harness.runtime.principal import Principal
from pytest_harness.store.base import StoredArtifact
from pytest_harness.temporal.client import connect
from pytest_harness.temporal.records import result_of
from pytest_harness.temporal.segment import drive_segment
from pytest_harness.temporal.workflow import HarnessRun
from pytest_harness.tools.context import ToolContext

__all__ = ["Worker"]

_PASSTHROUGH = ("pytest_harness", "pydantic", "pydantic_core", "cel", "yaml", "jsonschema")
"""Modules the workflow sandbox imports once, outside it (the workflow reads none of their
state that changes; the run loop itself runs in activities)."""


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


class _Activities:
    """The activities of one spec: `harness_step` (the loop) and `harness_tool` (one call)."""

    def __init__(self, harness: Harness, accept: Iterable[str]) -> None:
        self.harness = harness
        self.accept = frozenset(accept)
        self.digest = harness.spec.digest
        self.lease = harness.spec.document.state.lease

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

    @activity.defn(name="harness_step")
    async def step(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Drive the run from the workflow's snapshot to its next boundary."""
        snapshot, conf = payload["snapshot"], payload["conf"]
        self._check(conf, snapshot["task"])
        async with _heartbeating(self.lease / 3):
            return await drive_segment(
                self.harness.plans.tasks[snapshot["task"]],
                snapshot,
                payload["op"],
                spec_digest=str(conf["spec_digest"]),
                history=list(conf.get("history") or ()),
                artifacts=self.harness.store,
            )

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
        kept = []
        if payload.get("record", True):
            # the bytes go to the worker's `state:` store, never into Temporal's history; the
            # step that takes the outcome journals their references (as a local run does)
            for artifact in outcome.artifacts:
                await self.harness.store.put_artifact(
                    StoredArtifact(
                        sha256=artifact.sha256,
                        media_type=artifact.media_type,
                        data=artifact.data,
                        name=artifact.name,
                    )
                )
                kept.append(artifact.sha256)
        return {
            "outcome": outcome.to_dict(),
            "seconds": time.monotonic() - started,
            "artifacts": kept,
        }


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
        runner = SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(*_PASSTHROUGH)
        )
        async with _TemporalWorker(
            client,
            task_queue=execution.task_queue,
            workflows=[HarnessRun],
            activities=[acts.step, acts.tool, acts.grade],
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
