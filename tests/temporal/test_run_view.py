"""`RunView`: a Temporal run's snapshot as a read-only store (no server needed)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from pytest_harness.errors import StoreError, UnknownRun
from pytest_harness.store.base import NewRun, StoredArtifact
from pytest_harness.store.memory import MemoryStore
from pytest_harness.temporal.records import RunView

pytestmark = pytest.mark.asyncio


def snapshot() -> dict[str, Any]:
    entry = {
        "format": 1,
        "step": 0,
        "attempt_id": None,
        "ts": 1.0,
        "execution_key": None,
        "payload": {},
    }
    return {
        "run_id": "run_1",
        "session_id": "ses_1",
        "task": "orders",
        "tenant": None,
        "principal": {"id": "ann"},
        "input": "hi",
        "labels": {},
        "record": True,
        "status": "completed",
        "state": {"output": "done"},
        "approvals": [],
        "events": [{"type": "run_started", "data": {"task": "orders"}}],
        # out of order, as a list may be: read back in `seq` order
        "journal": [
            {**entry, "id": "b", "seq": 2, "kind": "checkpoint"},
            {**entry, "id": "a", "seq": 1, "kind": "run.started"},
        ],
        "created_at": 1.0,
        "updated_at": 2.0,
    }


async def test_reads_come_from_the_snapshot_and_the_state_store() -> None:
    store = MemoryStore()
    data = b"bytes"
    sha = hashlib.sha256(data).hexdigest()
    await store.put_artifact(StoredArtifact(sha256=sha, media_type="text/plain", data=data))
    view = RunView(snapshot(), store)
    record = await view.get_run("run_1")
    assert (record.session_id, record.status, record.record) == ("ses_1", "completed", True)
    journal = await view.journal("run_1")
    assert [(e.seq, e.kind, e.run_id, e.session_id) for e in journal] == [
        (1, "run.started", "run_1", "ses_1"),
        (2, "checkpoint", "run_1", "ses_1"),
    ]
    assert [e.seq for e in await view.journal("run_1", after=1)] == [2]
    assert [e.seq for e in await view.journal("run_1", limit=1)] == [1]
    found = await view.artifact(sha)
    assert found is not None and found.data == data
    assert await view.artifact("0" * 64) is None
    assert [e.kind for e in await view.events("run_1")] == ["run_started"]
    with pytest.raises(UnknownRun, match="run_2"):
        await view.get_run("run_2")
    with pytest.raises(UnknownRun):
        await view.journal("run_2")
    with pytest.raises(ValueError, match="limit"):
        await view.journal("run_1", limit=-1)


async def test_every_write_is_refused_naming_the_method() -> None:
    view = RunView(snapshot(), MemoryStore())
    new = NewRun(
        run_id="run_2",
        session_id="ses_1",
        task="orders",
        tenant=None,
        principal={"id": "ann"},
        input="hi",
        labels={},
        idempotency_key=None,
        status="running",
        state={},
    )
    artifact = StoredArtifact(sha256="0" * 64, media_type="text/plain", data=b"")
    writes = {
        "create_run": view.create_run(new),
        "acquire_lease": view.acquire_lease("run_1", "me", 1.0),
        "renew_lease": view.renew_lease("run_1", 1, 1.0),
        "release_lease": view.release_lease("run_1", 1),
        "commit": view.commit("run_1", 1, status="failed", state={}),
        "request_control": view.request_control("run_1", "cancel", statuses=("running",)),
        "decide_approval": view.decide_approval(
            "run_1", "apr_1", decision="approve", approver="fin", approver_roles=(), reason=None
        ),
        "claim_run": view.claim_run("me", 1.0, tasks=("orders",)),
        "put_artifact": view.put_artifact(artifact),
        "add_samples": view.add_samples([]),
    }
    for name, call in writes.items():
        with pytest.raises(StoreError, match=f"^{name}: run run_1 is read from its Temporal"):
            await call
