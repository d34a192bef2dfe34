"""Runs and replays leave no reference cycles: what they make is freed when they return.

A cycle is freed only by the garbage collector, so every run or replay that leaves one adds
work to the next collections, and a process holding many runs (a replay gate, a worker) pays
for full collections over everything it holds. The replay's twin harness was such a cycle (its
drive context held a closure over the harness): 81 objects a replay, and a full collection in
a bench of 1,000 replays that made them 12% slower in wall time. Comparing an approval's
request with generated ids made stable was another (a closure that called itself).
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

import pytest_harness as ph

SPEC = """
models:
  m:
    use: scripted
    script:
      - {call: lookup_order, args: {order_id: A-1}}
      - {say: "done"}
guards:
  - {id: cards, on: output, check: regex, pattern: '\\d{16}', action: redact}
tools:
  lookup_order: {call: "MODULE:lookup_order", replay: safe}
tasks:
  t: {model: m, prompt: p, tools: [lookup_order]}
"""


@pytest.fixture
def no_collector() -> Iterator[None]:
    """The collector off while a test counts what only it would free."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def cyclic_garbage(times: int, work: Callable[[], Awaitable[object]]) -> Counter[str]:
    """The types of the objects only the collector frees after `times` calls of `work`."""
    await work()  # first calls make their caches
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(times):
            await work()
        gc.collect()
        return Counter(type(o).__qualname__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


@pytest.mark.asyncio
@pytest.mark.parametrize("record", [False, True], ids=["plain", "recorded"])
@pytest.mark.usefixtures("no_collector")
async def test_a_run_leaves_no_cycles(app: Any, record: bool) -> None:
    app.write(SPEC.replace("MODULE", app.module), base=False)
    async with ph.load(app.spec, record=record) as harness:

        async def run() -> object:
            return await harness.run("t", "hi", principal="ann")

        assert await cyclic_garbage(5, run) == Counter()


@pytest.mark.asyncio
@pytest.mark.usefixtures("no_collector")
async def test_a_replay_leaves_no_cycles(app: Any) -> None:
    app.write(SPEC.replace("MODULE", app.module), base=False)
    async with ph.load(app.spec, record=True) as harness:
        result = await harness.run("t", "hi", principal="ann")
        recording = await ph.Recording.from_store(harness.store, result.run_id)

        async def replay() -> object:
            report = await harness.replay(recording)
            assert report.same
            return report

        assert await cyclic_garbage(5, replay) == Counter()


@pytest.mark.asyncio
@pytest.mark.usefixtures("no_collector")
async def test_a_golden_file_read_and_replayed_leaves_no_cycles(app: Any) -> None:
    app.write(SPEC.replace("MODULE", app.module), base=False)
    async with ph.load(app.spec, record=True) as harness:
        result = await harness.run("t", "hi", principal="ann")
        recording = await ph.Recording.from_store(harness.store, result.run_id)
        golden = recording.redacted().save(app.root / "golden.yaml")

        async def replay() -> object:
            report = await harness.replay(ph.Recording.load(golden))
            assert report.same, report.render()
            return report

        assert await cyclic_garbage(5, replay) == Counter()


ORDERS = """
rules:
  - {id: R1, when: 'tool == "refund" && args.amount > 100', then: approve, approvers: [finance]}
state: STATE
tasks:
  orders:
    prompt: You are the order desk.
    tools: [lookup_order, refund, explode]
"""
FINANCE = ph.Principal(id="fiona", roles=("finance",))


def orders(app: Any, script: str, state: str = "{use: memory}") -> None:
    app.write(ORDERS.replace("STATE", state))
    app.spec.write_text(app.spec.read_text().replace("script: []", f"script: {script}", 1))


@pytest.mark.asyncio
@pytest.mark.usefixtures("no_collector")
async def test_an_approval_asked_and_answered_leaves_no_cycles(app: Any) -> None:
    orders(app, "[{call: refund, args: {order_id: A-1, amount: 250}}, {say: refunded}]")
    async with ph.load(app.spec, record=True) as harness:

        async def approved() -> object:
            waiting = await harness.run("orders", "refund A-1", principal="ann")
            assert waiting.approval is not None
            answer = await harness.approve(
                waiting.run_id, waiting.approval.approval_id, "approve", approver=FINANCE
            )
            assert answer.status is ph.RunStatus.COMPLETED
            return answer

        assert await cyclic_garbage(3, approved) == Counter()


@pytest.mark.asyncio
@pytest.mark.usefixtures("no_collector")
async def test_a_tool_that_raises_leaves_no_cycles(app: Any) -> None:
    orders(app, "[{call: explode, args: {reason: no}}, {say: sorry}]")
    async with ph.load(app.spec, record=True) as harness:

        async def exploded() -> object:
            return await harness.run("orders", "explode", principal="ann")

        assert await cyclic_garbage(3, exploded) == Counter()


@pytest.mark.asyncio
@pytest.mark.usefixtures("no_collector")
async def test_a_run_on_sqlite_leaves_no_cycles(app: Any) -> None:
    path = app.root / "runs.db"
    orders(
        app,
        "[{call: lookup_order, args: {order_id: A-1}}, {say: done}]",
        f"{{use: sqlite, path: '{path}'}}",
    )
    async with ph.load(app.spec, record=True) as harness:

        async def run() -> object:
            return await harness.run("orders", "A-1?", principal="ann")

        assert await cyclic_garbage(3, run) == Counter()
