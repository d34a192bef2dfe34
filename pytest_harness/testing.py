"""Helpers for testing an agent: a blocking `Harness`, script turns in Python, trace assertions.

```python
from pytest_harness.testing import SyncHarness, assert_trace, call, say

with SyncHarness.load("harness.yaml", env="offline") as harness:
    harness.harness.plans  # the async Harness underneath, if needed
    result = harness.run("orders", "Refund $250 on order A-1001.", principal="ann")
    kinds = [event.kind for event in harness.stream(result.run_id)]  # a blocking iterator
assert_trace(result, fired=["R1"], status="awaiting_approval")
```

Everything here works without pytest; the pytest plugin's fixtures are built on it. Importing
this module is cheap: the runtime is imported when a harness is loaded.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import textwrap
import weakref
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pytest_harness.runtime.results import RunResult, RunStatus

if TYPE_CHECKING:
    import asyncio
    from datetime import datetime, timedelta

    from pytest_harness.archive.export import ExportPolicy
    from pytest_harness.principal import Principal
    from pytest_harness.recording.model import Recording
    from pytest_harness.replay.report import ReplayReport
    from pytest_harness.runtime.harness import Harness, RunHandle
    from pytest_harness.runtime.results import RunSummary
    from pytest_harness.store.base import Event, RunRecord, Sample, Store

__all__ = [
    "BlockingIterator",
    "SyncHarness",
    "SyncRunHandle",
    "assert_trace",
    "call",
    "calls",
    "explain_difference",
    "fail",
    "say",
]

T = TypeVar("T")
ERROR_KINDS = ("rate_limit", "server", "timeout", "refusal")
_UNSET: Any = object()
"""`SyncHarness.resolve(result=…)` not given (`None` is a result)."""

# -- a blocking Harness ------------------------------------------------------------------------


class BlockingIterator(Iterator[T]):
    """An async iterator of a `SyncHarness` (`stream()`, `events()`), iterated blocking.

    Each `next()` runs one step of the async iterator on the facade's event loop, so submitted
    runs advance while it waits. Stopping early closes the async iterator on that loop at
    once: `close()`, a `with` block, or dropping the iterator (a `for` loop left with `break`
    or an exception). The facade's `close()` closes the ones still open. After it ends,
    fails or is closed, `next()` raises `StopIteration`, as a generator's does.
    """

    def __init__(self, source: AsyncIterator[T], facade: SyncHarness) -> None:
        self._source: AsyncIterator[T] | None = source
        self._facade = facade
        facade._iterators.add(self)

    def __iter__(self) -> BlockingIterator[T]:
        return self

    def __next__(self) -> T:
        source = self._source
        if source is None:
            raise StopIteration
        self._facade._check_usable()
        try:
            return self._facade.wait(_next(source))
        except StopAsyncIteration:
            self._release()
            raise StopIteration from None
        except BaseException:
            self.close()  # an async generator that raised is finished: this returns at once
            raise

    def close(self) -> None:
        """Close the async iterator on the facade's loop (idempotent).

        `RuntimeError` inside a running event loop, like every blocking call of the facade.
        """
        source = self._source
        if source is None:
            return
        if self._facade._closed:  # its loop closed what was still open
            self._release()
            return
        self._facade._check_usable()
        self._release()
        self._facade.wait(_aclose(source))

    def _release(self) -> None:
        self._source = None
        self._facade._iterators.discard(self)

    def __enter__(self) -> BlockingIterator[T]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_source", None) is not None:
            # Inside a running loop this cannot block: the loop's own finalizer of async
            # generators closes the dropped one at the facade's next call or close.
            with contextlib.suppress(Exception):
                self.close()


async def _next(source: AsyncIterator[T]) -> T:
    return await anext(source)


async def _aclose(source: AsyncIterator[Any]) -> None:
    aclose: Callable[[], Awaitable[object]] | None = getattr(source, "aclose", None)
    if aclose is not None:
        await aclose()


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


class SyncRunHandle:
    """A run started with `SyncHarness.submit()`: its ids now, its result when you block on it.

    The run makes progress while its facade blocks (in `result()`, `events()` or any other call).
    """

    def __init__(self, handle: RunHandle, facade: SyncHarness) -> None:
        self.handle = handle
        self.run_id = handle.run_id
        self.session_id = handle.session_id
        self._facade = facade

    def result(self) -> RunResult:
        """Block until the run ends or suspends, and return its result."""
        return self._facade.wait(self.handle.result())

    def done(self) -> bool:
        """Whether the run has stopped (ended or suspended)."""
        return self.handle.done()

    def events(self, *, after: str = "0") -> BlockingIterator[Event]:
        """The run's events after the cursor `after`, then live ones until it ends or waits.

        `RunHandle.events()`, blocking: the same as `SyncHarness.stream(handle.run_id, ...)`.
        """
        return BlockingIterator(self.handle.events(after=after), self._facade)


class SyncHarness:
    """A blocking facade over an async `Harness`: the same methods, each run to completion.

    It owns an event loop (`asyncio.Runner`), so it needs no event-loop plugin; it cannot be used
    inside a running loop (in an `async def` test, use the `Harness` itself). Close it with
    `close()` or a `with` block. `stream()` (and a handle's `events()`) return a
    `BlockingIterator`. Methods of `Harness` not spelled out here are wrapped the same way (an
    awaitable result is awaited, an async iterator becomes a `BlockingIterator`); its attributes
    (`spec`, `plans`, `store`) are passed through.
    """

    def __init__(self, harness: Harness) -> None:
        import asyncio

        self.harness = harness
        self._runner: asyncio.Runner = asyncio.Runner()
        self._handles: list[SyncRunHandle] = []
        self._iterators: weakref.WeakSet[BlockingIterator[Any]] = weakref.WeakSet()
        self._closed = False

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        env: str | None = None,
        store: Store | str | None = None,
        record: bool | None = None,
    ) -> SyncHarness:
        """`ph.load(...)`, blocking: the same arguments, a `SyncHarness` back."""
        from pytest_harness.loading import load

        return cls(load(path, env=env, store=store, record=record))

    # -- plumbing ------------------------------------------------------------------------------

    def wait(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on this facade's event loop and return its result."""
        try:
            self._check_usable()
        except BaseException:
            coro.close()
            raise
        return self._runner.run(coro)

    def _check_usable(self) -> None:
        """`HarnessError` when closed; `RuntimeError` inside a running event loop."""
        import asyncio

        if self._closed:
            from pytest_harness.errors import HarnessError

            raise HarnessError(f"this SyncHarness for {self.harness.spec.path} is closed")
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        raise RuntimeError(
            "SyncHarness blocks, so it cannot be called inside a running event loop; in an "
            "`async def` test use the `aharness` fixture (the async Harness) instead"
        )

    def _blocking(self, value: Any) -> Any:
        """`value` made blocking: awaited when awaitable, iterated blocking when async."""
        if inspect.iscoroutine(value):
            return self.wait(value)
        if inspect.isawaitable(value):
            return self.wait(_awaited(value))
        if isinstance(value, AsyncIterator):
            return BlockingIterator(value, self)
        return value

    def wait_for_runs(self) -> None:
        """Block until every run started with `submit()` has stopped (errors are its own)."""
        for handle in self._handles:
            if not handle.done():
                try:
                    handle.result()
                except Exception:  # the run's failure belongs to whoever awaits its result
                    continue

    def close(self) -> None:
        """Close open iterators, let submitted runs stop, close the harness and the event loop.

        Idempotent.
        """
        if self._closed:
            return
        try:
            for iterator in list(self._iterators):
                iterator.close()
            self.wait_for_runs()
            self.wait(self.harness.aclose())
        finally:
            self._closed = True
            self._runner.close()

    def __enter__(self) -> SyncHarness:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        if name in ("harness", "_runner", "_handles", "_iterators", "_closed"):
            raise AttributeError(name)
        attr = getattr(self.harness, name)
        if not inspect.ismethod(attr):
            return attr

        def blocking(*args: Any, **kwargs: Any) -> Any:
            return self._blocking(attr(*args, **kwargs))

        blocking.__name__ = name
        blocking.__doc__ = attr.__doc__
        return blocking

    def __repr__(self) -> str:
        return f"SyncHarness({self.harness.spec.path})"

    # -- the Harness methods -------------------------------------------------------------------

    def run(
        self,
        task: str,
        input: str,
        *,
        principal: Principal | str,
        tenant: str | None = None,
        session_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> RunResult:
        """Run `task` on `input` until it ends or suspends, and return its result."""
        return self.wait(
            self.harness.run(
                task,
                input,
                principal=principal,
                tenant=tenant,
                session_id=session_id,
                labels=labels,
                idempotency_key=idempotency_key,
            )
        )

    def submit(
        self,
        task: str,
        input: str,
        *,
        principal: Principal | str,
        tenant: str | None = None,
        session_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> SyncRunHandle:
        """Start a run and return a handle at once; the run advances while the facade blocks."""
        handle = self.wait(
            self.harness.submit(
                task,
                input,
                principal=principal,
                tenant=tenant,
                session_id=session_id,
                labels=labels,
                idempotency_key=idempotency_key,
            )
        )
        sync = SyncRunHandle(handle, self)
        self._handles.append(sync)
        return sync

    def result(self, run_id: str) -> RunResult:
        """Read a run's result from the store."""
        return self.wait(self.harness.result(run_id))

    def approve(
        self,
        run_id: str,
        approval_id: str,
        decision: Literal["approve", "decline"],
        *,
        approver: Principal | str,
        reason: str | None = None,
    ) -> RunResult:
        """Answer an approval; the run resumes when none is left open."""
        return self.wait(
            self.harness.approve(run_id, approval_id, decision, approver=approver, reason=reason)
        )

    def resolve(
        self,
        run_id: str,
        execution_key: str,
        *,
        result: Any = _UNSET,
        retry: bool = False,
        abort: bool = False,
        resolver: Principal | str | None = None,
    ) -> RunResult:
        """Settle a tool call a crash left uncertain (one of `result=`, `retry`, `abort`)."""
        given: dict[str, Any] = {} if result is _UNSET else {"result": result}
        return self.wait(
            self.harness.resolve(
                run_id, execution_key, retry=retry, abort=abort, resolver=resolver, **given
            )
        )

    def pause(self, run_id: str) -> RunResult:
        """Ask the run to pause at its next boundary (at once when nobody drives it)."""
        return self.wait(self.harness.pause(run_id))

    def cancel(self, run_id: str) -> RunResult:
        """Ask the run to stop for good at its next boundary (at once when nobody drives it)."""
        return self.wait(self.harness.cancel(run_id))

    def resume(self, run_id: str, *, record: bool | None = None) -> RunResult:
        """Continue a suspended or interrupted run from its last checkpoint."""
        return self.wait(self.harness.resume(run_id, record=record))

    def recover(self) -> list[RunResult]:
        """Resume every interrupted run whose lease expired; the results of the runs driven."""
        return self.wait(self.harness.recover())

    def recover_next(
        self,
        *,
        skip: Collection[str] = (),
        on_claim: Callable[[RunRecord], None] | None = None,
    ) -> RunResult | None:
        """Claim one interrupted run (not in `skip`), drive it, and return its result."""
        return self.wait(self.harness.recover_next(skip=skip, on_claim=on_claim))

    def stop_driving(self) -> None:
        """Make every run this harness drives stop at its next clean boundary."""
        self.harness.stop_driving()

    def stream(self, run_id: str, *, after: str = "0") -> BlockingIterator[Event]:
        """The run's events after the cursor `after`, then live ones until it ends or waits.

        `Harness.stream()`, blocking: `for event in harness.stream(run_id, after=cursor)`.
        Each event is read on this facade's loop, so a submitted run advances while the loop
        waits for its next event. `ValueError` at once for a malformed cursor; `UnknownRun` on
        the first `next()` for no such run. Breaking out of the loop does not affect the run.
        """
        return BlockingIterator(self.harness.stream(run_id, after=after), self)

    def runs(
        self,
        *,
        status: RunStatus | str | None = None,
        task: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
    ) -> list[RunSummary]:
        """Stored runs, newest first."""
        return self.wait(self.harness.runs(status=status, task=task, tenant=tenant, limit=limit))

    def replay(
        self, source: str | os.PathLike[str] | Recording, *, tools: str | None = None
    ) -> ReplayReport:
        """Replay a stored run, a `Recording` or a recording file against this spec.

        `tools="safe"` runs the tools whose replay policy is `safe` and compares their results.
        """
        return self.wait(self.harness.replay(source, tools=tools))

    def export(
        self, run_id: str, dest: str | os.PathLike[str], *, policy: ExportPolicy | None = None
    ) -> Path:
        """Write a recorded run as a `.hx` archive or a `.yaml` golden file, by suffix."""
        return self.wait(self.harness.export(run_id, dest, policy=policy))

    def recording(self, run_id: str) -> Recording:
        """The recording of a recorded run (`HarnessError` when it was not recorded)."""
        return self.wait(self.harness.recording(run_id))

    def flush_evals(self) -> None:
        """Wait until the online eval grades of the runs ended so far are stored."""
        self.wait(self.harness.flush_evals())

    def samples(
        self,
        *,
        task: str | None = None,
        grader: str | None = None,
        since: datetime | timedelta | float | None = None,
        limit: int | None = 100,
    ) -> list[Sample]:
        """Online eval samples in the store, newest first."""
        return self.wait(self.harness.samples(task=task, grader=grader, since=since, limit=limit))


# -- script turns ------------------------------------------------------------------------------


def call(name: str, /, **args: Any) -> dict[str, Any]:
    """A model turn that calls one tool: `call("refund", order_id="A-1", amount=250)`."""
    return {"call": name, "args": args}


def calls(*turns: Mapping[str, Any]) -> dict[str, Any]:
    """A model turn that calls several tools at once: `calls(call("a"), call("b", x=1))`."""
    items = []
    for turn in turns:
        if "call" not in turn:
            raise ValueError(f"calls() takes call(...) turns, got {dict(turn)!r}")
        items.append({"name": turn["call"], "args": dict(turn.get("args") or {})})
    return {"calls": items}


def say(
    text: str,
    usage: Mapping[str, int] | tuple[int, int] | None = None,
    *,
    incomplete: str | None = None,
) -> dict[str, Any]:
    """A model turn that answers `text`; `usage` is `(input_tokens, output_tokens)` or a mapping.

    `incomplete="max_tokens"` (or `"context_window"`) makes it an answer cut at its token limit,
    to test a model's `on_truncation`.
    """
    turn: dict[str, Any] = {"say": text}
    if usage is not None:
        if isinstance(usage, tuple):
            turn["usage"] = {"input_tokens": usage[0], "output_tokens": usage[1]}
        else:
            turn["usage"] = dict(usage)
    if incomplete is not None:
        turn["incomplete"] = incomplete
    return turn


def fail(kind: str) -> dict[str, Any]:
    """A model turn that fails like a provider: `rate_limit`, `server`, `timeout` or `refusal`."""
    if kind not in ERROR_KINDS:
        raise ValueError(f"unknown model error {kind!r}; choose from {', '.join(ERROR_KINDS)}")
    return {"error": kind}


# -- assertions --------------------------------------------------------------------------------


def assert_trace(
    result: RunResult,
    *,
    fired: Iterable[str] = (),
    not_fired: Iterable[str] = (),
    tools: Sequence[str] | None = None,
    outcomes: Iterable[str] = ("ok",),
    status: RunStatus | str | None = None,
) -> None:
    """Assert what a run did: rules and guards that fired or not, tools called, final status.

    `tools` is the names of the tool calls, in order, whose outcome is one of `outcomes`
    (default: only `ok`: a call that was denied, declined or rejected for its arguments did
    not happen); the message names the calls left out and why. On failure the message starts
    with the run's error (`ScriptExhausted: …`) when it has one, lists every mismatch, then
    the run's trace (a rule whose condition failed shows its `error:`).
    """
    __tracebackhide__ = True
    problems: list[str] = []
    if status is not None:
        expected = RunStatus.parse(status)
        if result.status is not expected:
            problems.append(f"status: expected {expected.value}, got {result.status.value}")
    trace = result.trace
    matched = [d for d in trace if d.kind in ("rule", "guard")]
    for ident in fired:
        if not trace.fired(ident):
            shown = ", ".join(dict.fromkeys(d.key for d in matched)) or "none"
            problems.append(f"expected {ident!r} to fire; it did not (fired: {shown})")
    for ident in not_fired:
        hits = [d for d in matched if d.key == ident]
        if hits:
            where = ", ".join(f"step {d.step} {d.summary()}" for d in hits)
            problems.append(f"expected {ident!r} not to fire; it fired: {where}")
    if tools is not None:
        counted = frozenset(outcomes)
        actual = trace.tool_calls()
        kept = [c for c in actual if c.outcome in counted]
        if [c.name for c in kept] != list(tools):
            got = ", ".join(c.name for c in kept) or "none"
            line = f"tools: expected [{', '.join(tools)}], got [{got}]"
            left_out = [c for c in actual if c.outcome not in counted]
            if left_out:
                shown = ", ".join(f"{c.name} → {c.outcome}" for c in left_out)
                line += f" (not counted, outcome not {'/'.join(sorted(counted))}: {shown})"
            problems.append(line)
    if problems:
        error = result.error
        if error:
            problems.insert(0, f"error: {error.get('type')}: {error.get('message')}")
        body = "\n".join(f"  {p}" for p in problems)
        rendered = textwrap.indent(trace.render() or "(empty)", "  ")
        raise AssertionError(
            f"run {result.run_id} ({result.task}, {result.status.value}) did not match:\n"
            f"{body}\ntrace:\n{rendered}"
        )


_FIRST = ("task", "status", "output", "error", "limit")
_THEN = ("approval", "pending", "usage", "labels", "run_id", "session_id")


def explain_difference(left: RunResult, right: RunResult) -> list[str]:
    """Why two `RunResult`s differ: the fields that matter first, then the traces, then the rest.

    The pytest plugin shows this for a failing `assert left == right` (pytest cuts it after a
    few lines unless run with `-vv`, so the most telling differences come first).
    """
    lines = [
        f"RunResult({left.task}, {left.status.value}) == RunResult({right.task}, "
        f"{right.status.value})"
    ]

    def fields(names: tuple[str, ...]) -> None:
        for name in names:
            a, b = getattr(left, name), getattr(right, name)
            if a != b:
                lines.append(f"{name}: {_short(a)} != {_short(b)}")

    fields(_FIRST)
    if left.trace != right.trace:
        from pytest_harness.replay.report import diff_decisions

        lines.append("trace (- only on the right, + only on the left, ~ changed):")
        lines.extend(f"  {change.render()}" for change in diff_decisions(right.trace, left.trace))
    fields(_THEN)
    return lines


def _short(value: Any, width: int = 100) -> str:
    text = value.value if isinstance(value, RunStatus) else repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"
