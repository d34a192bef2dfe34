"""The run loop's one source of time and fresh ids, replaceable for deterministic drivers.

The engine reads the wall clock (`now`), a monotonic clock (`monotonic`) and new UUIDs
(`new_id`) only through this module. By default they are `time.time`, `time.monotonic` and
`uuid.uuid4`; `using(source)` binds another `Source` for the current context (an asyncio task
and the tasks it starts), as the Temporal workflow does with the workflow's own deterministic
time and UUIDs (`pytest_harness.temporal.segment`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Protocol

from pytest_harness.runtime.ids import unique_text, uuid4_hex, uuid4_text

if TYPE_CHECKING:
    import uuid  # imported where a `UUID` object is made: the ids the loop takes need none

__all__ = [
    "REAL",
    "Source",
    "entry_stamp",
    "id_hex",
    "id_text",
    "monotonic",
    "new_id",
    "now",
    "using",
]


class Source(Protocol):
    """Where a driver's time and ids come from."""

    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds of a clock that never goes back (for durations)."""
        ...

    def new_id(self) -> uuid.UUID:
        """A fresh random UUID."""
        ...


class _Real:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def new_id(self) -> uuid.UUID:
        import uuid

        return uuid.uuid4()


_source: ContextVar[Source | None] = ContextVar("pytest_harness_clock", default=None)


def now() -> float:
    """The wall clock of the current source."""
    source = _source.get()
    return time.time() if source is None else source.now()


def monotonic() -> float:
    """The monotonic clock of the current source."""
    source = _source.get()
    return time.monotonic() if source is None else source.monotonic()


def new_id() -> uuid.UUID:
    """A fresh UUID from the current source."""
    source = _source.get()
    if source is None:
        import uuid

        return uuid.uuid4()
    return source.new_id()


def id_hex() -> str:
    """A fresh id as 32 hex digits (`new_id().hex`), made without a `UUID` object by default."""
    source = _source.get()
    return uuid4_hex() if source is None else source.new_id().hex


def id_text() -> str:
    """A fresh id in its 8-4-4-4-12 form (`str(new_id())`), made quickly by default."""
    source = _source.get()
    return uuid4_text() if source is None else str(source.new_id())


def entry_stamp() -> tuple[str, float]:
    """A journal entry's id and time: a unique id in the form of `id_text()`, and `now()`.

    By default the id is counted on from a per-process random prefix (`ids.unique_text`, no
    system call); else it is the bound source's next UUID, and the time its clock's.
    """
    source = _source.get()
    if source is None:
        return unique_text(), time.time()
    return str(source.new_id()), source.now()


@contextlib.contextmanager
def using(source: Source) -> Iterator[None]:
    """Bind `source` as the clock and id source of the current context while the block runs."""
    token = _source.set(source)
    try:
        yield
    finally:
        _source.reset(token)


REAL: Source = _Real()
"""The default source: real time and random UUIDs."""
