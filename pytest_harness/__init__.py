"""pytest-harness: a durable agent harness runtime and the pytest kit that keeps it honest.

```python
import pytest_harness as ph

async with ph.load("harness.yaml", env="offline") as harness:
    result = await harness.run("orders", "Refund $250 on order A-1001.", principal="ann")
```

Importing the package is cheap (about a millisecond): every public name, down to the errors, is
imported from its module when first used, so `import pytest_harness` and the pytest plugin load
no dependency (pydantic, yaml, rich, ...) until a name that needs it is touched.
"""

from __future__ import annotations

TYPE_CHECKING = False
"""`typing.TYPE_CHECKING` without importing `typing` (mypy knows the name)."""

if TYPE_CHECKING:
    from typing import Any

    from pytest_harness import temporal, testing
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
        SessionDenied,
        SpecError,
        StoreError,
        UnknownExecutionKey,
        UnknownRun,
        UnknownTask,
    )
    from pytest_harness.evals.checks import GradeInput, Verdict
    from pytest_harness.loading import load
    from pytest_harness.models.live import allow_live_models
    from pytest_harness.principal import Principal
    from pytest_harness.recording.model import Recording
    from pytest_harness.redaction import SecretPattern
    from pytest_harness.replay.report import ReplayReport
    from pytest_harness.runtime.harness import Harness, RunHandle
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
    "SessionDenied",
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

_ERRORS = (
    "ApprovalDenied",
    "ArchiveError",
    "ExecutionError",
    "HarnessError",
    "LiveModelBlocked",
    "ModelError",
    "RecordingError",
    "ReplayDiverged",
    "ResolutionError",
    "RunAwaitingInput",
    "RunBusy",
    "RunCancelled",
    "RunError",
    "RunFailed",
    "RunLimitReached",
    "RunRefused",
    "ScriptExhausted",
    "SessionDenied",
    "SpecError",
    "StoreError",
    "UnknownExecutionKey",
    "UnknownRun",
    "UnknownTask",
)
_RESULTS = (
    "ApprovalRequest",
    "Call",
    "PendingTool",
    "RunResult",
    "RunStatus",
    "RunSummary",
    "Usage",
)
_ARCHIVE = (
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
_LAZY: dict[str, str] = {
    **dict.fromkeys(_ERRORS, "pytest_harness.errors"),
    **dict.fromkeys(_RESULTS, "pytest_harness.runtime.results"),
    **dict.fromkeys(_ARCHIVE, "pytest_harness.archive"),
    "Principal": "pytest_harness.principal",
    "Decision": "pytest_harness.runtime.trace",
    "ToolCall": "pytest_harness.runtime.trace",
    "Trace": "pytest_harness.runtime.trace",
    "Event": "pytest_harness.store.base",
    "Sample": "pytest_harness.store.base",
    "GradeInput": "pytest_harness.evals.checks",
    "Verdict": "pytest_harness.evals.checks",
    "Harness": "pytest_harness.runtime.harness",
    "RunHandle": "pytest_harness.runtime.harness",
    "load": "pytest_harness.loading",
    "ReplayPolicy": "pytest_harness.spec.schema",
    "Recording": "pytest_harness.recording.model",
    "SecretPattern": "pytest_harness.redaction",
    "ReplayReport": "pytest_harness.replay.report",
    "ToolContext": "pytest_harness.tools.context",
    "current_tool_context": "pytest_harness.tools.context",
    "allow_live_models": "pytest_harness.models.live",
    "Artifact": "pytest_harness.tools.artifacts",
}
"""Where each public name lives: imported from there on first use (PEP 562), then cached."""

_SUBMODULES = frozenset({"testing", "temporal"})


def __getattr__(name: str) -> Any:
    import importlib

    if name in _SUBMODULES:  # imported on first use; the import binds the attribute
        return importlib.import_module(f"pytest_harness.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_harness' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
