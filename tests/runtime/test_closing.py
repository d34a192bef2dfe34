"""Closing a harness lets go of everything, however the closing ends (no thread, connection or
lease is left behind).

A test app with a tool that blocks until told to return: `started` is set once it runs.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import pytest_harness as ph

pytestmark = pytest.mark.asyncio

TOOLS = '''
import asyncio

started = None


async def hang() -> str:
    """Waits until the test is over."""
    started.set()
    await asyncio.sleep(3600)
    return "never"
'''

SPEC = """
version: 1
name: closing
models:
  default:
    use: scripted
    script: [{{call: hang}}, {{say: done}}]
tools:
  hang: {{call: "{module}:hang"}}
tasks:
  t: {{prompt: p, tools: [hang]}}
state: {{use: sqlite, path: state.db}}
"""


@pytest.fixture
def app(tmp_path: Path) -> Iterator[tuple[Path, ModuleType]]:
    module = f"closing_{uuid.uuid4().hex[:12]}"
    (tmp_path / f"{module}.py").write_text(TOOLS, encoding="utf-8")
    spec = tmp_path / "harness.yaml"
    spec.write_text(SPEC.format(module=module), encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        tools = __import__(module)
        yield spec, tools
    finally:
        sys.modules.pop(module, None)
        while str(tmp_path) in sys.path:
            sys.path.remove(str(tmp_path))


def sqlite_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("harness-sqlite")]


async def no_sqlite_thread_within(seconds: float) -> list[str]:
    """The store's worker threads still alive after up to `seconds` (they exit once closed)."""
    deadline = time.monotonic() + seconds
    while sqlite_threads() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return sqlite_threads()


async def test_an_aclose_cancelled_while_it_waits_for_a_submitted_run_still_closes_the_store(
    app: tuple[Path, ModuleType],
) -> None:
    spec, tools = app
    tools.started = asyncio.Event()
    assert not sqlite_threads()
    harness = ph.load(spec)
    await harness.__aenter__()
    handle = await harness.submit("t", "go", principal="ann")
    await tools.started.wait()
    closing = asyncio.create_task(harness.aclose())  # waits for the submitted run
    await asyncio.sleep(0.05)
    assert not closing.done()
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert handle.done()  # the run was stopped, not left driving on a closed store
    assert await no_sqlite_thread_within(5) == []
    await harness.aclose()  # closing again is a no-op
    # the run let go of its lease: another harness takes it at once (no RunBusy)
    async with ph.load(spec) as again:
        resumed = await again.resume(handle.run_id)
    assert resumed.status is ph.RunStatus.AWAITING_RESOLUTION  # the manual call is uncertain
    with pytest.raises(ph.HarnessError, match="is closed"):
        await harness.run("t", "again", principal="ann")
