"""`SyncHarness`: every async method of `Harness` and `RunHandle` has a blocking counterpart.

Events in particular: `stream()` and a handle's `events()` are blocking iterators over the same
events as the async ones, read on the facade's own loop, and stopping early closes the async
stream there and then.
"""

from __future__ import annotations

import gc
import inspect
import logging
import re
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

import pytest_harness as ph
from pytest_harness.runtime.harness import Harness, RunHandle
from pytest_harness.store.base import Event
from pytest_harness.store.sqlite import SQLiteStore
from pytest_harness.testing import BlockingIterator, SyncHarness, SyncRunHandle

from .conftest import Project

CARD = '        - input: "Card*"\n'
SLOW = """        - input: "Slow*"
          turns:
            - {call: lookup_order, args: {order_id: A-1}, delay: 0.05}
            - {call: refund, args: {order_id: A-1, amount: 30}, delay: 0.05}
            - {say: Refunded slowly., delay: 0.05}
"""

FIONA = ph.Principal("fiona", ("finance",))


@pytest.fixture
def slow(project: Project) -> Project:
    """The project with a task input whose model turns each take 50 ms ("Slow …")."""
    project.change_spec(CARD, SLOW + CARD)
    return project


def _async_events(facade: SyncHarness, run_id: str, after: str = "0") -> list[Event]:
    """What the async `Harness.stream` yields, read on the facade's loop."""

    async def collect() -> list[Event]:
        return [event async for event in facade.harness.stream(run_id, after=after)]

    return facade.wait(collect())


def _seen(events: Iterable[Event]) -> list[tuple[str, str]]:
    return [(event.kind, event.cursor) for event in events]


# -- stream() and events() ------------------------------------------------------------------


def test_stream_yields_the_async_streams_events_blocking(project: Project) -> None:
    with SyncHarness.load(project.spec) as harness:
        waiting = harness.run("orders", "Refund $250 on A-1", principal="ann")
        events = harness.stream(waiting.run_id)
        assert isinstance(events, BlockingIterator) and iter(events) is events
        stored = list(events)
        assert _seen(stored) == _seen(_async_events(harness, waiting.run_id))
        assert [e.kind for e in stored] == [
            "run_started",
            "tool_call_start",
            "tool_result",
            "approval_required",
            "status_changed",
        ]  # it ends where the run waits
        assert next(events, None) is None  # ended: stays ended
        cursor = stored[2].cursor
        assert _seen(harness.stream(waiting.run_id, after=cursor)) == _seen(stored[3:])

        assert waiting.approval is not None
        done = harness.approve(
            waiting.run_id, waiting.approval.approval_id, "approve", approver=FIONA
        )
        assert done.ok
        rest = list(harness.stream(done.run_id, after=stored[-1].cursor))
        assert rest[0].kind == "approval_answered" and rest[-1].kind == "run_result"
        assert _seen(rest) == _seen(_async_events(harness, done.run_id, stored[-1].cursor))

        with pytest.raises(ValueError):  # a malformed cursor, at once, as the async one
            harness.stream(done.run_id, after="not-a-cursor")
        unknown = harness.stream("run_nope")  # no such run: on the first next()
        with pytest.raises(ph.UnknownRun):
            next(unknown)
        assert next(unknown, None) is None


def test_events_follow_a_run_in_progress(slow: Project) -> None:
    with SyncHarness.load(slow.spec) as harness:
        handle = harness.submit("orders", "Slow refund on A-1", principal="ann")
        done_at_each: list[bool] = []
        events = []
        for event in handle.events():  # the run advances while the iterator waits
            done_at_each.append(handle.done())
            events.append(event)
        assert done_at_each[0] is False  # read live, not after the fact
        assert handle.done() and handle.result().output == "Refunded slowly."
        assert events[0].kind == "run_started" and events[-1].kind == "run_result"
        assert _seen(events) == _seen(list(harness.stream(handle.run_id)))
        assert _seen(handle.events(after=events[3].cursor)) == _seen(events[4:])


def test_events_in_a_sync_test_through_the_fixtures(project: Project) -> None:
    project.tests(
        """
        from pytest_harness.testing import call, say

        def test_it(harness, scripted):
            scripted("orders", [call("lookup_order", order_id="A-1"), say("Found it.")])
            handle = harness.submit("orders", "Where is A-1?", principal="ann")
            kinds = [event.kind for event in handle.events()]
            assert kinds[0] == "run_started" and kinds[-1] == "run_result"
            assert [e.kind for e in harness.stream(handle.run_id)] == kinds
            assert handle.result().output == "Found it."
        """
    )
    project.run().assert_outcomes(passed=1)


def _stop_early(how: str, facade: SyncHarness, handle: SyncRunHandle) -> None:
    if how == "break":
        for _ in handle.events():
            break
    elif how == "close":
        events = facade.stream(handle.run_id)
        next(events)
        events.close()
        events.close()  # idempotent
        assert list(events) == []
    elif how == "with":
        with facade.stream(handle.run_id) as events:
            next(events)
    elif how == "raise":
        with pytest.raises(KeyError):
            for _ in handle.events():
                raise KeyError("the consumer failed")
    else:
        assert how == "dropped"
        events = handle.events()
        next(events)
        del events


@pytest.mark.parametrize("store", ["memory", "sqlite"])
@pytest.mark.parametrize("how", ["break", "close", "with", "raise", "dropped"])
def test_stopping_early_closes_the_async_stream_on_the_facades_loop(
    slow: Project, tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str, store: str
) -> None:
    caplog.set_level(logging.WARNING, logger="asyncio")
    threads = set(threading.enumerate())
    chosen = SQLiteStore(tmp_path / "state.db") if store == "sqlite" else "memory"
    facade = SyncHarness.load(slow.spec, store=chosen)
    handle = facade.submit("orders", "Slow refund on A-1", principal="ann")
    hub = facade.harness._hub
    _stop_early(how, facade, handle)
    # follow()'s `finally` ran at once, on the facade's loop: no subscription is left
    # for the loop's async-generator finalizer to clean up later (or never).
    assert not hub.watching(handle.run_id)
    assert not facade._iterators
    assert not handle.done()  # stopping the stream does not affect the run
    assert handle.result().ok
    facade.close()
    gc.collect()
    assert [r.getMessage() for r in caplog.records] == []  # no "Task was destroyed …"
    assert set(threading.enumerate()) <= threads  # the store's threads are gone too


def test_closing_the_facade_closes_an_open_stream(slow: Project) -> None:
    facade = SyncHarness.load(slow.spec)
    handle = facade.submit("orders", "Slow refund on A-1", principal="ann")
    events = handle.events()
    first = next(events)
    assert first.kind == "run_started"
    hub = facade.harness._hub
    assert hub.watching(handle.run_id)
    facade.close()
    assert not hub.watching(handle.run_id) and not facade._iterators
    assert next(events, None) is None
    events.close()  # nothing left to close, and no error from a closed facade


def test_a_stream_is_refused_inside_a_running_loop(project: Project) -> None:
    import asyncio

    with SyncHarness.load(project.spec) as harness:
        result = harness.run("orders", "Refund $30 on A-1", principal="ann")
        events = harness.stream(result.run_id)

        async def inside() -> None:
            next(events)

        with pytest.raises(RuntimeError, match="aharness"):
            asyncio.run(inside())
        assert next(events).kind == "run_started"  # untouched by the refusal
        events.close()


# -- the rest of the async API ----------------------------------------------------------------


def test_the_other_methods_block(slow: Project) -> None:
    with SyncHarness.load(slow.spec, record=True) as harness:
        handle = harness.submit("orders", "Slow refund on A-1", principal="ann")
        paused = harness.pause(handle.run_id)
        assert isinstance(paused, ph.RunResult)
        assert handle.result().status is ph.RunStatus.PAUSED
        assert harness.resume(handle.run_id).ok
        other = harness.submit("orders", "Slow refund on A-1", principal="ann")
        harness.cancel(other.run_id)
        assert other.result().status is ph.RunStatus.CANCELLED

        with pytest.raises(ph.ResolutionError):  # `result=None` is passed on: two answers
            harness.resolve(handle.run_id, "key", result=None, retry=True)
        with pytest.raises(ph.ResolutionError):  # none at all
            harness.resolve(handle.run_id, "key")
        assert harness.recover() == [] and harness.recover_next() is None
        recording = harness.recording(handle.run_id)
        assert isinstance(recording, ph.Recording) and recording.task == "orders"
        harness.flush_evals()
        assert harness.samples() == []
        harness.stop_driving()
        assert harness.harness._stopping.is_set()


def test_methods_reached_through_getattr_block_too(project: Project) -> None:
    harness = SyncHarness.load(project.spec)
    assert harness.aclose() is None  # awaited, not a coroutine left unawaited
    assert harness.harness._closed
    harness.close()


# -- every public async name has a blocking counterpart -----------------------------------------

RENAMED = {"aclose": "close", "__aenter__": "__enter__", "__aexit__": "__exit__"}


def _temporal_harness() -> type[Harness]:
    pytest.importorskip("temporalio")
    from pytest_harness.temporal.client import TemporalHarness

    return TemporalHarness


def _public(cls: type) -> list[str]:
    names = [n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))]
    return sorted(names + [n for n in ("__aenter__", "__aexit__") if hasattr(cls, n)])


def _parameters(function: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    def default(value: Any) -> Any:
        return "<sentinel>" if type(value) is object else value  # `resolve(result=_UNSET)`

    return [
        (p.name, p.kind, default(p.default))
        for p in list(inspect.signature(function).parameters.values())[1:]
    ]


@pytest.mark.parametrize(
    ("async_cls", "sync_cls"),
    [
        (lambda: Harness, SyncHarness),
        (_temporal_harness, SyncHarness),
        (lambda: RunHandle, SyncRunHandle),
    ],
    ids=["Harness", "TemporalHarness", "RunHandle"],
)
def test_every_public_async_method_has_a_blocking_counterpart(
    async_cls: Callable[[], type], sync_cls: type
) -> None:
    cls = async_cls()
    names = _public(cls)
    assert (
        {"events", "result"} <= set(names) if cls is RunHandle else {"stream", "run"} <= set(names)
    )
    for name in names:
        original = getattr(cls, name)
        counterpart = getattr(sync_cls, RENAMED.get(name, name), None)
        assert counterpart is not None, f"{sync_cls.__name__} has no {name}"
        assert not inspect.iscoroutinefunction(counterpart), name
        assert not inspect.isasyncgenfunction(counterpart), name
        returns = str(inspect.signature(counterpart).return_annotation)
        assert not re.search(r"Async|Awaitable|Coroutine|(?<!Sync)RunHandle", returns), (
            f"{sync_cls.__name__}.{name} returns {returns}"
        )
        if name not in RENAMED:
            assert _parameters(counterpart) == _parameters(original), name
        if "AsyncIterator" in str(inspect.signature(original).return_annotation):
            assert returns.startswith("BlockingIterator["), f"{name} returns {returns}"
