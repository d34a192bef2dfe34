"""Blocking user code in a thread of its own, which nothing waits for when the loop closes.

Synchronous tools, `function` models and `callable` graders run in a worker thread (DESIGN
§10), so a call's `timeout`, the run's deadline and the lease renewal keep working while they
block. A thread cannot be stopped: one cut off by a timeout, or by a cancelled run, runs on.
`asyncio.to_thread` runs it in the loop's default executor, whose threads are joined when the
loop closes (`asyncio.run`, `asyncio.Runner.close()`, pytest-asyncio's loop) and again when the
interpreter exits: a tool blocked for good kept `asyncio.run(main())`, a test session using
the `harness` fixture, or a worker's shutdown waiting forever, after the run itself had
ended. `in_thread` starts a daemon thread per call instead and leaves it behind once its
caller stops waiting; its result or error is then dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["in_thread"]

T = TypeVar("T")


async def in_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Call `fn(*args, **kwargs)` in a new daemon thread and await its result.

    As `asyncio.to_thread`: the caller's context variables go with the call (a tool's
    `current_tool_context()`), and what `fn` raises is raised here. Cancelling the caller
    stops the wait, not the thread.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():  # its caller stopped waiting
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def call() -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = context.run(fn, *args, **kwargs)
        except BaseException as exc:  # the caller's to judge, as from asyncio.to_thread
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, value, error)

    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    threading.Thread(target=call, name=f"pytest-harness: {name}", daemon=True).start()
    return await future
