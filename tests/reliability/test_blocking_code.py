"""Blocking user code runs in worker threads: timeouts, deadlines and lease renewal still work.

A synchronous `function` model or tool that blocks (here: `time.sleep`) must not hold the event
loop: the model's `timeout` and the task's `deadline` end the run on time, and the lease of a
run on SQLite is renewed while the tool blocks (read from another thread, straight from the
file, so the check does not depend on the loop it is testing).
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

import pytest_harness as ph

pytestmark = pytest.mark.slow  # each waits for a blocked thread to finish at the loop's end

MODULE = textwrap.dedent(
    '''
    import time
    from pytest_harness.models.base import ModelResponse, ProposedCall, TokenUsage

    SLEEP = {"model": 0.0, "tool": 0.0}


    def model(request):
        """A synchronous model that blocks, then calls `block` once and answers."""
        if request.messages[-1]["role"] == "tool":
            return "done"
        time.sleep(SLEEP["model"])
        if SLEEP["tool"]:
            return ModelResponse(calls=(ProposedCall("c1", "block", {}),), usage=TokenUsage(1, 1))
        return "slept"


    def block() -> str:
        """A synchronous tool that blocks."""
        time.sleep(SLEEP["tool"])
        return "unblocked"
    '''
)

SPEC = """
version: 1
name: blocking
models:
  default: {{use: function, call: "{mod}:model", retries: 0, {model_extra}}}
tools:
  block: {{call: "{mod}:block", replay: safe}}
tasks:
  t: {{prompt: p, tools: [block], {task_extra}}}
state: {{use: sqlite, path: state.db, lease: 300ms}}
"""


class Blocking:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.name = f"blocking_{uuid.uuid4().hex[:12]}"
        (root / f"{self.name}.py").write_text(MODULE, encoding="utf-8")
        sys.path.insert(0, str(root))
        try:
            self.module = __import__(self.name)
        finally:
            sys.path.remove(str(root))

    def spec(self, *, model_extra: str = "", task_extra: str = "") -> Path:
        path = self.root / "harness.yaml"
        path.write_text(
            SPEC.format(
                mod=self.name,
                model_extra=model_extra or "price: {input_per_mtok: 0, output_per_mtok: 0}",
                task_extra=task_extra or "labels: {}",
            ),
            encoding="utf-8",
        )
        return path


@pytest.fixture
def blocking(tmp_path: Path) -> Iterator[Blocking]:
    made = Blocking(tmp_path)
    yield made
    sys.modules.pop(made.name, None)


@pytest.mark.asyncio
async def test_a_blocking_sync_model_is_stopped_by_its_timeout(blocking: Blocking) -> None:
    blocking.module.SLEEP["model"] = 1.0
    spec = blocking.spec(model_extra="timeout: 200ms", task_extra="deadline: 600ms")
    async with ph.load(spec) as harness:
        started = time.monotonic()
        result = await harness.run("t", "hi", principal="ann")
        took = time.monotonic() - started
    assert result.status is ph.RunStatus.FAILED
    assert result.error is not None and "did not answer within 0.2s" in result.error["message"]
    assert took < 0.6, f"the run took {took:.2f}s: the timeout did not fire while it blocked"


@pytest.mark.asyncio
async def test_a_blocking_sync_model_is_stopped_by_the_deadline(blocking: Blocking) -> None:
    blocking.module.SLEEP["model"] = 1.0
    spec = blocking.spec(task_extra="deadline: 200ms")
    async with ph.load(spec) as harness:
        started = time.monotonic()
        result = await harness.run("t", "hi", principal="ann")
        took = time.monotonic() - started
    assert result.status is ph.RunStatus.LIMITED and result.limit == "deadline"
    assert took < 0.6, f"the run took {took:.2f}s: the deadline did not fire while it blocked"


@pytest.mark.asyncio
async def test_the_lease_is_renewed_while_a_sync_tool_blocks(blocking: Blocking) -> None:
    blocking.module.SLEEP["tool"] = 1.2
    spec = blocking.spec()
    margins: list[float] = []
    stop = threading.Event()

    def watch(run_id: str) -> None:
        with closing(sqlite3.connect(blocking.root / "state.db")) as conn:
            while not stop.is_set():
                row = conn.execute(
                    "SELECT lease_expires, status FROM runs WHERE run_id = ?", (run_id,)
                ).fetchone()
                if row[1] != "running":
                    return
                margins.append(row[0] - time.time())
                time.sleep(0.03)

    async with ph.load(spec) as harness:
        handle = await harness.submit("t", "hi", principal="ann")
        watcher = threading.Thread(target=watch, args=(handle.run_id,))
        watcher.start()
        try:
            result = await handle.result()
        finally:
            stop.set()
            await asyncio.to_thread(watcher.join)
    assert result.ok and result.output == "done"
    assert [c.result for c in result.trace.tool_calls()] == ["unblocked"]
    assert len(margins) > 10
    assert min(margins) > 0, f"the lease lapsed while the tool blocked: {min(margins):.3f}s"


def test_a_sync_model_streams_from_its_thread_in_order(blocking: Blocking) -> None:
    from pytest_harness.models.base import ModelRequest
    from pytest_harness.models.function import FunctionProvider

    def model(request: ModelRequest) -> str:
        assert request.on_text is not None
        for piece in ("a", "b", "c"):
            request.on_text(piece)
        return "abc"

    got: list[str] = []
    loop_thread: list[int] = []

    def on_text(piece: str) -> None:
        loop_thread.append(threading.get_ident())
        got.append(piece)

    request = ModelRequest(
        task="t",
        model="m",
        system="",
        messages=(),
        tools=(),
        run_id="r",
        turn=0,
        input="",
        on_text=on_text,
    )
    response = asyncio.run(FunctionProvider(model).complete(request))
    assert response.text == "abc" and got == ["a", "b", "c"]
    assert set(loop_thread) == {threading.get_ident()}  # delivered on the loop's thread
