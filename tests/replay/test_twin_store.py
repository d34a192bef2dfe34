"""The replay twin's store: no events, and journal payloads kept as the driver noted them.

Keeping the noted objects instead of their JSON is sound only while a drive never changes a
payload after noting it. The equivalence tests replay the same recordings over `TwinStore`
and over a plain `MemoryStore` (which snapshots every payload as JSON at its commit): a payload
changed after it was noted would make the two replays' recordings differ.
"""

from __future__ import annotations

import pytest

import pytest_harness as ph
from pytest_harness.errors import StoreError, UnknownRun
from pytest_harness.recording.model import Recording
from pytest_harness.replay import replayer
from pytest_harness.replay.report import ReplayReport
from pytest_harness.replay.twin_store import TwinStore
from pytest_harness.store.base import EventDraft, JournalDraft, NewRun
from pytest_harness.store.memory import MemoryStore
from tests.replay import helpers
from tests.replay.helpers import FINANCE, replay_file, write

pytestmark = pytest.mark.asyncio

SPEC = helpers.SPEC.replace("delete_account]", "delete_account, explode]")

REFUND = (
    "[{call: lookup_order, args: {order_id: A-1}}, "
    "{call: refund, args: {order_id: A-1, amount: 250}}, "
    "{say: 'Refunded A-1.'}]"
)
EXPLODE = (
    "[{call: explode, args: {reason: bad}}, {call: lookup_order, args: {order_id: A-2}}, {say: x}]"
)
DELETE = "[{call: delete_account, args: {user: ann}}, {say: 'I cannot.'}]"


async def record(app, tmp_path, script: str, decision: str | None = None) -> Recording:
    """Run the task once (answering its approval with `decision`) and save it as a golden."""
    write(app, SPEC, script)
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "help", principal="ann")
        if decision is not None:
            assert result.approval is not None
            result = await harness.approve(
                result.run_id, result.approval.approval_id, decision, approver=FINANCE
            )
        recording = await Recording.from_store(harness.store, result.run_id)
    recording.save(tmp_path / "golden.yaml")
    return recording


async def assert_same_over_both(app, tmp_path, **kw: str) -> ReplayReport:
    """Replay the golden over `TwinStore` and over `MemoryStore`; both must say the same."""
    kept = await replay_file(app, tmp_path / "golden.yaml", **kw)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(replayer, "TwinStore", MemoryStore)
        snapshot = await replay_file(app, tmp_path / "golden.yaml", **kw)
    assert kept.replayed == snapshot.replayed
    assert kept.render() == snapshot.render()
    return kept


@pytest.mark.parametrize("decision", ["approve", "decline"])
async def test_an_answered_approval_replays_alike_over_both_stores(app, tmp_path, decision) -> None:
    await record(app, tmp_path, REFUND, decision)
    report = await assert_same_over_both(app, tmp_path)
    assert report.same, report.render()
    assert [t.tool for t in report.replayed.approvals] == ["refund"]


async def test_a_stricter_rule_leaves_both_waiting_alike(app, tmp_path) -> None:
    await record(app, tmp_path, REFUND, "approve")
    stricter = SPEC.replace(
        "guards: []",
        '  - id: R3\n    when: tool == "lookup_order"\n    then: approve\n'
        "    approvers: [finance]\nguards: []",
    ).replace("rules: [R1, R2]", "rules: [R1, R2, R3]")
    write(app, stricter, REFUND)
    report = await assert_same_over_both(app, tmp_path)
    assert report.status == ("completed", "awaiting_approval")


async def test_a_tool_that_raised_and_a_safe_rerun_replay_alike(app, tmp_path) -> None:
    await record(app, tmp_path, EXPLODE)
    report = await assert_same_over_both(app, tmp_path)
    assert report.same, report.render()
    assert [r.outcome["ok"] for r in report.replayed.tool_results] == [False, True]
    calls = len(app.tools.CALLS)
    report = await assert_same_over_both(app, tmp_path, tools="safe")  # lookup_order is safe
    assert len(app.tools.CALLS) == calls + 2  # it ran for real, once over each store
    assert report.same, report.render()


async def test_a_divergence_leaves_both_stores_alike(app, tmp_path) -> None:
    await record(app, tmp_path, DELETE)
    write(app, SPEC.replace("rules: [R1, R2]", "rules: [R1]"), DELETE)
    report = await assert_same_over_both(app, tmp_path)
    assert report.diverged == "tool call delete_account was never recorded at all"
    assert report.status == ("completed", "running")


# -- the store itself ---------------------------------------------------------------------------


def new_run(run_id: str = "run_1", journal: tuple[JournalDraft, ...] = ()) -> NewRun:
    return NewRun(
        run_id=run_id,
        session_id="ses_1",
        task="orders",
        tenant=None,
        principal={"id": "ann"},
        input="help",
        labels={},
        idempotency_key=None,
        status="running",
        state={"v": 1},
        events=[EventDraft("run_started", {"task": "orders"})],
        record=True,
        journal=journal,
        lease_owner="me",
        lease_ttl=30.0,
    )


def draft(entry_id: str, kind: str, payload: dict[str, object]) -> JournalDraft:
    return JournalDraft(id=entry_id, kind=kind, step=0, ts=1.0, payload=payload)


async def test_the_journal_keeps_payloads_as_noted_in_order_and_no_events() -> None:
    store = TwinStore()
    started = {"task": "orders", "history": [{"role": "user", "content": "help"}]}
    await store.create_run(new_run(journal=(draft("e1", "run.started", started),)))
    answer = {"answer": {"text": "hi"}}
    twice = draft("e2", "model.response", answer)
    for _ in range(2):  # a retried write sends the very same entries
        await store.commit(
            "run_1",
            1,
            status="running",
            state={"v": 1, "phase": "model"},
            events=[EventDraft("status_changed", {"status": "running"})],
            journal=[twice],
        )
    entries = await store.journal("run_1")
    assert [(e.seq, e.id, e.kind, e.session_id) for e in entries] == [
        (1, "e1", "run.started", "ses_1"),
        (2, "e2", "model.response", "ses_1"),
    ]
    assert entries[0].payload == started and entries[1].payload is answer
    assert [e.id for e in await store.journal("run_1", after=1)] == ["e2"]
    assert [e.id for e in await store.journal("run_1", limit=1)] == ["e1"]
    assert await store.events("run_1") == []
    assert (await store.get_run("run_1")).state == {"v": 1, "phase": "model"}


async def test_a_failed_commit_keeps_none_of_its_journal() -> None:
    store = TwinStore()
    await store.create_run(new_run())
    entry = draft("e1", "model.response", {"answer": {}})
    with pytest.raises(StoreError, match="stale fencing token"):
        await store.commit("run_1", 7, status="running", state={"v": 1}, journal=[entry])
    with pytest.raises(StoreError, match="cannot store the state of run run_1"):
        await store.commit("run_1", 1, status="running", state={"x": object()}, journal=[entry])
    bad = draft("e2", "model.response", {"answer": {"at": object()}})
    with pytest.raises(StoreError, match="cannot store the journal of run run_1"):
        await store.commit("run_1", 1, status="ended", state={"v": 2}, journal=[entry, bad])
    assert (await store.get_run("run_1")).state == {"v": 1}  # nothing was written
    assert await store.journal("run_1") == []
    await store.commit("run_1", 1, status="running", state={"v": 1}, journal=[entry])
    assert [e.id for e in await store.journal("run_1")] == ["e1"]


async def test_a_first_entry_json_cannot_hold_creates_no_run() -> None:
    store = TwinStore()
    history = {"history": [{"role": "user", "content": {1, 2}}]}
    with pytest.raises(StoreError, match="cannot store the journal of run run_1"):
        await store.create_run(new_run(journal=(draft("e1", "run.started", history),)))
    with pytest.raises(UnknownRun):
        await store.get_run("run_1")


async def test_an_unknown_run_and_a_negative_limit_are_refused() -> None:
    store = TwinStore()
    with pytest.raises(UnknownRun):
        await store.journal("run_nope")
    await store.create_run(new_run())
    with pytest.raises(ValueError, match="limit must be zero or more, got -1"):
        await store.journal("run_1", limit=-1)


async def test_a_run_resumed_after_its_approval_keeps_its_session_history(app, tmp_path) -> None:
    """The replay's second drive (after the recorded approval) asks with the same conversation
    as its first: the session's earlier runs come from the recording, not the twin's session."""
    write(app, SPEC, REFUND)
    async with ph.load(app.spec) as harness:
        session: str | None = None
        for _ in range(2):  # the second run's history is the first's conversation
            waiting = await harness.run("orders", "help", principal="ann", session_id=session)
            assert waiting.approval is not None
            done = await harness.approve(
                waiting.run_id, waiting.approval.approval_id, "approve", approver=FINANCE
            )
            session = done.session_id
        recording = await Recording.from_store(harness.store, done.run_id)
    assert len(recording.history) == 6
    recording.save(tmp_path / "golden.yaml")
    report = await assert_same_over_both(app, tmp_path)
    assert report.same, report.render()
    assert report.model_requests_changed == (0, 3)
