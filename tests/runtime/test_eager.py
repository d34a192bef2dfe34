"""`eager.start`: a coroutine run to its first suspension, then awaited for the rest."""

from __future__ import annotations

import asyncio

import pytest

from pytest_harness.eager import start

pytestmark = pytest.mark.asyncio


async def answer(value: int) -> int:
    return value * 2


async def waits(seconds: float, log: list[str]) -> str:
    log.append("started")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        log.append("cancelled")
        raise
    finally:
        log.append("finally")
    log.append("resumed")
    return "late"


async def fails_at_once() -> None:
    raise TimeoutError("the tool's own timeout")


async def fails_after_waiting() -> None:
    await asyncio.sleep(0)
    raise KeyError("gone")


async def test_a_coroutine_that_never_waits_is_done_with_its_value() -> None:
    started = start(answer(21))
    assert started.done and started.value == 42
    assert await started == 42  # awaiting a finished one gives the value again


async def test_one_that_waits_runs_to_its_first_wait_and_then_on_when_awaited() -> None:
    log: list[str] = []
    started = start(waits(0.01, log))
    assert not started.done
    assert log == ["started"]  # it ran up to the sleep, no further
    assert await started == "late"
    assert log == ["started", "finally", "resumed"]


async def test_a_time_limit_armed_after_the_start_cancels_the_rest() -> None:
    log: list[str] = []
    loop = asyncio.get_running_loop()
    since = loop.time()
    started = start(waits(10, log))
    timer = asyncio.timeout_at(since + 0.01)
    with pytest.raises(TimeoutError):
        async with timer:
            await started
    assert timer.expired()
    assert log == ["started", "cancelled", "finally"]


async def test_a_limit_already_passed_when_it_waits_fires_at_its_first_wait() -> None:
    log: list[str] = []
    loop = asyncio.get_running_loop()
    started = start(waits(10, log))
    with pytest.raises(TimeoutError):
        async with asyncio.timeout_at(loop.time() - 1):
            await started
    assert log == ["started", "cancelled", "finally"]


async def test_an_exception_before_any_wait_propagates_from_start() -> None:
    with pytest.raises(TimeoutError, match="own timeout"):
        start(fails_at_once())


async def test_an_exception_after_a_wait_propagates_from_the_await() -> None:
    started = start(fails_after_waiting())
    assert not started.done
    with pytest.raises(KeyError, match="gone"):
        await started


async def test_cancelling_the_task_reaches_the_coroutine() -> None:
    log: list[str] = []

    async def holder() -> str:
        return await start(waits(10, log))

    task = asyncio.ensure_future(holder())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log == ["started", "cancelled", "finally"]


async def test_another_awaitable_is_left_to_be_awaited() -> None:
    future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    started = start(future)
    assert not started.done
    future.set_result("ready")
    assert await started == "ready"
