"""Starting a coroutine at once, so a time limit is armed only when it really waits.

Most of what a run awaits under a time limit finishes without ever suspending: a scripted
model, an async tool that computes its answer, an in-process store. `asyncio.timeout` arms a
timer on the event loop for each of them all the same, and cancels it at once. `start` runs
the coroutine up to its first suspension instead; the caller arms the limit (with the
deadline counted from before the start, `asyncio.timeout_at`) only when it has to wait for the
rest. A coroutine that never suspends could not be interrupted by a timer anyway: its result
is the same either way, and so is its exception.
"""

from __future__ import annotations

from collections.abc import Awaitable, Coroutine, Generator
from types import CoroutineType
from typing import Any, Generic, TypeVar

__all__ = ["Started", "start"]

T = TypeVar("T")


class Started(Generic[T]):
    """An awaitable run up to its first suspension: `done` with `value`, or awaited for the rest.

    Awaiting it resumes the coroutine where it stopped, passing everything the task sends or
    throws (a cancellation by a time limit too) on to it, as `await` itself would.
    """

    __slots__ = ("_first", "_rest", "done", "value")

    def __init__(self, done: bool, value: Any, rest: Any = None, first: Any = None) -> None:
        self.done = done
        self.value: T = value
        self._rest = rest
        self._first = first

    def __await__(self) -> Generator[Any, Any, T]:
        if self.done:
            return self.value
        rest = self._rest
        if not isinstance(rest, Coroutine):  # another awaitable: awaited as it is
            result: T = yield from rest.__await__()
            return result
        resumed: T = yield from _resume(rest, self._first)
        return resumed


def _resume(coro: Coroutine[Any, Any, T], value: Any) -> Generator[Any, Any, T]:
    """Hand the task what `coro` yields, and `coro` what the task sends or throws."""
    while True:
        try:
            sent = yield value
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                value = coro.throw(exc)
            except StopIteration as stop:
                result: T = stop.value
                return result
        else:
            try:
                value = coro.send(sent)
            except StopIteration as stop:
                result = stop.value
                return result


def start(awaitable: Awaitable[T]) -> Started[T]:
    """Run a coroutine until it finishes or first suspends; its exception propagates at once.

    Any other awaitable is left as it is, for the caller to await (`done` is false).
    """
    if type(awaitable) is not CoroutineType and not isinstance(awaitable, Coroutine):
        return Started(False, None, awaitable)
    try:
        first = awaitable.send(None)
    except StopIteration as stop:
        return Started(True, stop.value)
    return Started(False, None, awaitable, first)
