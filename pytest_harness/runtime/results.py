"""What a run returns: `RunResult` and the values it holds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from pytest_harness import errors
from pytest_harness.runtime.trace import Trace

__all__ = [
    "ApprovalRequest",
    "Call",
    "PendingTool",
    "RunResult",
    "RunStatus",
    "RunSummary",
    "Usage",
    "run_status",
]


class RunStatus(str, Enum):
    """Where a run is. `RunStatus.COMPLETED.value == "completed"`."""

    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    AWAITING_RESOLUTION = "awaiting_resolution"
    PAUSED = "paused"
    COMPLETED = "completed"
    REFUSED = "refused"
    LIMITED = "limited"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: RunStatus | str) -> RunStatus:
        """A status from itself or its value; `ValueError` listing the valid values."""
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(s.value for s in cls)
            raise ValueError(f"unknown run status {value!r} (valid: {valid})") from None

    @property
    def ended(self) -> bool:
        """Whether the run can never continue (completed, refused, limited, failed, cancelled)."""
        return self in _ENDED

    @property
    def suspended(self) -> bool:
        """Whether the run waits for a person (approval, resolution) or a resume (paused)."""
        return self in _SUSPENDED


_BY_VALUE: dict[object, RunStatus] = {status.value: status for status in RunStatus}


def run_status(value: str) -> RunStatus:
    """`RunStatus(value)`, looked up by value first (an `Enum` call costs ten times as much).

    A value that is no status is `RunStatus(value)`'s own `ValueError`.
    """
    try:
        return _BY_VALUE[value]
    except (KeyError, TypeError):  # not a status's value, or not hashable
        return RunStatus(value)


_ENDED = frozenset(
    {
        RunStatus.COMPLETED,
        RunStatus.REFUSED,
        RunStatus.LIMITED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
    }
)
_SUSPENDED = frozenset(
    {RunStatus.AWAITING_APPROVAL, RunStatus.AWAITING_RESOLUTION, RunStatus.PAUSED}
)


@dataclass(frozen=True, slots=True)
class Usage:
    """What a run spent: tokens, dollars (from the model's price), model steps and tool calls.

    `incomplete` is true when a model attempt failed after the provider may have charged for
    it (a server error, a time-out): the figures then count less than was spent. `truncated`
    counts the model answers cut at their token limit (each one's model decision says
    `incomplete`), whatever the model's `on_truncation` made of them.
    """

    tokens_in: int = 0
    tokens_out: int = 0
    usd: float = 0.0
    steps: int = 0
    tool_calls: int = 0
    incomplete: bool = False
    truncated: int = 0

    @property
    def tokens(self) -> int:
        """Input and output tokens together."""
        return self.tokens_in + self.tokens_out

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (`incomplete`, `truncated` only when set: plain usage reads as before)."""
        data: dict[str, Any] = {
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "usd": self.usd,
            "steps": self.steps,
            "tool_calls": self.tool_calls,
        }
        if self.incomplete:
            data["incomplete"] = True
        if self.truncated:
            data["truncated"] = self.truncated
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Usage:
        """Rebuild from `to_dict()`'s form."""
        return cls(
            tokens_in=int(data.get("tokens_in", 0)),
            tokens_out=int(data.get("tokens_out", 0)),
            usd=float(data.get("usd", 0.0)),
            steps=int(data.get("steps", 0)),
            tool_calls=int(data.get("tool_calls", 0)),
            incomplete=bool(data.get("incomplete", False)),
            truncated=int(data.get("truncated", 0)),
        )


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call the model proposed: the tool's name and its arguments."""

    name: str
    args: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A persisted request for a decision on one pending tool call."""

    approval_id: str
    execution_key: str
    tool: str
    args: Mapping[str, Any]
    rule_id: str
    approvers: tuple[str, ...]
    requested_by: str


@dataclass(frozen=True, slots=True)
class PendingTool:
    """A tool call the run waits on: for an `approval`, or `uncertain` after a crash."""

    execution_key: str
    call: Call
    status: Literal["approval", "uncertain"]
    approval_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """What a run came to, read from the store: status, output, usage, pending work and trace."""

    run_id: str
    session_id: str
    task: str
    status: RunStatus
    output: str | None = None
    error: Mapping[str, str] | None = None
    usage: Usage = field(default_factory=Usage)
    approval: ApprovalRequest | None = None
    pending: tuple[PendingTool, ...] = ()
    trace: Trace = field(default_factory=Trace)
    labels: Mapping[str, str] = field(default_factory=dict)
    limit: str | None = None

    @property
    def ok(self) -> bool:
        """The run completed."""
        return self.status is RunStatus.COMPLETED

    @property
    def failed(self) -> bool:
        """The run failed."""
        return self.status is RunStatus.FAILED

    @property
    def needs_input(self) -> bool:
        """The run waits for an approval or for the resolution of an uncertain tool call."""
        return self.status in (RunStatus.AWAITING_APPROVAL, RunStatus.AWAITING_RESOLUTION)

    def raise_for_status(self) -> RunResult:
        """Return this result when the run completed, else raise the matching `RunError`."""
        status = self.status
        if status is RunStatus.COMPLETED:
            return self
        exc: type[errors.RunError]
        if status is RunStatus.FAILED:
            exc = errors.RunFailed
        elif status is RunStatus.REFUSED:
            exc = errors.RunRefused
        elif status is RunStatus.LIMITED:
            exc = errors.RunLimitReached
        elif status is RunStatus.CANCELLED:
            exc = errors.RunCancelled
        else:  # awaiting approval or resolution, paused, or still running
            exc = errors.RunAwaitingInput
        raise exc(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary:
    """One line of `Harness.runs()`."""

    run_id: str
    session_id: str
    task: str
    status: RunStatus
    tenant: str | None
    principal: str
    created_at: float
    updated_at: float
