"""The parts of a `Recording`: model turns, tool results and approval decisions.

Plain data, below every module that reads or writes recordings (the golden files, the `.hx`
reader), so those never import `recording.model`, whose `Recording.load` imports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ApprovalDecision", "ModelTurn", "ToolResult"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelTurn:
    """One model request and the answer the run used (or the error it got).

    `parts` holds the digests of the request's system prompt, tool schemas and messages (what
    a replay compares, part by part), and `deny_messages` when the messages tell the model a
    deny message that redaction changes (`runtime.request_digests`); `digest` is the digest of
    the whole request, the only one a `@1` golden file kept (empty when the turn came from a
    `@2` file).
    """

    model: str
    digest: str
    answer: Mapping[str, Any]
    request: Mapping[str, Any] | None = None
    parts: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult:
    """A tool call the run made and its raw outcome."""

    name: str
    args: Mapping[str, Any]
    outcome: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalDecision:
    """An approver's answer to one tool call."""

    tool: str
    args: Mapping[str, Any]
    rule: str | None
    decision: str
    approver: Mapping[str, Any]
    reason: str | None = None
