"""The `.hx` format, version 1: member names, limits, JSON rules, and what the records mean.

```
manifest.json      format, the run's identity and spec, final state, unresolved attempts,
                   policy, checksums
records.jsonl      one journal entry per line (UTF-8 JSON objects, `seq` contiguous from 1)
artifacts/<hex>    the bytes of one artifact, named by their SHA-256 (only when exported)
```

JSON is strict both ways: no NaN or infinities, no duplicate keys in an object.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ARCHIVE_FORMAT",
    "ARCHIVE_NAME",
    "ARCHIVE_VERSION",
    "MANIFEST",
    "MODEL_CLOSERS",
    "RECORDS",
    "TOOL_CLOSERS",
    "BundleLimits",
    "DuplicateKey",
    "artifact_member",
    "dumps",
    "loads",
    "outstanding",
]

ARCHIVE_NAME = "pytest-harness/archive"
ARCHIVE_VERSION = 1
ARCHIVE_FORMAT = f"{ARCHIVE_NAME}@{ARCHIVE_VERSION}"
"""The manifest's `format`. Earlier builds wrote `format: ARCHIVE_NAME` with a separate
`version: 1`; reading accepts both spellings of version 1 (archives are evidence)."""
MANIFEST = "manifest.json"
RECORDS = "records.jsonl"
ARTIFACT_MEMBER = re.compile(r"^artifacts/([0-9a-f]{64})$")

MODEL_CLOSERS = frozenset({"model.response", "model.failed", "model.interrupted"})
"""Entries that give a model attempt its outcome."""
TOOL_CLOSERS = frozenset({"tool.returned", "tool.failed", "tool.interrupted"})
"""Entries that give a tool attempt its outcome."""

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class BundleLimits:
    """How big an archive may be, when written and when read (DESIGN §12).

    An export over a limit fails with `ArchiveError` naming the limit (never truncates); a
    read over one is an invalid archive.
    """

    max_archive_bytes: int = 64 * MiB
    max_expanded_bytes: int = 64 * MiB
    max_member_bytes: int = 32 * MiB
    max_records: int = 100_000
    max_members: int = 10_000

    def __post_init__(self) -> None:
        from pytest_harness.errors import ArchiveError

        for name in (
            "max_archive_bytes",
            "max_expanded_bytes",
            "max_member_bytes",
            "max_records",
            "max_members",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ArchiveError(f"BundleLimits.{name} must be a positive integer, got {value!r}")


def artifact_member(sha256: str) -> str:
    """The member name of an artifact's bytes."""
    return f"artifacts/{sha256}"


class DuplicateKey(ValueError):
    """A JSON object names the same key twice."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise DuplicateKey(f"duplicate key {key!r}")
        data[key] = value
    return data


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(text: str) -> Any:
    """Parse strict JSON: `DuplicateKey` for a repeated key, `ValueError` for anything else."""
    return json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant)


def dumps(value: Any, *, indent: int | None = None) -> str:
    """Strict, compact JSON (`ValueError` for NaN and infinities)."""
    separators = (",", ":") if indent is None else (",", ": ")
    return json.dumps(
        value, ensure_ascii=False, allow_nan=False, indent=indent, separators=separators
    )


def outstanding(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The model and tool attempts the records started but never gave an outcome, in order."""
    opened: dict[tuple[str, str | None, str | None], dict[str, Any]] = {}
    for record in records:
        kind = record.get("kind")
        attempt = record.get("attempt_id")
        key = record.get("execution_key")
        if kind == "model.started":
            opened[("model", attempt, None)] = {
                "kind": "model",
                "attempt_id": attempt,
                "execution_key": None,
                "seq": record.get("seq"),
            }
        elif kind in MODEL_CLOSERS:
            opened.pop(("model", attempt, None), None)
        elif kind == "tool.dispatched":
            opened[("tool", attempt, key)] = {
                "kind": "tool",
                "attempt_id": attempt,
                "execution_key": key,
                "seq": record.get("seq"),
            }
        elif kind in TOOL_CLOSERS:
            opened.pop(("tool", attempt, key), None)
    return list(opened.values())
