"""The tools layer: registry and schemas, argument validation, invocation and its context."""

from pytest_harness.tools.context import ToolContext, current_tool_context
from pytest_harness.tools.registry import (
    InvalidToolArguments,
    OutcomeKind,
    Tool,
    ToolOutcome,
    ToolSet,
    ToolSignatureError,
)

__all__ = [
    "InvalidToolArguments",
    "OutcomeKind",
    "Tool",
    "ToolContext",
    "ToolOutcome",
    "ToolSet",
    "ToolSignatureError",
    "current_tool_context",
]
