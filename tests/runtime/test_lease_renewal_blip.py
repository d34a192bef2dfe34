"""A lease renewal that meets a lock held past the busy timeout once keeps renewing.

Before, `DriverBase._renew_lease` returned on the first `StoreError`, stale or not: another
process holding the database's write lock for half a second was enough for the lease to lapse
while the run was still driven, and for a second harness to recover the run and run its tool
again. The lock is held by a real process.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest

import pytest_harness as ph

TOOLS = '''
import asyncio
CALLS = []


async def work(order_id: str) -> str:
    """Works for 3 s."""
    CALLS.append(order_id)
    await asyncio.sleep(3)
    return "worked"
'''

SPEC = """
version: 1
name: renew
models:
  default: {{use: scripted, script: [{{call: work, args: {{order_id: A}}}}, {{say: done}}]}}
tools:
  work: {{call: "{module}:work", replay: safe}}
tasks:
  t: {{prompt: p, tools: [work]}}
state: {{use: sqlite, path: s.db, lease: 1s, busy_timeout: 0.1s}}
"""

LOCK = (
    "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
    "c.execute('BEGIN IMMEDIATE'); print('locked', flush=True); time.sleep(0.5)"
)


@pytest.mark.asyncio
async def test_a_lock_blip_during_a_tool_does_not_cost_the_lease(tmp_path: Path) -> None:
    module = f"renew_{uuid.uuid4().hex[:12]}"
    (tmp_path / f"{module}.py").write_text(TOOLS, encoding="utf-8")
    (tmp_path / "harness.yaml").write_text(SPEC.format(module=module), encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        tools = __import__(module)
        async with ph.load(tmp_path / "harness.yaml") as a, ph.load(tmp_path / "harness.yaml") as b:
            job = asyncio.ensure_future(a.run("t", "x", principal="ann"))
            while not tools.CALLS:
                await asyncio.sleep(0.01)
            locker = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                LOCK,
                str(tmp_path / "s.db"),
                stdout=asyncio.subprocess.PIPE,
            )
            assert locker.stdout is not None
            await locker.stdout.readline()
            await locker.wait()  # the other process held the write lock for 0.5 s
            await asyncio.sleep(1.2)  # more than a lease since; the tool still works
            assert await b.recover() == []  # before: b claimed the run and ran the tool again
            assert (await job).status is ph.RunStatus.COMPLETED  # before: StoreError (lease lost)
            assert tools.CALLS == ["A"]  # before: ["A", "A"]
    finally:
        sys.modules.pop(module, None)
        sys.path.remove(str(tmp_path))
