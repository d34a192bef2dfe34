"""The flight recorder's journal: every boundary, in order, with attempt ids and execution keys;
failed writes retried under the same ids; the recording setting kept with the session."""

from __future__ import annotations

import pytest

import pytest_harness as ph
from pytest_harness.store import MemoryStore

pytestmark = pytest.mark.asyncio

FINANCE = ph.Principal("fiona", ("finance",))

SPEC = """
rules:
  - {{id: R1, when: 'tool == "refund" && args.amount > 100', then: approve, approvers: [finance]}}
  - {{id: R2, when: 'tool == "delete_account"', then: deny}}
guards:
  - {{id: G1, on: output, check: regex, pattern: '\\b\\d{{16}}\\b', action: redact}}
tasks:
  orders:
    prompt: You are the order desk.
    tools: [lookup_order, refund, delete_account]
state: {{record: {record}}}
"""

SCRIPT = (
    "[{error: server}, {call: lookup_order, args: {order_id: A-1}}, "
    "{calls: [{name: refund, args: {order_id: A-1, amount: 250}}, "
    "{name: delete_account, args: {user: ann}}]}, "
    "{say: 'Refunded, card 4111111111111111.'}]"
)


def write(app, *, record: str = "true", script: str = SCRIPT) -> None:
    app.write(SPEC.format(record=record))
    app.spec.write_text(app.spec.read_text().replace("script: []", f"script: {script}", 1))


class FlakyStore(MemoryStore):
    """A memory store whose commits that carry journal entries fail `fail` times."""

    def __init__(self, fail: int) -> None:
        super().__init__()
        self.fail = fail
        self.attempts: list[list[str]] = []

    async def commit(self, run_id, token, **kwargs):  # type: ignore[no-untyped-def]
        journal = kwargs.get("journal") or ()
        if journal:
            self.attempts.append([d.id for d in journal])
            if self.fail > 0:
                self.fail -= 1
                raise ph.StoreError("disk I/O error (injected)")
        return await super().commit(run_id, token, **kwargs)


async def test_every_boundary_is_journaled_in_order(app) -> None:
    write(app)
    async with ph.load(app.spec) as harness:
        waiting = await harness.run("orders", "Refund A-1", principal="ann")
        done = await harness.approve(
            waiting.run_id, waiting.approval.approval_id, "approve", approver=FINANCE
        )
        assert done.ok
        journal = await harness.store.journal(done.run_id)
    assert [e.seq for e in journal] == list(range(1, len(journal) + 1))
    assert len({e.id for e in journal}) == len(journal)
    kinds = [e.kind for e in journal if e.kind != "event"]
    assert kinds[0] == "run.started"
    assert kinds[1:4] == ["model.started", "model.failed", "model.started"]
    for kind in (
        "model.response",
        "model.processed",
        "model.completed",
        "tool.started",
        "tool.dispatched",
        "tool.returned",
        "tool.processed",
        "tool.failed",
        "approval.requested",
        "approval.answered",
        "run.resumed",
        "tool.resolved",
        "checkpoint",
    ):
        assert kind in kinds, kind
    events = [e.payload["event"] for e in journal if e.kind == "event"]
    assert "tool_call_start" in events and events[-1] == "run_result"
    # the failed attempt and its retry have their own attempt ids
    started = [e.attempt_id for e in journal if e.kind == "model.started"]
    assert len(started) == 4 and len(set(started)) == 4
    failed = next(e for e in journal if e.kind == "model.failed")
    assert failed.attempt_id == started[0] and failed.payload["error"] == "server"
    # tool entries carry their execution key; a dispatch and its result share an attempt id
    for e in journal:
        if e.kind.startswith("tool.") or e.kind.startswith("approval."):
            assert e.execution_key and e.execution_key.startswith("exk_"), e
    dispatched = {e.execution_key: e.attempt_id for e in journal if e.kind == "tool.dispatched"}
    returned = {e.execution_key: e.attempt_id for e in journal if e.kind == "tool.returned"}
    assert dispatched == returned and len(dispatched) == 2
    denied = next(e for e in journal if e.kind == "tool.failed")
    assert denied.payload["outcome"]["kind"] == "denied" and not denied.payload["invoked"]
    # guards: the raw answer before, the redacted text after
    response, processed = (
        [e for e in journal if e.kind == kind][-1] for kind in ("model.response", "model.processed")
    )
    assert "4111111111111111" in response.payload["answer"]["text"]
    assert processed.payload["text"] == "Refunded, card [REDACTED]."
    checkpoints = [e.payload["status"] for e in journal if e.kind == "checkpoint"]
    assert checkpoints == ["awaiting_approval", "completed"]


async def test_the_recording_is_derived_from_the_journal(app) -> None:
    write(app)
    async with ph.load(app.spec) as harness:
        waiting = await harness.run("orders", "Refund A-1", principal="ann")
        done = await harness.approve(
            waiting.run_id, waiting.approval.approval_id, "approve", approver=FINANCE
        )
        recording = await ph.Recording.from_store(harness.store, done.run_id)
        report = await harness.replay(recording)
    assert [t.answer.get("error") for t in recording.model_turns] == ["server", None, None, None]
    assert [r.name for r in recording.tool_results] == ["lookup_order", "refund"]
    assert [(a.tool, a.decision) for a in recording.approvals] == [("refund", "approve")]
    assert recording.status == "completed" and recording.trace == done.trace
    assert report.same, report.render()
    # requests are journaled as deltas and rebuilt whole: each matches its digest
    from pytest_harness.models.base import content_digest
    from pytest_harness.redaction import comparable

    for turn in recording.model_turns:
        assert turn.request is not None
        assert content_digest(comparable(dict(turn.request))) == turn.digest
    assert len(recording.model_turns[-1].request["messages"]) == 6  # type: ignore[index]


async def test_a_failed_journal_write_is_retried_under_the_same_ids(app) -> None:
    write(app, script="[{say: hello}]")
    store = FlakyStore(fail=2)
    async with ph.load(app.spec, store=store) as harness:
        done = await harness.run("orders", "hi", principal="ann")
        journal = await store.journal(done.run_id)
    assert done.ok
    assert store.attempts[0] == store.attempts[1] == store.attempts[2]  # same ids each time
    ids = [e.id for e in journal]
    assert len(ids) == len(set(ids))
    assert [e.seq for e in journal] == list(range(1, len(journal) + 1))


async def test_a_journal_write_that_keeps_failing_stops_the_run(app) -> None:
    write(app, script="[{say: hello}]")
    store = FlakyStore(fail=100)
    async with ph.load(app.spec, store=store) as harness:
        with pytest.raises(ph.RecordingError, match="could not write the journal") as info:
            await harness.run("orders", "hi", principal="ann")
        assert "disk I/O error (injected)" in str(info.value)
        (run,) = await store.list_runs()
        assert run.status == "running" and run.state["phase"] == "start"  # did not advance
        assert [e.kind for e in await store.journal(run.run_id)] == ["run.started"]
    assert len(store.attempts) == 4


async def test_an_unrecorded_run_has_no_journal_and_cannot_start_recording(app) -> None:
    write(app, record="false", script="[{call: refund, args: {order_id: A-1, amount: 250}}]")
    async with ph.load(app.spec) as harness:
        waiting = await harness.run("orders", "Refund A-1", principal="ann")
        assert await harness.store.journal(waiting.run_id) == []
        with pytest.raises(ph.RecordingError, match="cannot be turned on"):
            await harness.resume(waiting.run_id, record=True)
        with pytest.raises(ph.RecordingError, match="was not recorded"):
            await harness.export(waiting.run_id, app.root / "x.hx")
        with pytest.raises(ph.RecordingError, match="was not recorded"):
            await harness.export(waiting.run_id, app.root / "x.yaml")
        with pytest.raises(ph.RecordingError, match="was not recorded"):
            await harness.replay(waiting.run_id)
    assert not (app.root / "x.hx").exists() and not (app.root / "x.yaml").exists()


async def test_the_recording_setting_is_saved_with_the_session(app) -> None:
    write(app, script="[{say: one}, {say: two}, {say: three}]")
    store = MemoryStore()
    async with ph.load(app.spec, store=store) as recording:
        first = await recording.run("orders", "hi", principal="ann")
        assert (await store.get_run(first.run_id)).record
    write(app, record="false", script="[{say: one}, {say: two}, {say: three}]")
    async with ph.load(app.spec, store=store) as plain:  # no explicit setting: inherit
        second = await plain.run("orders", "again", principal="ann", session_id=first.session_id)
        assert (await store.get_run(second.run_id)).record
        started = (await store.journal(second.run_id))[0]
        assert started.payload["history"][-1]["content"] == "one"
        other = await plain.run("orders", "new session", principal="ann")
        assert not (await store.get_run(other.run_id)).record
    async with ph.load(app.spec, store=store, record=False) as explicit:
        with pytest.raises(ph.RecordingError, match="conflicts with the setting the session"):
            await explicit.run("orders", "x", principal="ann", session_id=first.session_id)
        with pytest.raises(ph.RecordingError, match="keeps recording"):
            await explicit.resume(first.run_id, record=False)


async def test_artifacts_returned_or_attached_are_kept_by_hash(app, tmp_path) -> None:
    module = app.root / f"{app.module}.py"
    module.write_text(module.read_text() + REPORT_TOOL)
    write(app, script="[{call: lookup_order, args: {order_id: A-1}}, {say: done}]")
    spec = app.spec.read_text()
    spec = spec.replace(
        "  delete_account: {", f'  report: {{call: "{app.module}:report"}}\n  delete_account: {{', 1
    ).replace("tools: [lookup_order,", "tools: [report, lookup_order,")
    spec = spec.replace("{call: lookup_order, args: {order_id: A-1}}", "{call: report, args: {}}")
    app.spec.write_text(spec)
    async with ph.load(app.spec) as harness:
        done = await harness.run("orders", "report", principal="ann")
        assert done.ok
        journal = await harness.store.journal(done.run_id)
        returned = next(e for e in journal if e.kind == "tool.returned")
        uris = returned.payload["artifacts"]
        assert len(uris) == 2
        pdf = ph.Artifact(b"%PDF-1.7 total 250", "application/pdf", "invoice.pdf")
        assert returned.payload["outcome"]["value"]["pdf"]["artifact"] == pdf.uri
        assert pdf.uri in uris
        stored = await harness.store.artifact(pdf.sha256)
        assert stored is not None and stored.data == pdf.data and stored.name == "invoice.pdf"
        full = await harness.export(
            done.run_id,
            tmp_path / "full.hx",
            policy=ph.ExportPolicy(include_payloads=True, include_artifacts=True),
        )
        lean = await harness.export(
            done.run_id, tmp_path / "lean.hx", policy=ph.ExportPolicy(include_payloads=True)
        )
    played = ph.playback(full)
    assert played.report.complete, played.report.issues
    assert played.artifacts[pdf.sha256] == pdf.data
    assert {a["status"] for a in played.manifest["artifacts"]} == {"included"}
    report = ph.verify_archive(lean)
    assert report.valid and not report.complete
    assert {i.code for i in report.issues} == {"artifact_omitted"}


REPORT_TOOL = '''

def report() -> dict:
    """Writes a report."""
    uri = ph.current_tool_context().attach(b"a,b\\n1,2\\n", "text/csv", "rows.csv")
    pdf = ph.Artifact(b"%PDF-1.7 total 250", "application/pdf", "invoice.pdf")
    return {"pdf": pdf, "csv": uri}
'''


async def test_an_artifact_needs_bytes_and_a_media_type() -> None:
    with pytest.raises(ph.HarnessError, match="must be bytes"):
        ph.Artifact("text", "text/plain")  # type: ignore[arg-type]
    with pytest.raises(ph.HarnessError, match="type/subtype"):
        ph.Artifact(b"x", "pdf")


async def test_an_error_outside_a_tool_is_journaled_as_command_failed(app) -> None:
    module = app.root / f"{app.module}.py"
    module.write_text(
        module.read_text() + "\n\ndef broken_guard(text, context):\n    raise RuntimeError('bug')\n"
    )
    write(app, script="[{say: hello}]")
    spec = app.spec.read_text().replace(
        "guards:\n",
        f'guards:\n  - {{id: G9, on: output, check: "{app.module}:broken_guard", action: block}}\n',
        1,
    )
    app.spec.write_text(spec)
    async with ph.load(app.spec) as harness:
        failed = await harness.run("orders", "hi", principal="ann")
        journal = await harness.store.journal(failed.run_id)
    assert failed.status is ph.RunStatus.FAILED
    (entry,) = [e for e in journal if e.kind == "command.failed"]
    assert entry.payload == {"command": "drive", "type": "RuntimeError", "message": "bug"}
    assert journal[-1].kind == "checkpoint" and journal[-1].payload["status"] == "failed"


async def test_a_noted_entry_is_the_draft_its_class_would_make() -> None:
    """`Journal.note` builds its `JournalDraft` without the keyword call: the same value."""
    from dataclasses import fields, replace

    from pytest_harness.runtime.journal import Journal
    from pytest_harness.store.base import JournalDraft

    assert not hasattr(JournalDraft, "__post_init__")
    journal = Journal(True)
    payload = {"name": "refund", "args": {"amount": 25}}
    journal.note("tool.dispatched", payload, step=2, attempt_id="att_1", execution_key="exk_1")
    journal.note("checkpoint", {"status": "completed"}, step=3)
    made = journal.pending
    assert [type(entry) for entry in made] == [JournalDraft, JournalDraft]
    assert made[0] == JournalDraft(
        id=made[0].id,
        kind="tool.dispatched",
        step=2,
        ts=made[0].ts,
        payload=payload,
        attempt_id="att_1",
        execution_key="exk_1",
    )
    assert made[0].payload is not payload  # a copy, as before
    assert made[1] == replace(made[1], attempt_id=None, execution_key=None)
    assert made[0].id != made[1].id and made[0].ts <= made[1].ts
    assert {f.name for f in fields(JournalDraft)} == {
        "id",
        "kind",
        "step",
        "ts",
        "payload",
        "attempt_id",
        "execution_key",
    }
    with pytest.raises(AttributeError):
        made[0].kind = "event"  # type: ignore[misc]
    with pytest.raises(AssertionError):
        journal.note("no.such.kind", {}, step=1)


@pytest.mark.parametrize(
    ("on", "kind", "script"),
    [
        ("output", "model.processed", "[{say: 'Card 4111111111111111.'}]"),
        (
            "tool_result",
            "tool.processed",
            "[{call: lookup_order, args: {order_id: A-1}}, {say: done}]",
        ),
    ],
)
async def test_a_recorded_run_a_guard_blocks_ends_refused_and_replays(
    app, tmp_path, on, kind, script
) -> None:
    """The entry of the blocked text names the guard by its id (the guard itself is no JSON):
    the run ends `refused`, not stuck `running` on a journal write that cannot succeed."""
    write(app, script=script)
    block = f"  - {{id: G2, on: {on}, check: regex, pattern: '\\d{{16}}', action: block}}\n"
    app.spec.write_text(app.spec.read_text().replace("guards:\n", "guards:\n" + block, 1))
    async with ph.load(app.spec) as harness:
        refused = await harness.run("orders", "hi", principal="ann")
        journal = await harness.store.journal(refused.run_id)
        recording = await ph.Recording.from_store(harness.store, refused.run_id)
    assert refused.status is ph.RunStatus.REFUSED
    assert refused.error is not None and refused.error["type"] == "GuardBlocked"
    (blocked,) = [e for e in journal if e.kind == kind and e.payload["text"] is None]
    assert blocked.payload["blocked_by"] == "G2"
    recording.save(tmp_path / "refused.yaml")
    async with ph.load(app.spec) as harness:
        report = await harness.replay(tmp_path / "refused.yaml")
    assert report.same and report.status == ("refused", "refused"), report.render()
