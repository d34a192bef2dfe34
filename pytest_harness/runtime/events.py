"""Following a run's events: stored ones after a cursor, then live ones until the run stops.

The store is the source of truth: every event a driver commits gets a cursor in the same
write as the boundary it describes, so a subscriber that reads the store after a cursor sees
each committed event exactly once, in order, whichever process drove the run.

Two things make following prompt without a busy loop:

* **An in-process hub.** A driver in this process tells the `EventHub` after each commit, which
  wakes that run's subscribers at once; it also hands them *provisional* events before they
  commit: the `text_delta` pieces of an answer still streaming, and `attempt_reset`. A
  provisional event has no cursor (`""`); its stored copy (same `attempt` and `seq`) follows
  with the answer's commit and is not yielded again by the same stream.
* **Notifications** from a store that has them (`WatchingStore`: Postgres `LISTEN`/`NOTIFY`)
  for runs driven by other processes: the stream waits for one, reading the store again only
  when woken (and every `WATCHED_WAIT` seconds as a safety net).
* **Polling with backoff** otherwise (sqlite, or while the Postgres listener reconnects): the
  store is read again after 20 ms, doubling up to half a second while nothing arrives, and back
  to 20 ms when something does.

The stream ends once every event is yielded and the run is no longer `running` (it ended, or
waits for an approval, a resolution or a resume), or when nothing drives it any more: its driver
stopped without a final commit (a failed write released the lease) or, on a store with leases
that are renewed, the lease expired (the worker died). Such a run is interrupted; `recover()` or
`resume()` continues it, and a new stream follows it then. A subscriber that stops iterating
does not affect the run.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

from pytest_harness.runtime.arguments import known_run
from pytest_harness.store.base import (
    Event,
    EventDraft,
    RunRecord,
    Store,
    Watcher,
    WatchingStore,
    parse_cursor,
)

__all__ = ["EventHub", "follow"]

POLL_MIN = 0.02
"""Seconds before the store is read again when nothing woke the stream."""
POLL_MAX = 0.5
"""The longest wait between two reads of the store."""
WATCHED_WAIT = 5.0
"""The longest wait between two reads while the store's notifications flow."""


class _Subscription:
    """One stream's mailbox: a wake-up flag and the provisional events not yet yielded."""

    __slots__ = ("__weakref__", "live", "wake")

    def __init__(self) -> None:
        self.wake = asyncio.Event()
        self.live: deque[Event] = deque()


class EventHub:
    """Fans a run's events out to the streams of this process that follow it.

    Subscriptions are held weakly: a stream that is dropped without being closed stops
    receiving as soon as it is collected.
    """

    def __init__(self) -> None:
        self._subs: dict[str, weakref.WeakSet[_Subscription]] = {}

    def subscribe(self, run_id: str) -> _Subscription:
        """Start receiving the run's wake-ups and provisional events."""
        sub = _Subscription()
        self._subs.setdefault(run_id, weakref.WeakSet()).add(sub)
        return sub

    def unsubscribe(self, run_id: str, sub: _Subscription) -> None:
        """Stop receiving (idempotent)."""
        subs = self._subs.get(run_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[run_id]

    def watching(self, run_id: str) -> bool:
        """Whether a stream of this process follows the run."""
        subs = self._subs.get(run_id)
        return bool(subs)

    def committed(self, run_id: str) -> None:
        """Wake the run's streams: new events are in the store."""
        subs = self._subs.get(run_id)
        if subs:
            for sub in subs:
                sub.wake.set()

    def provisional(self, run_id: str, draft: EventDraft) -> None:
        """Hand the run's streams an event that is not committed yet (it has no cursor)."""
        subs = self._subs.get(run_id)
        if subs:
            event = Event(
                run_id=run_id, cursor="", kind=draft.kind, data=dict(draft.data), at=time.time()
            )
            for sub in subs:
                sub.live.append(event)
                sub.wake.set()


def _live_key(event: Event) -> tuple[str, Any, Any] | None:
    """The identity shared by a provisional event and its stored copy, if it can be both."""
    if event.kind in ("text_delta", "attempt_reset"):
        data = event.data
        return (event.kind, data.get("attempt"), data.get("seq"))
    return None


def _abandoned(record: RunRecord, store_kind: str) -> bool:
    """Whether a `running` run has no driver: its lease was released or (renewed leases) lapsed."""
    if record.lease_owner is None:
        return True
    # The memory store's leases are not renewed (one process, no other worker to keep out).
    return store_kind != "memory" and not record.lease_live(time.time())


async def follow(
    store: Store,
    hub: EventHub,
    run_id: str,
    after: str = "0",
    *,
    ready: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[Event]:
    """Yield the run's events after the cursor `after`, then live ones until it stops.

    `ready` is awaited first (the harness opens its store). `UnknownRun` when there is no such
    run (one whose id no store can hold included); `ValueError` when `after` is not a cursor.
    """
    parse_cursor(after)
    known_run(run_id)
    if ready is not None:
        await ready()
    sub = hub.subscribe(run_id)
    watching: AbstractAsyncContextManager[Watcher | None] = (
        store.watch(run_id, sub.wake.set) if isinstance(store, WatchingStore) else nullcontext(None)
    )
    try:
        async with watching as watcher:
            async for event in _follow(store, sub, run_id, after, watcher):
                yield event
    finally:
        hub.unsubscribe(run_id, sub)


async def _follow(
    store: Store, sub: _Subscription, run_id: str, cursor: str, watcher: Watcher | None
) -> AsyncIterator[Event]:
    delay = POLL_MIN
    seen: set[tuple[str, Any, Any]] = set()
    while True:
        sub.wake.clear()
        # The status first: when it says the run stopped, the commit that stopped it (and
        # every event before it) is already visible to the read of the events below.
        record = await store.get_run(run_id)
        status = record.status
        batch = await store.events(run_id, after=cursor)
        for event in batch:
            cursor = event.cursor
            key = _live_key(event)
            if key is not None:
                if key in seen:
                    continue  # yielded when it was provisional
                seen.add(key)
            yield event
        while sub.live:
            event = sub.live.popleft()
            key = _live_key(event)
            if key is not None and key in seen:
                continue  # its stored copy was yielded already
            if key is not None:
                seen.add(key)
            yield event
        if status != "running" or _abandoned(record, store.kind):
            return
        if batch:
            delay = POLL_MIN
        if sub.live:
            continue
        wait = delay
        if watcher is not None and watcher.connected:
            # Woken by notifications; read again anyway when the lease would lapse, to see
            # whether the run was abandoned.
            wait = WATCHED_WAIT
            if record.lease_expires is not None:
                wait = min(wait, max(POLL_MIN, record.lease_expires - time.time() + POLL_MIN))
        try:
            await asyncio.wait_for(sub.wake.wait(), wait)
        except TimeoutError:
            delay = min(delay * 2, POLL_MAX)
