"""The contract every store keeps, run against each of them."""

from __future__ import annotations

import asyncio
import time
import uuid
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import pytest

from pytest_harness.errors import ResolutionError, RunBusy, StoreError, UnknownRun
from pytest_harness.store import (
    EventDraft,
    MemoryStore,
    NewApproval,
    NewRun,
    SQLiteStore,
    Store,
)
from pytest_harness.store.base import Sample

pytestmark = pytest.mark.asyncio

STORES = ["memory", "sqlite-full", "sqlite-normal", "postgres"]


def make_store(kind: str, folder: Path, request: pytest.FixtureRequest) -> Store:
    if kind == "memory":
        return MemoryStore()
    if kind == "postgres":
        from pytest_harness.postgres import PostgresStore

        dsn = request.getfixturevalue("pg_dsn")
        return PostgresStore(dsn, schema=request.getfixturevalue("pg_schema"), pool_max=4)
    synchronous: Literal["full", "normal"] = "full" if kind == "sqlite-full" else "normal"
    return SQLiteStore(folder / "state.db", synchronous=synchronous)


def new_run(**fields: Any) -> NewRun:
    values: dict[str, Any] = {
        "run_id": f"run_{uuid.uuid4().hex}",
        "session_id": "ses_1",
        "task": "orders",
        "tenant": "acme",
        "principal": {"id": "ann", "roles": ["clerk"], "tenant": "acme"},
        "input": "Refund $250 on order A-1001.",
        "labels": {"team": "desk"},
        "idempotency_key": None,
        "status": "running",
        "state": {"messages": [], "steps": 0},
        "events": (EventDraft("run_started", {"task": "orders"}),),
    }
    values.update(fields)
    return NewRun(**values)


def new_approval(approval_id: str | None = None, **fields: Any) -> NewApproval:
    values: dict[str, Any] = {
        "approval_id": approval_id or f"apr_{uuid.uuid4().hex}",
        "execution_key": "exk_1",
        "args_digest": "sha256:abc",
        "tool": "refund",
        "args": {"order_id": "A-1001", "amount": 250},
        "rule_id": "R1",
        "approvers": ("finance",),
        "requested_by": "ann",
    }
    values.update(fields)
    return NewApproval(**values)


async def kinds(store: Store, run_id: str) -> list[str]:
    return [event.kind for event in await store.events(run_id)]


# -- create and read --------------------------------------------------------------------------


async def test_create_and_get_run(store: Store) -> None:
    run = new_run(idempotency_key="req-1")
    before = time.time()
    record, created = await store.create_run(run)
    assert created is True
    got = await store.get_run(run.run_id)
    assert got == record
    assert got.run_id == run.run_id
    assert got.session_id == "ses_1"
    assert got.task == "orders"
    assert got.tenant == "acme"
    assert got.principal == {"id": "ann", "roles": ["clerk"], "tenant": "acme"}
    assert got.input == run.input
    assert got.labels == {"team": "desk"}
    assert got.idempotency_key == "req-1"
    assert got.status == "running"
    assert got.state == {"messages": [], "steps": 0}
    assert before <= got.created_at == got.updated_at <= time.time()
    assert (got.lease_owner, got.lease_token, got.lease_expires) == (None, 0, None)
    events = await store.events(run.run_id)
    assert [(e.run_id, e.kind, e.data) for e in events] == [
        (run.run_id, "run_started", {"task": "orders"})
    ]
    assert events[0].at == got.created_at


async def test_create_run_without_events_or_tenant(store: Store) -> None:
    record, created = await store.create_run(new_run(events=(), tenant=None))
    assert created
    assert record.tenant is None
    assert await store.events(record.run_id) == []


async def test_payloads_round_trip_as_json(store: Store) -> None:
    tricky = {
        "text": 'é ü 中文 🙂 \u2028 "quoted" \\ back',
        "float": 0.1 + 0.2,
        "big": 2**70,
        "neg": -7,
        "tiny": 5e-324,
        "none": None,
        "flags": [True, False],
        "nested": {"list": [1, [2, {"x": 3}]], "empty": {}},
        "tuple": (1, 2),
        "proxy": MappingProxyType({"a": 1}),
    }
    expected = {**tricky, "tuple": [1, 2], "proxy": {"a": 1}}
    record, _ = await store.create_run(
        new_run(state=tricky, labels={"é": "ü"}, events=[EventDraft("e", tricky)])
    )
    assert record.state == expected
    await store.commit(
        record.run_id, 0, status="running", state=tricky, events=[EventDraft("f", tricky)]
    )
    got = await store.get_run(record.run_id)
    assert got.state == expected
    assert got.labels == {"é": "ü"}
    assert [e.data for e in await store.events(record.run_id)] == [expected, expected]


async def test_records_do_not_alias_caller_objects(store: Store) -> None:
    state: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
    data: dict[str, Any] = {"n": [1]}
    record, _ = await store.create_run(new_run(state=state, events=[EventDraft("e", data)]))
    state["messages"].append("mutated")
    data["n"].append(2)
    record.state["messages"].append("mutated too")
    got = await store.get_run(record.run_id)
    assert got.state == {"messages": [{"role": "user", "content": "hi"}]}
    (event,) = await store.events(record.run_id)
    assert event.data == {"n": [1]}
    event.data["n"].append(3)
    assert (await store.events(record.run_id))[0].data == {"n": [1]}


async def test_status_enum_is_stored_as_its_value(store: Store) -> None:
    class Status(str, Enum):
        RUNNING = "running"
        COMPLETED = "completed"

    record, _ = await store.create_run(new_run(status=Status.RUNNING))
    assert type(record.status) is str and record.status == "running"
    await store.commit(record.run_id, 0, status=Status.COMPLETED, state={})
    got = await store.get_run(record.run_id)
    assert type(got.status) is str and got.status == "completed"
    assert [r.run_id for r in await store.list_runs(status=Status.COMPLETED)] == [record.run_id]


async def test_unserializable_payload_is_a_store_error_and_writes_nothing(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    circular: dict[str, object] = {}
    circular["self"] = circular
    for state in ({"x": object()}, {"x": float("nan")}, {"x": {1, 2}}, circular):
        with pytest.raises(StoreError, match=f"cannot store the state of run {record.run_id}"):
            await store.commit(record.run_id, 0, status="failed", state=state)
    with pytest.raises(StoreError, match="cannot store the events of run"):
        await store.commit(
            record.run_id, 0, status="failed", state={}, events=[EventDraft("e", {"x": object()})]
        )
    got = await store.get_run(record.run_id)
    assert (got.status, got.state) == ("running", record.state)
    assert await kinds(store, record.run_id) == ["run_started"]
    bad = new_run(principal={"id": object()})
    with pytest.raises(StoreError, match=f"the principal of run {bad.run_id}"):
        await store.create_run(bad)
    with pytest.raises(UnknownRun):
        await store.get_run(bad.run_id)


async def test_unknown_run(store: Store) -> None:
    missing = "run_missing"
    with pytest.raises(UnknownRun, match="run_missing") as info:
        await store.get_run(missing)
    assert info.value.run_id == missing
    with pytest.raises(UnknownRun):
        await store.acquire_lease(missing, "w1", 30)
    with pytest.raises(UnknownRun):
        await store.renew_lease(missing, 1, 30)
    with pytest.raises(UnknownRun):
        await store.release_lease(missing, 1)
    with pytest.raises(UnknownRun):
        await store.commit(missing, 0, status="running", state={})
    with pytest.raises(UnknownRun):
        await store.events(missing)
    with pytest.raises(UnknownRun):
        await store.approvals(missing)
    with pytest.raises(UnknownRun):
        await store.decide_approval(
            missing, "apr_1", decision="approve", approver="fiona", approver_roles=(), reason=None
        )
    with pytest.raises(UnknownRun):
        await store.session_runs("ses_1", before=missing)


async def test_duplicate_run_id_is_refused(store: Store) -> None:
    run = new_run()
    await store.create_run(run)
    with pytest.raises(StoreError, match=run.run_id):
        await store.create_run(new_run(run_id=run.run_id, state={"other": True}))
    assert (await store.get_run(run.run_id)).state == run.state
    assert await kinds(store, run.run_id) == ["run_started"]


# -- idempotency ------------------------------------------------------------------------------


async def test_idempotency_key_returns_the_first_run(store: Store) -> None:
    first, created = await store.create_run(new_run(idempotency_key="req-1", input="first"))
    assert created
    await store.commit(first.run_id, 0, status="completed", state={"output": "done"})
    again, created = await store.create_run(new_run(idempotency_key="req-1", input="second"))
    assert created is False
    assert again.run_id == first.run_id
    assert (again.input, again.status, again.state) == ("first", "completed", {"output": "done"})
    assert len(await store.list_runs()) == 1
    assert await kinds(store, first.run_id) == ["run_started"]


async def test_idempotency_key_is_scoped_by_tenant_and_task(store: Store) -> None:
    base, _ = await store.create_run(new_run(idempotency_key="k", tenant="acme", task="orders"))
    other_tenant, created = await store.create_run(
        new_run(idempotency_key="k", tenant="globex", task="orders")
    )
    assert created and other_tenant.run_id != base.run_id
    other_task, created = await store.create_run(
        new_run(idempotency_key="k", tenant="acme", task="billing")
    )
    assert created and other_task.run_id != base.run_id
    no_tenant, created = await store.create_run(new_run(idempotency_key="k", tenant=None))
    assert created and no_tenant.run_id not in (base.run_id, other_tenant.run_id)
    again, created = await store.create_run(new_run(idempotency_key="k", tenant=None))
    assert not created and again.run_id == no_tenant.run_id
    assert again.tenant is None


async def test_runs_without_a_key_are_never_deduplicated(store: Store) -> None:
    one, _ = await store.create_run(new_run(idempotency_key=None))
    two, created = await store.create_run(new_run(idempotency_key=None))
    assert created and one.run_id != two.run_id


async def test_concurrent_creates_with_one_key_make_one_run(store: Store) -> None:
    results = await asyncio.gather(
        *(store.create_run(new_run(idempotency_key="same")) for _ in range(10))
    )
    assert sum(created for _, created in results) == 1
    assert len({record.run_id for record, _ in results}) == 1


# -- leases -----------------------------------------------------------------------------------


async def test_acquire_lease(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    before = time.time()
    token = await store.acquire_lease(record.run_id, "w1", 30)
    assert token == 1
    got = await store.get_run(record.run_id)
    assert got.lease_owner == "w1" and got.lease_token == 1
    assert got.lease_expires is not None
    assert before + 30 <= got.lease_expires <= time.time() + 30


async def test_same_owner_reacquires_with_a_larger_token(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    first = await store.acquire_lease(record.run_id, "w1", 30)
    second = await store.acquire_lease(record.run_id, "w1", 30)
    assert second > first
    with pytest.raises(StoreError, match="stale fencing token"):
        await store.commit(record.run_id, first, status="running", state={})


async def test_live_lease_of_another_owner_is_busy(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    await store.acquire_lease(record.run_id, "w1", 30)
    with pytest.raises(RunBusy) as info:
        await store.acquire_lease(record.run_id, "w2", 30)
    busy = info.value
    assert (busy.run_id, busy.owner) == (record.run_id, "w1")
    assert 29 < busy.expires_in <= 30
    assert "w1" in str(busy)
    got = await store.get_run(record.run_id)
    assert (got.lease_owner, got.lease_token) == ("w1", 1)


async def test_expired_lease_can_be_taken_over(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    old = await store.acquire_lease(record.run_id, "w1", 0.05)
    await asyncio.sleep(0.1)
    new = await store.acquire_lease(record.run_id, "w2", 30)
    assert new > old
    got = await store.get_run(record.run_id)
    assert (got.lease_owner, got.lease_token) == ("w2", new)


async def test_stale_token_commit_is_rejected_and_writes_nothing(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    old = await store.acquire_lease(record.run_id, "w1", 0.05)
    await store.commit(record.run_id, old, status="running", state={"steps": 1})
    await asyncio.sleep(0.1)
    new = await store.acquire_lease(record.run_id, "w2", 30)
    with pytest.raises(StoreError) as info:
        await store.commit(
            record.run_id,
            old,
            status="completed",
            state={"steps": 99},
            events=[EventDraft("late", {})],
            approvals=[new_approval("apr_late")],
            lease_ttl=30,
        )
    message = str(info.value)
    assert f"run {record.run_id} is now held with token {new} by owner 'w2'" in message
    assert f"token {old} was superseded" in message
    got = await store.get_run(record.run_id)
    assert (got.status, got.state, got.lease_owner, got.lease_token) == (
        "running",
        {"steps": 1},
        "w2",
        new,
    )
    assert await kinds(store, record.run_id) == ["run_started"]
    assert await store.approvals(record.run_id) == []


async def test_commit_with_token_zero_on_a_run_never_leased(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    await store.commit(record.run_id, 0, status="running", state={"steps": 1}, lease_ttl=30)
    got = await store.get_run(record.run_id)
    assert got.state == {"steps": 1}
    assert (got.lease_owner, got.lease_expires) == (None, None)  # nobody holds it
    await store.acquire_lease(record.run_id, "w1", 30)
    with pytest.raises(StoreError, match="stale fencing token"):
        await store.commit(record.run_id, 0, status="running", state={})


async def test_commit_extends_a_held_lease(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    token = await store.acquire_lease(record.run_id, "w1", 1)
    first = (await store.get_run(record.run_id)).lease_expires
    await store.commit(record.run_id, token, status="running", state={})
    assert (await store.get_run(record.run_id)).lease_expires == first  # no ttl: unchanged
    await store.commit(record.run_id, token, status="running", state={}, lease_ttl=60)
    got = await store.get_run(record.run_id)
    assert got.lease_expires is not None and got.lease_expires >= got.updated_at + 59.9
    assert got.lease_owner == "w1"


async def test_run_created_leased_is_held_from_the_start(store: Store) -> None:
    record, created = await store.create_run(new_run(lease_owner="w1", lease_ttl=30))
    assert created and (record.lease_owner, record.lease_token) == ("w1", 1)
    assert record.lease_expires is not None and record.lease_expires > time.time() + 29
    got = await store.get_run(record.run_id)
    assert (got.lease_owner, got.lease_token) == ("w1", 1)
    with pytest.raises(RunBusy):
        await store.acquire_lease(record.run_id, "w2", 30)
    assert record.run_id not in await store.expired_runs()
    await store.commit(record.run_id, 1, status="running", state={"n": 1})


async def test_commit_can_release_the_lease_in_the_same_write(store: Store) -> None:
    record, _ = await store.create_run(new_run(lease_owner="w1", lease_ttl=30))
    await store.commit(
        record.run_id, 1, status="completed", state={"done": True}, lease_ttl=30, release=True
    )
    got = await store.get_run(record.run_id)
    assert (got.status, got.state, got.lease_owner, got.lease_expires) == (
        "completed",
        {"done": True},
        None,
        None,
    )
    assert await store.acquire_lease(record.run_id, "w2", 30) == 2


async def test_renew_lease(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    token = await store.acquire_lease(record.run_id, "w1", 1)
    await store.renew_lease(record.run_id, token, 60)
    got = await store.get_run(record.run_id)
    assert got.lease_expires is not None and got.lease_expires > time.time() + 59
    assert got.lease_token == token
    newer = await store.acquire_lease(record.run_id, "w1", 30)
    with pytest.raises(StoreError, match="stale fencing token"):
        await store.renew_lease(record.run_id, token, 60)
    await store.release_lease(record.run_id, newer)
    with pytest.raises(StoreError, match="lease released"):
        await store.renew_lease(record.run_id, newer, 60)


async def test_release_lease(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    old = await store.acquire_lease(record.run_id, "w1", 30)
    new = await store.acquire_lease(record.run_id, "w1", 30)
    await store.release_lease(record.run_id, old)  # stale: silently nothing
    got = await store.get_run(record.run_id)
    assert (got.lease_owner, got.lease_token) == ("w1", new)
    await store.release_lease(record.run_id, new)
    got = await store.get_run(record.run_id)
    assert (got.lease_owner, got.lease_expires, got.lease_token) == (None, None, new)
    await store.release_lease(record.run_id, new)  # twice is fine
    other = await store.acquire_lease(record.run_id, "w2", 30)  # free for anyone now
    assert other == new + 1


async def test_lease_ttl_must_be_positive(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    for ttl in (0, -1.0):
        with pytest.raises(ValueError, match="ttl"):
            await store.acquire_lease(record.run_id, "w1", ttl)
        with pytest.raises(ValueError, match="ttl"):
            await store.renew_lease(record.run_id, 0, ttl)


# -- commit -----------------------------------------------------------------------------------


async def test_commit_writes_status_state_events_and_approvals_together(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    token = await store.acquire_lease(record.run_id, "w1", 30)
    before = time.time()
    await store.commit(
        record.run_id,
        token,
        status="awaiting_approval",
        state={"steps": 2, "pending": ["apr_1"]},
        events=[EventDraft("tool_proposed", {"tool": "refund"}), EventDraft("status_changed")],
        approvals=[
            new_approval("apr_1", self_approve=True),
            new_approval("apr_2", approvers=("finance", "ops")),
        ],
    )
    got = await store.get_run(record.run_id)
    assert (got.status, got.state) == ("awaiting_approval", {"steps": 2, "pending": ["apr_1"]})
    assert before <= got.updated_at <= time.time()
    assert got.created_at == record.created_at
    events = await store.events(record.run_id)
    assert [(e.kind, e.data) for e in events[1:]] == [
        ("tool_proposed", {"tool": "refund"}),
        ("status_changed", {}),
    ]
    assert all(e.at == got.updated_at for e in events[1:])
    rows = await store.approvals(record.run_id)
    assert [r.approval_id for r in rows] == ["apr_1", "apr_2"]
    first = rows[0]
    assert first.run_id == record.run_id
    assert (first.execution_key, first.args_digest, first.tool) == ("exk_1", "sha256:abc", "refund")
    assert first.args == {"order_id": "A-1001", "amount": 250}
    assert (first.rule_id, first.approvers, first.requested_by) == ("R1", ("finance",), "ann")
    assert first.self_approve is True and rows[1].self_approve is False
    assert rows[1].approvers == ("finance", "ops")
    assert (first.status, first.approver, first.approver_roles) == ("pending", None, ())
    assert (first.reason, first.decided_at) == (None, None)


async def test_failed_commit_writes_nothing(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    await store.commit(
        record.run_id, 0, status="running", state={"steps": 1}, approvals=[new_approval("apr_1")]
    )
    with pytest.raises(StoreError, match="apr_1"):
        await store.commit(
            record.run_id,
            0,
            status="awaiting_approval",
            state={"steps": 2},
            events=[EventDraft("should_not_exist")],
            approvals=[new_approval("apr_2"), new_approval("apr_1")],
        )
    got = await store.get_run(record.run_id)
    assert (got.status, got.state) == ("running", {"steps": 1})
    assert await kinds(store, record.run_id) == ["run_started"]
    assert [r.approval_id for r in await store.approvals(record.run_id)] == ["apr_1"]
    # the same ids in one commit are refused too
    with pytest.raises(StoreError, match="apr_3"):
        await store.commit(
            record.run_id,
            0,
            status="running",
            state={},
            approvals=[new_approval("apr_3"), new_approval("apr_3")],
        )
    assert [r.approval_id for r in await store.approvals(record.run_id)] == ["apr_1"]


async def test_approvals_are_listed_oldest_first(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    assert await store.approvals(record.run_id) == []
    for batch in (["apr_c", "apr_a"], ["apr_b"]):
        await store.commit(
            record.run_id, 0, status="running", state={}, approvals=[new_approval(i) for i in batch]
        )
    other, _ = await store.create_run(new_run())
    await store.commit(other.run_id, 0, status="running", state={}, approvals=[new_approval()])
    assert [r.approval_id for r in await store.approvals(record.run_id)] == [
        "apr_c",
        "apr_a",
        "apr_b",
    ]


# -- events -----------------------------------------------------------------------------------


async def test_event_cursors_increase_across_the_store(store: Store) -> None:
    a, _ = await store.create_run(new_run())
    b, _ = await store.create_run(new_run())
    for i in range(3):
        for run in (a, b):
            await store.commit(
                run.run_id,
                0,
                status="running",
                state={},
                events=[EventDraft("step", {"i": i}), EventDraft("mark", {"i": i})],
            )
    events_a = await store.events(a.run_id)
    events_b = await store.events(b.run_id)
    assert [e.kind for e in events_a] == ["run_started"] + ["step", "mark"] * 3
    assert all(e.run_id == a.run_id for e in events_a)
    cursors = [int(e.cursor) for e in events_a + events_b]
    assert len(set(cursors)) == len(cursors)
    assert [int(e.cursor) for e in events_a] == sorted(int(e.cursor) for e in events_a)
    assert all(e.cursor == str(int(e.cursor)) for e in events_a)


async def test_reading_after_a_cursor_has_no_gaps_or_repeats(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    for i in range(5):
        await store.commit(
            record.run_id, 0, status="running", state={}, events=[EventDraft("step", {"i": i})]
        )
    every = await store.events(record.run_id)
    for index, event in enumerate(every):
        assert await store.events(record.run_id, after=event.cursor) == every[index + 1 :]
    assert await store.events(record.run_id, after="0") == every
    assert await store.events(record.run_id, limit=2) == every[:2]
    assert await store.events(record.run_id, after=every[1].cursor, limit=2) == every[2:4]
    assert await store.events(record.run_id, limit=0) == []
    assert await store.events(record.run_id, after=every[-1].cursor) == []
    assert await store.events(record.run_id, after="9" * 30) == []
    # resuming from the last cursor sees exactly the events written since
    last = every[-1].cursor
    await store.commit(record.run_id, 0, status="running", state={}, events=[EventDraft("new")])
    assert [e.kind for e in await store.events(record.run_id, after=last)] == ["new"]


@pytest.mark.parametrize("cursor", ["abc", "-1", "1.5", "", " 1", "\u0661"])
async def test_malformed_cursor_is_a_value_error(store: Store, cursor: str) -> None:
    record, _ = await store.create_run(new_run())
    with pytest.raises(ValueError, match="malformed event cursor") as info:
        await store.events(record.run_id, after=cursor)
    assert repr(cursor) in str(info.value)


async def test_concurrent_commits_keep_every_event(store: Store) -> None:
    runs = [(await store.create_run(new_run()))[0] for _ in range(5)]

    async def drive(run_id: str) -> None:
        token = await store.acquire_lease(run_id, f"w-{run_id}", 30)
        for i in range(10):
            await store.commit(
                run_id,
                token,
                status="running",
                state={"i": i},
                events=[EventDraft("step", {"i": i})],
            )
        await store.release_lease(run_id, token)

    await asyncio.gather(*(drive(run.run_id) for run in runs))
    seen: list[int] = []
    for run in runs:
        events = await store.events(run.run_id)
        assert [e.data.get("i") for e in events[1:]] == list(range(10))
        seen.extend(int(e.cursor) for e in events)
    assert len(seen) == len(set(seen)) == 55


# -- approvals --------------------------------------------------------------------------------


async def awaiting(store: Store, *approval_ids: str) -> str:
    record, _ = await store.create_run(new_run())
    await store.commit(
        record.run_id,
        0,
        status="awaiting_approval",
        state={},
        approvals=[new_approval(i) for i in approval_ids],
    )
    return record.run_id


async def test_decide_approval(store: Store) -> None:
    run_id = await awaiting(store, "apr_1")
    before = time.time()
    row = await store.decide_approval(
        run_id,
        "apr_1",
        decision="approve",
        approver="fiona",
        approver_roles=("finance",),
        reason="checked the order",
        event=EventDraft("approval_answered", {"approval_id": "apr_1", "approver": "fiona"}),
    )
    assert (row.approval_id, row.run_id, row.status) == ("apr_1", run_id, "approve")
    assert (row.approver, row.approver_roles, row.reason) == (
        "fiona",
        ("finance",),
        "checked the order",
    )
    assert row.decided_at is not None and before <= row.decided_at <= time.time()
    assert row.tool == "refund" and row.args == {"order_id": "A-1001", "amount": 250}
    assert await store.approvals(run_id) == [row]
    (event,) = (await store.events(run_id))[-1:]
    assert (event.kind, event.data) == (
        "approval_answered",
        {"approval_id": "apr_1", "approver": "fiona"},
    )
    assert event.at == row.decided_at


async def test_second_answer_names_who_answered_first(store: Store) -> None:
    run_id = await awaiting(store, "apr_1")
    await store.decide_approval(
        run_id, "apr_1", decision="decline", approver="fiona", approver_roles=(), reason=None
    )
    count = len(await store.events(run_id))
    with pytest.raises(ResolutionError) as info:
        await store.decide_approval(
            run_id,
            "apr_1",
            decision="approve",
            approver="bob",
            approver_roles=("finance",),
            reason=None,
            event=EventDraft("approval_answered"),
        )
    assert str(info.value) == (
        f"approval apr_1 of run {run_id} was already answered: decline by fiona"
    )
    (row,) = await store.approvals(run_id)
    assert (row.status, row.approver) == ("decline", "fiona")
    assert len(await store.events(run_id)) == count  # the refused answer wrote no event


async def test_concurrent_answers_have_one_winner(store: Store) -> None:
    run_id = await awaiting(store, "apr_1")
    results = await asyncio.gather(
        *(
            store.decide_approval(
                run_id, "apr_1", decision="approve", approver=name, approver_roles=(), reason=None
            )
            for name in ("fiona", "bob", "carl")
        ),
        return_exceptions=True,
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1 and len(losers) == 2
    assert all(isinstance(e, ResolutionError) for e in losers)
    assert all(f"approve by {winners[0].approver}" in str(e) for e in losers)


async def test_unknown_approval_is_a_resolution_error(store: Store) -> None:
    run_id = await awaiting(store, "apr_1")
    other_run = await awaiting(store, "apr_2")
    for approval_id in ("apr_nope", "apr_2"):  # apr_2 belongs to another run
        with pytest.raises(ResolutionError) as info:
            await store.decide_approval(
                run_id,
                approval_id,
                decision="approve",
                approver="f",
                approver_roles=(),
                reason=None,
            )
        assert str(info.value) == f"run {run_id} has no approval {approval_id!r}"
    assert (await store.approvals(other_run))[0].status == "pending"


async def test_decision_must_be_approve_or_decline(store: Store) -> None:
    run_id = await awaiting(store, "apr_1")
    with pytest.raises(ValueError, match="'maybe'"):
        await store.decide_approval(
            run_id,
            "apr_1",
            decision="maybe",  # type: ignore[arg-type]
            approver="f",
            approver_roles=(),
            reason=None,
        )
    assert (await store.approvals(run_id))[0].status == "pending"


# -- sessions and listings --------------------------------------------------------------------


async def test_session_runs_in_creation_order(store: Store) -> None:
    ids = []
    for i in range(4):
        record, _ = await store.create_run(new_run(session_id="ses_a", input=f"turn {i}"))
        ids.append(record.run_id)
        await store.create_run(new_run(session_id="ses_b"))
    assert [r.run_id for r in await store.session_runs("ses_a")] == ids
    assert [r.input for r in await store.session_runs("ses_a")] == [f"turn {i}" for i in range(4)]
    assert [r.run_id for r in await store.session_runs("ses_a", before=ids[2])] == ids[:2]
    assert await store.session_runs("ses_a", before=ids[0]) == []
    assert await store.session_runs("ses_none") == []
    # a commit does not change the order
    await store.commit(ids[0], 0, status="completed", state={})
    assert [r.run_id for r in await store.session_runs("ses_a")] == ids


async def test_list_runs_newest_first_with_filters(store: Store) -> None:
    made = []
    for task, tenant in [
        ("orders", "acme"),
        ("billing", "acme"),
        ("orders", "globex"),
        ("orders", None),
    ]:
        record, _ = await store.create_run(new_run(task=task, tenant=tenant))
        made.append(record.run_id)
    await store.commit(made[1], 0, status="completed", state={})
    listed = [r.run_id for r in await store.list_runs()]
    assert listed == made[::-1]
    assert [r.run_id for r in await store.list_runs(task="orders")] == [made[3], made[2], made[0]]
    assert [r.run_id for r in await store.list_runs(tenant="acme")] == [made[1], made[0]]
    assert [r.run_id for r in await store.list_runs(status="completed")] == [made[1]]
    assert [
        r.run_id for r in await store.list_runs(status="running", task="orders", tenant="globex")
    ] == [made[2]]
    assert await store.list_runs(task="nothing") == []
    assert [r.run_id for r in await store.list_runs(limit=2)] == made[:1:-1]
    assert await store.list_runs(limit=0) == []
    with pytest.raises(ValueError, match="limit"):
        await store.list_runs(limit=-1)


async def test_expired_runs(store: Store) -> None:
    never_leased, _ = await store.create_run(new_run())
    live, _ = await store.create_run(new_run())
    expired, _ = await store.create_run(new_run())
    released, _ = await store.create_run(new_run())
    done, _ = await store.create_run(new_run())
    waiting, _ = await store.create_run(new_run())
    await store.acquire_lease(live.run_id, "w1", 30)
    await store.acquire_lease(expired.run_id, "w1", 0.05)
    token = await store.acquire_lease(released.run_id, "w1", 30)
    await store.release_lease(released.run_id, token)
    await store.commit(done.run_id, 0, status="completed", state={})
    await store.commit(waiting.run_id, 0, status="awaiting_approval", state={})
    await asyncio.sleep(0.1)
    assert await store.expired_runs() == [never_leased.run_id, expired.run_id, released.run_id]
    later = time.time() + 60
    assert await store.expired_runs(now=later) == [
        never_leased.run_id,
        live.run_id,
        expired.run_id,
        released.run_id,
    ]


async def test_claim_run_leases_the_oldest_claimable_run(store: Store) -> None:
    live, _ = await store.create_run(new_run())
    expired, _ = await store.create_run(new_run())
    other_task, _ = await store.create_run(new_run(task="billing"))
    done, _ = await store.create_run(new_run())
    never, _ = await store.create_run(new_run())
    await store.acquire_lease(live.run_id, "w1", 30)
    old = await store.acquire_lease(expired.run_id, "w1", 0.05)
    was = (await store.get_run(expired.run_id)).lease_expires
    await store.commit(done.run_id, 0, status="completed", state={})
    await asyncio.sleep(0.1)
    claim = await store.claim_run("w2", 30, tasks=["orders"])
    assert claim is not None
    claimed, previous = claim
    assert claimed.run_id == expired.run_id and previous == was
    assert (claimed.lease_owner, claimed.lease_token) == ("w2", old + 1)
    assert claimed.lease_expires is not None and claimed.lease_expires > time.time() + 29
    assert await store.get_run(expired.run_id) == claimed
    with pytest.raises(StoreError, match="stale fencing token"):
        await store.commit(expired.run_id, old, status="running", state={})
    assert await store.claim_run("w2", 30, tasks=["orders"], exclude=[never.run_id]) is None
    second = await store.claim_run("w3", 30, tasks=["orders", "billing"])
    assert second is not None and second[0].run_id == other_task.run_id
    third = await store.claim_run("w3", 30, tasks=["orders", "billing"])
    assert third is not None and third[1] is None  # nobody held it before
    assert (third[0].run_id, third[0].lease_token) == (never.run_id, 1)
    assert await store.claim_run("w3", 30, tasks=["orders", "billing"]) is None
    later = await store.claim_run("w4", 30, tasks=["orders"], now=time.time() + 60)
    assert later is not None and later[0].run_id == live.run_id
    with pytest.raises(ValueError, match="ttl"):
        await store.claim_run("w4", 0, tasks=["orders"])


async def test_claim_run_takes_a_run_whose_approvals_were_all_answered(store: Store) -> None:
    answered = await awaiting(store, "apr_a1", "apr_a2")
    half = await awaiting(store, "apr_h1", "apr_h2")
    unanswered = await awaiting(store, "apr_u1")
    for run_id, approval_id in ((answered, "apr_a1"), (answered, "apr_a2"), (half, "apr_h1")):
        await store.decide_approval(
            run_id,
            approval_id,
            decision="approve",
            approver="fiona",
            approver_roles=(),
            reason=None,
        )
    # Within the grace the answering process may still resume it itself.
    assert await store.claim_run("w1", 30, tasks=["orders"], grace=60) is None
    claim = await store.claim_run("w1", 30, tasks=["orders"], now=time.time() + 61, grace=60)
    assert claim is not None and claim[0].run_id == answered
    assert (claim[0].status, claim[0].lease_owner) == ("awaiting_approval", "w1")
    assert await store.claim_run("w2", 30, tasks=["orders"]) is None  # w1's lease is live
    assert unanswered and half  # never claimable while an approval is pending


async def test_claim_run_takes_a_run_whose_call_was_declined_with_requests_left_moot(
    store: Store,
) -> None:
    async def waiting(*keys: str) -> tuple[str, list[str]]:
        record, _ = await store.create_run(new_run())
        approvals = [new_approval(execution_key=key) for key in keys]
        await store.commit(
            record.run_id, 0, status="awaiting_approval", state={}, approvals=approvals
        )
        return record.run_id, [a.approval_id for a in approvals]

    # One call, two rules (finance and legal): a decline settles it, the other request is moot.
    moot, (declined, _) = await waiting("exk_1", "exk_1")
    # Two calls: a decline of one leaves the other call's request open.
    other, (declined_other, _) = await waiting("exk_1", "exk_2")
    for run_id, approval_id in ((moot, declined), (other, declined_other)):
        await store.decide_approval(
            run_id,
            approval_id,
            decision="decline",
            approver="fiona",
            approver_roles=(),
            reason=None,
        )
    later = time.time() + 61
    claim = await store.claim_run("w1", 30, tasks=["orders"], now=later, grace=60)
    assert claim is not None and claim[0].run_id == moot
    rest = await store.claim_run("w2", 30, tasks=["orders"], exclude=[moot], now=later, grace=60)
    assert rest is None  # `other` still has an open request


async def test_concurrent_claims_never_share_a_run(store: Store) -> None:
    made = [(await store.create_run(new_run()))[0].run_id for _ in range(6)]
    claims = await asyncio.gather(
        *(store.claim_run(f"w{i}", 30, tasks=["orders"]) for i in range(10))
    )
    got = [c[0].run_id for c in claims if c is not None]
    assert sorted(got) == sorted(made)
    owners = {c[0].run_id: c[0].lease_owner for c in claims if c is not None}
    for run_id in made:
        assert (await store.get_run(run_id)).lease_owner == owners[run_id]


# -- control requests (pause, cancel) --------------------------------------------------------

ACTIVE = ("running", "awaiting_approval", "awaiting_resolution")


async def test_a_new_run_has_no_control_request(store: Store) -> None:
    record, _ = await store.create_run(new_run(lease_owner="w1", lease_ttl=30))
    assert record.control is None
    assert (await store.get_run(record.run_id)).control is None
    assert await store.commit(record.run_id, 1, status="running", state={}) is None


async def test_request_control_is_returned_by_the_next_commit(store: Store) -> None:
    record, _ = await store.create_run(new_run(lease_owner="w1", lease_ttl=30))
    # No lease is needed: the request is all it writes.
    got = await store.request_control(record.run_id, "pause", statuses=ACTIVE)
    assert (got.control, got.status, got.lease_owner, got.lease_token) == (
        "pause",
        "running",
        "w1",
        1,
    )
    assert (await store.get_run(record.run_id)).control == "pause"
    assert await store.commit(record.run_id, 1, status="running", state={"n": 1}) == "pause"
    # Still pending until a commit acts on it.
    assert await store.commit(record.run_id, 1, status="running", state={"n": 2}) == "pause"
    assert (
        await store.commit(
            record.run_id, 1, status="paused", state={"n": 3}, release=True, clear_control="pause"
        )
        is None
    )
    got = await store.get_run(record.run_id)
    assert (got.status, got.control, got.state) == ("paused", None, {"n": 3})


async def test_a_cancel_is_never_replaced_by_a_pause(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    assert (await store.request_control(record.run_id, "cancel", statuses=ACTIVE)).control == (
        "cancel"
    )
    assert (await store.request_control(record.run_id, "pause", statuses=ACTIVE)).control == (
        "cancel"
    )
    assert (await store.get_run(record.run_id)).control == "cancel"


async def test_a_pause_is_replaced_by_a_cancel(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    await store.request_control(record.run_id, "pause", statuses=ACTIVE)
    got = await store.request_control(record.run_id, "cancel", statuses=ACTIVE)
    assert got.control == "cancel"


async def test_clearing_keeps_a_request_that_replaced_the_one_acted_on(store: Store) -> None:
    record, _ = await store.create_run(new_run(lease_owner="w1", lease_ttl=30))
    await store.request_control(record.run_id, "pause", statuses=ACTIVE)
    assert await store.commit(record.run_id, 1, status="running", state={}) == "pause"
    await store.request_control(record.run_id, "cancel", statuses=ACTIVE)  # meanwhile
    kept = await store.commit(
        record.run_id, 1, status="paused", state={}, release=True, clear_control="pause"
    )
    assert kept == "cancel"
    assert (await store.get_run(record.run_id)).control == "cancel"


async def test_request_control_only_in_the_given_statuses(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    await store.commit(record.run_id, 0, status="completed", state={"done": True})
    got = await store.request_control(record.run_id, "cancel", statuses=ACTIVE)
    assert (got.status, got.control, got.state) == ("completed", None, {"done": True})
    paused, _ = await store.create_run(new_run())
    await store.commit(paused.run_id, 0, status="paused", state={})
    assert (await store.request_control(paused.run_id, "pause", statuses=ACTIVE)).control is None
    got = await store.request_control(paused.run_id, "cancel", statuses=(*ACTIVE, "paused"))
    assert got.control == "cancel"


async def test_a_stale_commit_does_not_clear_or_return_the_request(store: Store) -> None:
    record, _ = await store.create_run(new_run(lease_owner="w1", lease_ttl=30))
    await store.request_control(record.run_id, "pause", statuses=ACTIVE)
    await store.acquire_lease(record.run_id, "w1", 30)  # token 2
    with pytest.raises(StoreError, match="stale fencing token"):
        await store.commit(record.run_id, 1, status="paused", state={}, clear_control="pause")
    assert (await store.get_run(record.run_id)).control == "pause"


async def test_request_control_errors(store: Store) -> None:
    with pytest.raises(UnknownRun):
        await store.request_control("run_nope", "pause", statuses=ACTIVE)
    record, _ = await store.create_run(new_run())
    with pytest.raises(ValueError, match="'pause' or 'cancel', got 'stop'"):
        await store.request_control(record.run_id, "stop", statuses=ACTIVE)
    assert (await store.get_run(record.run_id)).control is None


# -- lifecycle --------------------------------------------------------------------------------


async def test_closed_store_refuses_calls_until_opened_again(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        await store.get_run(record.run_id)
    with pytest.raises(StoreError, match="closed"):
        await store.create_run(new_run())
    await store.open()
    await store.open()  # idempotent
    assert (await store.get_run(record.run_id)).run_id == record.run_id


@pytest.mark.parametrize("kind", STORES)
async def test_store_opens_on_first_use(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = make_store(kind, tmp_path, request)
    assert isinstance(store, Store)
    assert store.kind == kind.split("-")[0]
    try:
        record, created = await store.create_run(new_run())
        assert created
        assert (await store.get_run(record.run_id)).run_id == record.run_id
    finally:
        await store.close()


# -- online eval samples ----------------------------------------------------------------------


def sample(run_id: str, grader: str, at: float, **fields: Any) -> Sample:
    values: dict[str, Any] = {
        "run_id": run_id,
        "task": "orders",
        "grader": grader,
        "score": 1.0,
        "passed": True,
        "detail": "matched",
        "error": None,
        "created_at": at,
    }
    values.update(fields)
    return Sample(**values)


async def test_samples_round_trip_newest_first(store: Store) -> None:
    first = sample("run_1", "polite", 100.0)
    failed = sample("run_2", "judged", 200.0, score=None, passed=False, detail=None, error="no")
    await store.add_samples([first, failed])
    assert await store.samples() == [failed, first]
    assert await store.samples(limit=1) == [failed]
    assert await store.samples(limit=0) == []
    assert await store.samples(limit=None) == [failed, first]


async def test_samples_filters(store: Store) -> None:
    a = sample("run_1", "polite", 100.0)
    b = sample("run_1", "judged", 150.0, task="refunds")
    c = sample("run_2", "polite", 200.0)
    await store.add_samples([a, b, c])
    assert await store.samples(grader="polite") == [c, a]
    assert await store.samples(task="refunds") == [b]
    assert await store.samples(since=150.0) == [c, b]
    assert await store.samples(until=150.0) == [a]
    assert await store.samples(since=100.0, until=200.0, grader="polite") == [a]
    assert await store.samples(task="nothing") == []


async def test_a_sample_of_a_run_and_grader_is_written_once(store: Store) -> None:
    first = sample("run_1", "polite", 100.0, score=1.0)
    again = sample("run_1", "polite", 300.0, score=0.0, passed=False)
    await store.add_samples([first])
    await store.add_samples([again, sample("run_1", "judged", 300.0)])
    got = await store.samples(grader="polite")
    assert got == [first]
    assert len(await store.samples()) == 2


async def test_a_sample_whose_score_cannot_be_stored_writes_nothing(store: Store) -> None:
    good = sample("run_1", "polite", 100.0)
    bad = sample("run_1", "judged", 100.0, score=float("nan"))
    with pytest.raises(StoreError, match=r"judged.*finite number"):
        await store.add_samples([good, bad])
    assert await store.samples() == []
    with pytest.raises(ValueError, match="limit"):
        await store.samples(limit=-1)


async def test_samples_on_a_closed_store_raise(store: Store) -> None:
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.add_samples([sample("run_1", "polite", 1.0)])
    with pytest.raises(StoreError, match="closed"):
        await store.samples()
