"""JSON texts of journal payloads put together from parts already encoded (same text).

A recorded run's larger journal entries repeat what is encoded anyway: the checkpoint holds
the state's trace, `model.started` the messages the state holds and the task's tool schemas,
`run.started` those schemas again. `composed` gives such a payload a text built from the
parts' known texts (`store.helpers.PreparedJSON`), the rest encoded as a store would, so the
stored bytes are those of encoding the payload whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_harness.models.base import ToolSchema
from pytest_harness.store.helpers import PreparedJSON, json_text

__all__ = ["composed", "schemas_text", "tool_schemas"]


def composed(value: dict[str, Any], texts: Callable[[], Mapping[str, str]]) -> PreparedJSON:
    """`value`, its JSON text taking the text of some keys' values from `texts()`.

    `texts()` (called when the text is needed, so a failure is the store's to report) maps a
    key to exactly what encoding its value gives; the other keys are encoded here, together.
    """

    def text() -> str:
        known = texts()
        parts = []
        group: dict[str, Any] = {}
        for key, item in value.items():
            found = known.get(key)
            if found is None:
                group[key] = item
                continue
            if group:
                parts.append(json_text(group)[1:-1])
                group = {}
            parts.append(f"{json_text(key)}:{found}")
        if group:
            parts.append(json_text(group)[1:-1])
        return "{" + ",".join(parts) + "}"

    return PreparedJSON(value, text)


def tool_schemas(schemas: Sequence[ToolSchema]) -> list[dict[str, Any]]:
    """The tool schemas as a request's content and a recording keep them."""
    return [t.to_dict() for t in schemas]


_schemas: dict[int, tuple[Sequence[ToolSchema], str]] = {}
"""`id(schemas)` → the schemas (held, so the id is not reused meanwhile) and their text."""

_CACHED = 64
"""How many tasks' schemas are remembered (a process has a few tasks)."""


def schemas_text(schemas: Sequence[ToolSchema]) -> str:
    """`json_text(tool_schemas(schemas))`, worked out once per schemas object (a task's)."""
    found = _schemas.get(id(schemas))
    if found is not None and found[0] is schemas:
        return found[1]
    text = json_text(tool_schemas(schemas))
    if len(_schemas) >= _CACHED:
        _schemas.clear()
    _schemas[id(schemas)] = (schemas, text)
    return text
