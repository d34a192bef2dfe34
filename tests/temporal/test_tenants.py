"""On Temporal, a session and an idempotency key belong to one tenant, as on the other stores."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

import pytest_harness as ph
from pytest_harness.temporal.sessions import keyed_id, session_slots, slot_id
from tests.temporal.helpers import WorkerProcess, make_spec

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]


async def test_another_tenant_neither_joins_the_session_nor_gets_the_keyed_run(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = make_spec(tmp_path, temporal_server)
    with WorkerProcess(spec):
        async with ph.load(spec) as harness:
            key, session = f"k-{uuid.uuid4().hex}", f"ses-{uuid.uuid4().hex}"
            mine = await harness.run(
                "refunds", "refund A-1", principal="ann", tenant="a", idempotency_key=key
            )
            assert mine.status is ph.RunStatus.AWAITING_APPROVAL
            again = await harness.run(
                "refunds", "refund A-1", principal="ann", tenant="a", idempotency_key=key
            )
            theirs = await harness.run(
                "refunds", "refund A-1", principal="eve", tenant="b", idempotency_key=key
            )
            assert again.run_id == mine.run_id != theirs.run_id
            assert theirs.status is ph.RunStatus.AWAITING_APPROVAL
            first = await harness.run(
                "small_refunds", "refund 5", principal="ann", tenant="a", session_id=session
            )
            assert first.status is ph.RunStatus.COMPLETED, first.error
            for tenant in ("b", None):
                with pytest.raises(ph.SessionDenied, match=f"session '{session}' belongs"):
                    await harness.run(
                        "small_refunds",
                        "refund 6",
                        principal="eve",
                        tenant=tenant,
                        session_id=session,
                    )
            second = await harness.run(
                "small_refunds", "refund 7", principal="bob", tenant="a", session_id=session
            )
            assert second.status is ph.RunStatus.COMPLETED, second.error
            assert second.session_id == session
            for run in (mine, theirs):
                await harness.cancel(run.run_id)


async def test_a_run_an_earlier_version_keyed_is_found_by_its_tenant_and_task(
    temporal_server: str,
) -> None:
    client = await Client.connect(temporal_server)
    key = f"k-{uuid.uuid4().hex}"
    earlier = f"run_{uuid.uuid5(uuid.NAMESPACE_URL, key).hex}"  # the id derived before
    fresh = await keyed_id(client, "a", "refunds", key)
    assert fresh != earlier
    handle = await client.start_workflow(
        "HarnessRun",
        id=earlier,
        task_queue=f"nobody-{uuid.uuid4().hex}",  # no worker: it only has to exist
        memo={"tenant": "a", "task": "refunds"},
    )
    try:
        assert await keyed_id(client, "a", "refunds", key) == earlier
        assert await keyed_id(client, "b", "refunds", key) != earlier
        assert await keyed_id(client, "a", "small_refunds", key) != earlier
        assert await keyed_id(client, None, "refunds", key) == await keyed_id(
            client, None, "refunds", key
        )
    finally:
        await handle.terminate()


async def test_a_run_of_no_tenant_is_one_whose_memo_names_none(temporal_server: str) -> None:
    """Temporal drops a null memo value: a memo without `tenant` is a tenant-less run's."""
    client = await Client.connect(temporal_server)
    key, session = f"k-{uuid.uuid4().hex}", f"ses-{uuid.uuid4().hex}"
    queue = f"nobody-{uuid.uuid4().hex}"
    earlier = f"run_{uuid.uuid5(uuid.NAMESPACE_URL, key).hex}"
    started = [
        await client.start_workflow(
            "HarnessRun",
            id=run_id,
            task_queue=queue,
            memo={"task": "refunds", "session": session, "tenant": None},
        )
        for run_id in (earlier, slot_id(queue, session, 1))
    ]
    try:
        assert "tenant" not in await (await started[0].describe()).memo()
        assert await keyed_id(client, None, "refunds", key) == earlier
        assert await keyed_id(client, "a", "refunds", key) != earlier
        assert await session_slots(client, queue, session, None) == ([started[1].id], 2)
        with pytest.raises(ph.SessionDenied, match=f"session '{session}' belongs"):
            await session_slots(client, queue, session, "b")
    finally:
        for handle in started:
            await handle.terminate()


async def test_a_tenant_neither_joins_a_tenantless_session_nor_hands_its_own_to_one(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = make_spec(tmp_path, temporal_server)
    with WorkerProcess(spec):
        async with ph.load(spec) as harness:
            nobodys, theirs = f"ses-{uuid.uuid4().hex}", f"ses-{uuid.uuid4().hex}"
            for session, tenant in ((nobodys, None), (theirs, "b")):
                first = await harness.run(
                    "small_refunds", "refund 5", principal="ann", tenant=tenant, session_id=session
                )
                assert first.status is ph.RunStatus.COMPLETED, first.error
            for session, tenant in ((nobodys, "b"), (theirs, None)):
                with pytest.raises(ph.SessionDenied, match=f"session '{session}' belongs"):
                    await harness.run(
                        "small_refunds",
                        "refund 6",
                        principal="eve",
                        tenant=tenant,
                        session_id=session,
                    )
            again = await harness.run(
                "small_refunds", "refund 7", principal="ann", session_id=nobodys
            )
            assert again.status is ph.RunStatus.COMPLETED, again.error
