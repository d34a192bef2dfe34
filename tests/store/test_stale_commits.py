"""The store contract for commits fenced off by a newer lease: they fail typed and write nothing.

Each store may pick among several statements for a commit (the SQLite store tries one that
leaves the status alone first, then one that writes it, then one that acts on a pending pause
or cancel); whichever it takes, a stale token or an unknown run must end the same way.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from pytest_harness.errors import StoreError, UnknownRun
from pytest_harness.store import EventDraft, JournalDraft, RunRecord, Store

from .test_contract import new_approval, new_run

pytestmark = pytest.mark.asyncio

ACTIVE = ("running", "awaiting_approval", "awaiting_resolution")


def entry(kind: str) -> JournalDraft:
    return JournalDraft(id=str(uuid.uuid4()), kind=kind, step=1, ts=time.time(), payload={})


async def snapshot(store: Store, run_id: str) -> tuple[RunRecord, list[str], list[str], int]:
    """What a write could have changed: the run, its events, approvals and journal."""
    return (
        await store.get_run(run_id),
        [e.kind for e in await store.events(run_id)],
        [a.approval_id for a in await store.approvals(run_id)],
        len(await store.journal(run_id)),
    )


async def taken_over(store: Store) -> tuple[str, int, int]:
    """A run whose first worker (token `old`) committed once, then lost it to `w2` (`new`)."""
    record, _ = await store.create_run(new_run(record=True, journal=[entry("run.started")]))
    old = await store.acquire_lease(record.run_id, "w1", 0.05)
    await store.commit(record.run_id, old, status="running", state={"steps": 1})
    await asyncio.sleep(0.1)
    new = await store.acquire_lease(record.run_id, "w2", 30)
    return record.run_id, old, new


@pytest.mark.parametrize("status", ["running", "awaiting_approval", "completed"])
@pytest.mark.parametrize("control", [None, "pause", "cancel"])
@pytest.mark.parametrize("carries", [False, True])
async def test_a_stale_commit_fails_typed_and_writes_nothing(
    store: Store, status: str, control: str | None, carries: bool
) -> None:
    run_id, old, new = await taken_over(store)
    if control is not None:
        await store.request_control(run_id, control, statuses=ACTIVE)
    before = await snapshot(store, run_id)
    with pytest.raises(StoreError, match="stale fencing token") as info:
        await store.commit(
            run_id,
            old,
            status=status,
            state={"steps": 99},
            events=[EventDraft("late", {})] if carries else (),
            approvals=[new_approval()] if carries else (),
            journal=[entry("late")] if carries else (),
            lease_ttl=30,
            release=status == "completed",
            clear_control=control,
        )
    assert info.value.stale is True
    assert f"run {run_id} is now held with token {new} by owner 'w2'" in str(info.value)
    assert f"token {old} was superseded" in str(info.value)
    assert await snapshot(store, run_id) == before
    assert before[0].control == control  # a stale commit neither clears nor returns it


async def test_a_commit_after_the_run_ended_under_another_worker_is_stale(store: Store) -> None:
    run_id, old, new = await taken_over(store)
    await store.commit(
        run_id, new, status="completed", state={"done": True}, events=[EventDraft("end")]
    )
    await store.commit(run_id, new, status="completed", state={"done": True}, release=True)
    before = await snapshot(store, run_id)
    for status in ("running", "completed"):
        with pytest.raises(StoreError, match="stale fencing token") as info:
            await store.commit(
                run_id, old, status=status, state={"steps": 2}, events=[EventDraft("late")]
            )
        assert info.value.stale is True
        assert "by no owner (lease released)" in str(info.value)
    got = await snapshot(store, run_id)
    assert got == before
    assert (got[0].status, got[0].state, got[1][-1]) == ("completed", {"done": True}, "end")


async def test_the_current_token_commits_whichever_statement_it_needs(store: Store) -> None:
    """The same run committed through every kind of write, each after another kind."""
    record, _ = await store.create_run(new_run(lease_owner="w1", lease_ttl=30))
    run_id = record.run_id
    steps = [
        ("running", None, None),  # status unchanged
        ("running", "pause", None),  # a request pending: returned, kept
        ("awaiting_approval", None, "pause"),  # status changed, the request cleared
        ("awaiting_approval", None, None),
        ("running", "cancel", "pause"),  # clearing another request keeps this one
        ("running", None, "cancel"),
        ("completed", None, None),
    ]
    for n, (status, control, clear) in enumerate(steps):
        if control is not None:
            await store.request_control(run_id, control, statuses=ACTIVE)
        returned = await store.commit(
            run_id,
            1,
            status=status,
            state={"n": n},
            events=[EventDraft("step", {"n": n})],
            clear_control=clear,
        )
        pending = (await store.get_run(run_id)).control
        assert returned == pending == (control if control != clear else None), n
        got = await store.get_run(run_id)
        assert (got.status, got.state, got.lease_token) == (status, {"n": n}, 1)
    assert [e.data.get("n") for e in await store.events(run_id)][1:] == list(range(len(steps)))


async def test_a_commit_to_an_unknown_run_is_unknown_run(store: Store) -> None:
    for status in ("running", "completed"):
        with pytest.raises(UnknownRun):
            await store.commit("run_missing", 1, status=status, state={}, events=[EventDraft("e")])
