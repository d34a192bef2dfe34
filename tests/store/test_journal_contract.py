"""The flight recorder's part of the store contract: journal entries and artifacts."""

from __future__ import annotations

import hashlib
import time
import uuid

import pytest

from pytest_harness.errors import StoreError, UnknownRun
from pytest_harness.store import EventDraft, JournalDraft, Store, StoredArtifact

from .test_contract import new_approval, new_run

pytestmark = pytest.mark.asyncio


def entry(kind: str = "event", **fields: object) -> JournalDraft:
    values: dict[str, object] = {
        "id": str(uuid.uuid4()),
        "kind": kind,
        "step": 1,
        "ts": time.time(),
        "payload": {"n": 1},
    }
    values.update(fields)
    return JournalDraft(**values)  # type: ignore[arg-type]


async def test_journal_entries_get_contiguous_seqs_per_run_with_their_fields(store: Store) -> None:
    first = entry("run.started", step=0, payload={"task": "orders"})
    record, _ = await store.create_run(new_run(record=True, journal=[first]))
    other, _ = await store.create_run(new_run(record=True, journal=[entry("run.started")]))
    assert record.record is True
    tool = entry("tool.dispatched", attempt_id="att_1", execution_key="exk_1", payload={"a": [1]})
    await store.commit(
        record.run_id, 0, status="running", state={}, journal=[tool, entry(), entry()]
    )
    await store.commit(other.run_id, 0, status="running", state={}, journal=[entry()])
    entries = await store.journal(record.run_id)
    assert [e.seq for e in entries] == [1, 2, 3, 4]
    assert [e.kind for e in entries] == ["run.started", "tool.dispatched", "event", "event"]
    got = entries[1]
    assert (got.id, got.attempt_id, got.execution_key, got.payload) == (
        tool.id,
        "att_1",
        "exk_1",
        {"a": [1]},
    )
    assert (got.run_id, got.session_id, got.format, got.step, got.ts) == (
        record.run_id,
        record.session_id,
        1,
        1,
        tool.ts,
    )
    assert [e.seq for e in await store.journal(other.run_id)] == [1, 2]
    assert [e.seq for e in await store.journal(record.run_id, after=2, limit=1)] == [3]


async def test_a_retried_entry_keeps_its_id_and_is_written_once(store: Store) -> None:
    record, _ = await store.create_run(new_run(record=True))
    once = entry("model.started", attempt_id="att_1")
    await store.commit(record.run_id, 0, status="running", state={}, journal=[once])
    await store.commit(record.run_id, 0, status="running", state={}, journal=[once, entry()])
    entries = await store.journal(record.run_id)
    assert [(e.seq, e.kind) for e in entries] == [(1, "model.started"), (2, "event")]


async def test_a_stale_commit_writes_no_journal_entry(store: Store) -> None:
    record, _ = await store.create_run(new_run(record=True))
    with pytest.raises(StoreError) as info:
        await store.commit(record.run_id, 7, status="running", state={}, journal=[entry()])
    assert info.value.stale
    assert await store.journal(record.run_id) == []


async def test_an_approval_decision_journals_with_it(store: Store) -> None:
    record, _ = await store.create_run(new_run(record=True))
    approval = new_approval()
    await store.commit(record.run_id, 0, status="awaiting_approval", state={}, approvals=[approval])
    answered = entry("approval.answered", payload={"decision": "approve"})
    await store.decide_approval(
        record.run_id,
        approval.approval_id,
        decision="approve",
        approver="fiona",
        approver_roles=("finance",),
        reason=None,
        journal=answered,
    )
    entries = await store.journal(record.run_id)
    assert [(e.seq, e.kind, e.session_id) for e in entries] == [
        (1, "approval.answered", record.session_id)
    ]


async def test_a_run_that_does_not_record_has_an_empty_journal(store: Store) -> None:
    record, _ = await store.create_run(new_run())
    assert record.record is False and (await store.get_run(record.run_id)).record is False
    assert await store.journal(record.run_id) == []
    with pytest.raises(UnknownRun):
        await store.journal("run_nope")
    with pytest.raises(ValueError, match="limit"):
        await store.journal(record.run_id, limit=-1)


async def test_artifacts_are_kept_by_sha256_once(store: Store) -> None:
    data = b"%PDF-1.7 invoice"
    sha = hashlib.sha256(data).hexdigest()
    art = StoredArtifact(sha256=sha, media_type="application/pdf", data=data, name="a.pdf")
    await store.put_artifact(art)
    await store.put_artifact(art)
    assert await store.artifact(sha) == art
    assert await store.artifact("0" * 64) is None
    with pytest.raises(StoreError, match="hash"):
        await store.put_artifact(StoredArtifact(sha256="0" * 64, media_type="a/b", data=b"x"))


async def test_a_nul_in_any_payload_round_trips_exactly(store: Store) -> None:
    """Text with a NUL (a tool that read a binary file) is kept as JSON on every store.

    Postgres parses a `json_to_recordset` array into text, and text holds no NUL: before, such
    a commit failed with `unsupported Unicode escape sequence` and left its run `running`.
    The escaped-backslash text beside it (`"\\u0000"` as six characters) stays what it was.
    """
    odd = {"note": "a\x00b", "six": "\\u0000", "both": "\\\x00", "list": ["\x00"]}
    first = entry("run.started", step=0, payload=odd)
    record, _ = await store.create_run(
        new_run(record=True, state=odd, events=[EventDraft("e", odd)], journal=[first])
    )
    approval = new_approval(args=odd, approvers=("fin\x00ance",))
    await store.commit(
        record.run_id,
        0,
        status="awaiting_approval",
        state={"s": odd},
        events=[EventDraft("f", odd), EventDraft("plain", {"n": 1})],
        approvals=[approval],
        journal=[entry(payload=odd), entry(payload={"n": 2})],
    )
    await store.decide_approval(
        record.run_id,
        approval.approval_id,
        decision="approve",
        approver="fiona",
        approver_roles=("finance",),
        reason=None,
        event=EventDraft("approved", odd),
        journal=entry("approval.answered", payload=odd),
    )
    got = await store.get_run(record.run_id)
    assert got.state == {"s": odd}
    assert [(e.kind, e.data) for e in await store.events(record.run_id)] == [
        ("e", odd),
        ("f", odd),
        ("plain", {"n": 1}),
        ("approved", odd),
    ]
    assert [e.payload for e in await store.journal(record.run_id)] == [
        odd,
        odd,
        {"n": 2},
        odd,
    ]
    (row,) = await store.approvals(record.run_id)
    assert (row.args, row.approvers, row.status) == (odd, ("fin\x00ance",), "approve")


@pytest.mark.parametrize("payload", ["hello", None, 1.5, [1, "two"], {"k": "v"}], ids=repr)
async def test_any_json_value_as_a_payload_round_trips(store: Store, payload: object) -> None:
    """The store API types payloads as mappings, but any JSON value comes back as written.

    Postgres reads these fields as text: a bare string came back without its quotes (and
    then failed to decode), a null as SQL NULL, unless written as the string of its text.
    """
    record, _ = await store.create_run(
        new_run(
            record=True,
            events=[EventDraft("e", payload)],  # type: ignore[arg-type]
            journal=[entry(payload=payload)],
        )
    )
    await store.commit(
        record.run_id,
        0,
        status="running",
        state={},
        events=[EventDraft("f", payload)],  # type: ignore[arg-type]
        journal=[entry(payload=payload)],
    )
    assert [e.data for e in await store.events(record.run_id)] == [payload, payload]
    assert [e.payload for e in await store.journal(record.run_id)] == [payload, payload]
