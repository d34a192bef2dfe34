"""Where runs live: the [`Store`][pytest_harness.store.base.Store] protocol and its records.

`MemoryStore` and `SQLiteStore` are imported on first access, so importing this package does
not load sqlite3.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_harness.store.base import (
    ApprovalDecision,
    ApprovalRow,
    Event,
    EventDraft,
    JournalDraft,
    JournalEntry,
    NewApproval,
    NewRun,
    RunRecord,
    Store,
    StoredArtifact,
)

if TYPE_CHECKING:
    from pytest_harness.store.memory import MemoryStore
    from pytest_harness.store.sqlite import SQLiteStore

__all__ = [
    "ApprovalDecision",
    "ApprovalRow",
    "Event",
    "EventDraft",
    "JournalDraft",
    "JournalEntry",
    "MemoryStore",
    "NewApproval",
    "NewRun",
    "RunRecord",
    "SQLiteStore",
    "Store",
    "StoredArtifact",
]


def __getattr__(name: str) -> Any:
    if name == "MemoryStore":
        from pytest_harness.store.memory import MemoryStore

        return MemoryStore
    if name == "SQLiteStore":
        from pytest_harness.store.sqlite import SQLiteStore

        return SQLiteStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
