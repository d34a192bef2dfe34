"""The `aharness` fixture under pytest-asyncio; registered as a plugin only when it is installed.

pytest-asyncio runs an async fixture on the event loop of the fixture's `loop_scope`, and a test
on the loop of its marker's `loop_scope`; a harness must live on the loop of the test that uses
it. So there is one function-scoped fixture per loop scope, and `aharness` picks the one that
matches the test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Literal

import pytest_asyncio

if TYPE_CHECKING:
    from pytest_harness.plugin.fixtures import TestRuns
    from pytest_harness.runtime.harness import Harness

LoopScope = Literal["function", "class", "module", "package", "session"]


def fixture_name(loop_scope: str) -> str:
    """The name of the fixture whose harness lives on the `loop_scope` event loop."""
    return f"_harness_asyncio_{loop_scope}"


def _make(loop_scope: LoopScope) -> Callable[..., Any]:
    async def harness_on_loop(_harness_runs: TestRuns) -> AsyncIterator[Harness]:
        harness = _harness_runs.load()
        try:
            yield harness
        finally:
            await _harness_runs.close_async(harness)

    harness_on_loop.__doc__ = f"The async harness of a test run on the {loop_scope} loop."
    return pytest_asyncio.fixture(
        harness_on_loop, loop_scope=loop_scope, name=fixture_name(loop_scope)
    )


_harness_asyncio_function = _make("function")
_harness_asyncio_class = _make("class")
_harness_asyncio_module = _make("module")
_harness_asyncio_package = _make("package")
_harness_asyncio_session = _make("session")
