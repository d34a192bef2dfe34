"""pytest-harness: a durable agent harness runtime and the pytest kit that keeps it honest.

```python
import pytest_harness as ph

async with ph.load("harness.yaml", env="offline") as harness:
    result = await harness.run("orders", "Refund $250 on order A-1001.", principal="ann")
```

Importing the package is cheap: the spec loader, the run loop and the stores are imported when
first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_harness.errors import (
    ApprovalDenied,
    ArchiveError,
    ExecutionError,
    HarnessError,
    LiveModelBlocked,
    ModelError,
    RecordingError,
    ReplayDiverged,
    ResolutionError,
    RunAwaitingInput,
    RunBusy,
    RunCancelled,
    RunError,
    RunFailed,
    RunLimitReached,
    RunRefused,
    ScriptExhausted,
    SpecError,
    StoreError,
    UnknownExecutionKey,
    UnknownRun,
    UnknownTask,
)
from pytest_harness.runtime.principal import Principal
from pytest_harness.runtime.results import (
    ApprovalRequest,
    Call,
    PendingTool,
    RunResult,
    RunStatus,
    RunSummary,
    Usage,
)
from pytest_harness.runtime.trace import Decision, ToolCall, Trace

if TYPE_CHECKING:
    from pytest_harness import testing
    from pytest_harness.archive import (
        ArchiveIssue,
        BundleLimits,
        ExportPolicy,
        Playback,
        VerificationReport,
        export_incident,
        open_store,
        playback,
        verify_archive,
    )
    from pytest_harness.evals.checks import GradeInput, Verdict
    from pytest_harness.models.live import allow_live_models
    from pytest_harness.recording.model import Recording
    from pytest_harness.redaction import SecretPattern
    from pytest_harness.replay.report import ReplayReport
    from pytest_harness.runtime.harness import Harness, RunHandle, load
    from pytest_harness.spec.schema import ReplayPolicy
    from pytest_harness.store.base import Event, Sample
    from pytest_harness.tools.artifacts import Artifact
    from pytest_harness.tools.context import ToolContext, current_tool_context

__version__ = "0.1.0"

__all__ = [
    "ApprovalDenied",
    "ApprovalRequest",
    "ArchiveError",
    "ArchiveIssue",
    "Artifact",
    "BundleLimits",
    "Call",
    "Decision",
    "Event",
    "ExecutionError",
    "ExportPolicy",
    "GradeInput",
    "Harness",
    "HarnessError",
    "LiveModelBlocked",
    "ModelError",
    "PendingTool",
    "Playback",
    "Principal",
    "Recording",
    "RecordingError",
    "ReplayDiverged",
    "ReplayPolicy",
    "ReplayReport",
    "ResolutionError",
    "RunAwaitingInput",
    "RunBusy",
    "RunCancelled",
    "RunError",
    "RunFailed",
    "RunHandle",
    "RunLimitReached",
    "RunRefused",
    "RunResult",
    "RunStatus",
    "RunSummary",
    "Sample",
    "ScriptExhausted",
    "SecretPattern",
    "SpecError",
    "StoreError",
    "ToolCall",
    "ToolContext",
    "Trace",
    "UnknownExecutionKey",
    "UnknownRun",
    "UnknownTask",
    "Usage",
    "Verdict",
    "VerificationReport",
    "allow_live_models",
    "current_tool_context",
    "export_incident",
    "load",
    "open_store",
    "playback",
    "temporal",
    "testing",
    "verify_archive",
]

_LAZY = {
    "Event": "pytest_harness.store.base",
    "Sample": "pytest_harness.store.base",
    "GradeInput": "pytest_harness.evals.checks",
    "Verdict": "pytest_harness.evals.checks",
    "Harness": "pytest_harness.runtime.harness",
    "RunHandle": "pytest_harness.runtime.harness",
    "load": "pytest_harness.runtime.harness",
    "ReplayPolicy": "pytest_harness.spec.schema",
    "Recording": "pytest_harness.recording.model",
    "SecretPattern": "pytest_harness.redaction",
    "ReplayReport": "pytest_harness.replay.report",
    "ToolContext": "pytest_harness.tools.context",
    "current_tool_context": "pytest_harness.tools.context",
    "allow_live_models": "pytest_harness.models.live",
    "Artifact": "pytest_harness.tools.artifacts",
    **{
        name: "pytest_harness.archive"
        for name in (
            "ArchiveIssue",
            "BundleLimits",
            "ExportPolicy",
            "Playback",
            "VerificationReport",
            "export_incident",
            "open_store",
            "playback",
            "verify_archive",
        )
    },
}


def __getattr__(name: str) -> Any:
    if name in ("testing", "temporal"):  # submodules imported on first use
        import importlib

        return importlib.import_module("pytest_harness.testing")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_harness' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
