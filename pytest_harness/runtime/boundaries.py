"""The committed boundaries of a run, by name: the `phase` the `harness_checkpoint` hook gets.

Every write that advances a run is one of these, committed atomically (the run's status, its
checkpoint state and its events) before anything that follows it starts. The names are shared
by everything that reports boundaries, so one list here says what a run commits and when:

| phase | committed when | status after it |
| --- | --- | --- |
| `run.started` | the run is created (already leased to its worker) | `running` |
| `model.started` | a model attempt starts, when the model has a `first_event_timeout` | `running` |
| `model.first_event` | that attempt's first byte or stream event arrived | `running` |
| `model.failed` | an attempt failed and is retried (before the retry's wait) | `running` |
| `tool.dispatched` | a tool call's dispatch intent, before the tool is invoked | `running` |
| `tool.returned` | a tool call's raw result, right after it returns | `running` |
| `tool.resolved` | `Harness.resolve` settled an uncertain call | `running` / `paused` |
| `approval.requested` | the run waits for approvals it has just asked for | `awaiting_approval` |
| `tool.interrupted` | a crash left a `manual` call uncertain | `awaiting_resolution` |
| `run.suspended` | the run waits again for answers or resolutions still open | `awaiting_…` |
| `run.paused` | a pause request was acted on | `paused` |
| `run.ended` | the run ended | `completed`, `refused`, … |

A model answer has no boundary of its own: it is committed with the next one (the dispatch of
the first call it proposes, the approvals it needs, or the end of the run). Answering an
approval is recorded by the approval's own write; the run's next boundary follows when it
resumes.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Boundary"]


class Boundary(str, Enum):
    """A committed boundary of a run (see the module's table)."""

    RUN_STARTED = "run.started"
    MODEL_STARTED = "model.started"
    MODEL_FIRST_EVENT = "model.first_event"
    MODEL_FAILED = "model.failed"
    TOOL_DISPATCHED = "tool.dispatched"
    TOOL_RETURNED = "tool.returned"
    TOOL_RESOLVED = "tool.resolved"
    APPROVAL_REQUESTED = "approval.requested"
    TOOL_INTERRUPTED = "tool.interrupted"
    RUN_SUSPENDED = "run.suspended"
    RUN_PAUSED = "run.paused"
    RUN_ENDED = "run.ended"
