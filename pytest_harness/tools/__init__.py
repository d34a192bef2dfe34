"""The tools layer: registry and schemas, argument validation, invocation and its context.

The names are imported from their modules on first use, so a tool's module that imports
`pytest_harness.tools.context` does not import the registry (and docstring parsing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_LAZY = {
    "ToolContext": "pytest_harness.tools.context",
    "current_tool_context": "pytest_harness.tools.context",
    **dict.fromkeys(
        (
            "InvalidToolArguments",
            "OutcomeKind",
            "Tool",
            "ToolOutcome",
            "ToolSet",
            "ToolSignatureError",
        ),
        "pytest_harness.tools.registry",
    ),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_harness.tools' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
