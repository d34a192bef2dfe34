"""A caller cancelled while its job waits on the sqlite store's worker thread.

The store runs a write inline, on the event loop's thread, only while its worker thread is
idle (nothing queued or running on the one connection they share). It judged that by the
future of the last job queued, which is done at once when its caller is cancelled, while the
job queued before it may still be running: the loop's write then ran on the connection at the
same time, inside the worker's open transaction. Found by cancelling `harness.run(...)` at
every point of a recorded run ('cannot commit transaction - SQL statements in progress').
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from pytest_harness.errors import StoreError
from pytest_harness.store import EventDraft, NewRun, SQLiteStore

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    made = SQLiteStore(tmp_path / "state.db", synchronous="normal")
    await made.open()
    try:
        yield made
    finally:
        await made.close()


def new_run() -> NewRun:
    return NewRun(
        run_id=f"run_{uuid.uuid4().hex}",
        session_id="ses_1",
        task="orders",
        tenant=None,
        principal={"id": "ann"},
        input="hello",
        labels={},
        idempotency_key=None,
        status="running",
        state={"steps": 0},
        events=(EventDraft("run_started", {"task": "orders"}),),
        lease_owner="w1",
        lease_ttl=30,
    )


async def test_a_cancelled_queued_job_does_not_let_a_write_into_the_workers_transaction(
    store: SQLiteStore,
) -> None:
    run, _ = await store.create_run(new_run())
    started, go = threading.Event(), threading.Event()

    def failing_write(cursor: Any) -> None:
        started.set()  # the transaction is open on the worker thread
        assert go.wait(10)
        raise StoreError("this write fails: its transaction is rolled back")

    # A: a transaction on the worker thread (too big to run inline), held open
    held = asyncio.ensure_future(store._tx("hold", failing_write, size=10**6))
    assert await asyncio.to_thread(started.wait, 10)
    # B: queued behind it; its caller is cancelled before the worker reaches it
    queued = asyncio.ensure_future(store.get_run(run.run_id))
    await asyncio.sleep(0)
    queued.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await queued
    # C: a small write while A's transaction is still open
    release = asyncio.ensure_future(store.release_lease(run.run_id, run.lease_token))
    for _ in range(5):
        await asyncio.sleep(0)
    # before: C ran inline at once, inside A's transaction, and reported success
    assert not release.done()
    go.set()
    with pytest.raises(StoreError, match="this write fails"):
        await held
    await release
    # before: A's rollback took C's write with it: the lease was still held
    assert (await store.get_run(run.run_id)).lease_owner is None
