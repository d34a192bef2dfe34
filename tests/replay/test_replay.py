"""Record runs, change the spec, replay them: the report says what drifted."""

from __future__ import annotations

import pytest

import pytest_harness as ph
from pytest_harness.errors import ArchiveError
from pytest_harness.recording.model import DERIVED_FROM, STORED_FROM, Recording
from pytest_harness.store import MemoryStore
from tests.replay.helpers import FINANCE, SCRIPT, SPEC, replay_file, write

pytestmark = pytest.mark.asyncio


async def record_run(app, tmp_path, name: str = "golden.yaml") -> tuple[str, Recording]:
    """Run the refund flow once (approved by fiona) and save it as a golden file."""
    async with ph.load(app.spec) as harness:
        waiting = await harness.run("orders", "Refund A-1", principal="ann")
        done = await harness.approve(
            waiting.run_id, waiting.approval.approval_id, "approve", approver=FINANCE
        )
        assert done.ok
        recording = await Recording.from_store(harness.store, done.run_id)
    recording.save(tmp_path / name)
    return done.run_id, recording


async def test_unchanged_spec_replays_the_same(app, tmp_path) -> None:
    write(app)
    async with ph.load(app.spec) as harness:
        waiting = await harness.run("orders", "Refund A-1", principal="ann")
        done = await harness.approve(
            waiting.run_id, waiting.approval.approval_id, "approve", approver=FINANCE
        )
        calls_before = list(app.tools.CALLS)
        report = await harness.replay(done.run_id)
    assert calls_before == app.tools.CALLS  # no tool ran during the replay
    assert report.same and report.diverged is None
    assert report.status == ("completed", "completed")
    assert report.model_answers_used == (3, 3)
    assert report.model_requests_changed == (0, 3)
    assert report.render() == (
        f"same: run {done.run_id} (orders) ended completed; the replay ended completed\n"
        "  output: same\n"
        "  model answers used: 3 of 3"
    )
    assert report.replayed.trace == done.trace


async def test_golden_file_replays_the_same_and_is_deterministic(app, tmp_path) -> None:
    write(app)
    _, first = await record_run(app, tmp_path, "a.yaml")
    await record_run(app, tmp_path, "b.yaml")
    text = (tmp_path / "a.yaml").read_text()
    assert text == (tmp_path / "b.yaml").read_text()
    assert text.startswith("format: pytest-harness/recording@2\ntask: orders\n")
    assert "run_" not in text and "exk_" not in text.replace("exk_1", "")
    report = await replay_file(app, tmp_path / "a.yaml")
    assert report.same, report.render()
    assert report.render().startswith(f"same: recording {tmp_path / 'a.yaml'} (orders)")
    loaded = Recording.load(tmp_path / "a.yaml")
    assert (loaded.task, loaded.status, loaded.output) == ("orders", "completed", first.output)
    assert [(d.step, d.kind, d.key) for d in loaded.trace] == [
        (d.step, d.kind, d.key) for d in first.trace
    ]


async def test_prompt_change_changes_requests_not_decisions(app, tmp_path) -> None:
    write(app)
    await record_run(app, tmp_path)
    write(app, SPEC.replace("You are the order desk.", "You are a careful order desk."))
    report = await replay_file(app, tmp_path / "golden.yaml")
    assert report.same
    assert report.model_requests_changed == (3, 3)
    assert "model requests changed: 3 of 3" in report.render()
    assert not report.failed() and report.failed({"requests"})


async def test_new_rule_requiring_approval_is_status_drift(app, tmp_path) -> None:
    write(app)
    await record_run(app, tmp_path)
    stricter = SPEC.replace(
        "guards: []",
        """  - id: R3
    when: tool == "lookup_order"
    then: approve
    approvers: [support]
guards: []""",
    ).replace("rules: [R1, R2]", "rules: [R3, R1, R2]")
    write(app, stricter)
    report = await replay_file(app, tmp_path / "golden.yaml")
    assert not report.same and report.failed()
    assert report.status == ("completed", "awaiting_approval")
    assert "status" in report.differences and "output" in report.differences
    text = report.render()
    assert "changed: recording" in text
    assert "  status: completed → awaiting_approval" in text
    assert "    + step 1 rule R3 → approve (tool lookup_order)" in text
    assert "    - step 1 tool lookup_order → ok" in text
    assert "    + (none)" in text
    assert "model answers used: 1 of 3" in text


async def test_guard_that_now_fires_is_output_drift(app, tmp_path) -> None:
    write(app)
    await record_run(app, tmp_path)
    write(
        app,
        SPEC.replace(
            "guards: []",
            "guards:\n  - {id: G1, on: output, check: regex, pattern: '\\d{16}', action: redact}",
        ),
    )
    report = await replay_file(app, tmp_path / "golden.yaml")
    assert report.status == ("completed", "completed")
    assert report.output[1] == "Refunded A-1, card [REDACTED]."
    assert report.differences == {"output", "decisions"}
    assert "    + step 3 guard G1 → redact (output)" in report.render()
    assert "    - Refunded A-1, card 4111111111111111." in report.render()


async def test_removed_rule_makes_a_decision_disappear(app, tmp_path) -> None:
    write(app)
    await record_run(app, tmp_path)
    write(app, SPEC.replace("rules: [R1, R2]", "rules: [R2]"))
    report = await replay_file(app, tmp_path / "golden.yaml")
    removed = [d for d in report.decisions if d.change == "removed"]
    assert {(d.kind, d.key) for d in removed} == {("rule", "R1"), ("approval", "refund")}
    assert report.status == ("completed", "completed")


async def test_approver_refused_today_does_not_count(app, tmp_path) -> None:
    write(app)
    await record_run(app, tmp_path)
    write(app, SPEC.replace("approvers: [finance]", "approvers: [cfo]"))
    report = await replay_file(app, tmp_path / "golden.yaml")
    assert report.status == ("completed", "awaiting_approval")
    assert report.diverged is None


async def test_tool_call_never_recorded_diverges(app, tmp_path) -> None:
    """The twin commits a tool's dispatch with its result, but a tool that raised (diverged)
    still leaves the store as a durable drive would: the model turn asking for it is kept."""
    script = "[{call: delete_account, args: {user: ann}}, {say: 'I cannot.'}]"
    write(app, script=script)
    async with ph.load(app.spec) as harness:
        done = await harness.run("orders", "delete me", principal="ann")
        (await Recording.from_store(harness.store, done.run_id)).save(tmp_path / "d.yaml")
    write(app, SPEC.replace("rules: [R1, R2]", "rules: [R1]"), script=script)
    report = await replay_file(app, tmp_path / "d.yaml")
    assert report.diverged == "tool call delete_account was never recorded at all"
    assert report.failed(()) and not report.same
    assert report.render().startswith("diverged: recording")
    assert report.divergence.actual == {"name": "delete_account", "args": {"user": "ann"}}
    assert report.model_requests_changed == (0, 1)
    assert [t.answer["calls"][0]["name"] for t in report.replayed.model_turns] == ["delete_account"]
    assert report.status == ("completed", "running")


async def test_model_turn_past_the_end_diverges(app, tmp_path) -> None:
    script = (
        "[{call: lookup_order, args: {order_id: A-1}}, "
        "{call: lookup_order, args: {order_id: A-2}}, {say: x}]"
    )
    spec = SPEC.replace("rules: [R1, R2]", "rules: [R1, R2]\n    budget: {steps: 2}")
    write(app, spec, script=script)
    async with ph.load(app.spec) as harness:
        done = await harness.run("orders", "look", principal="ann")
        assert done.limit == "steps"
        (await Recording.from_store(harness.store, done.run_id)).save(tmp_path / "s.yaml")
    write(app, SPEC, script=script)
    report = await replay_file(app, tmp_path / "s.yaml")
    assert report.diverged == "the replay asked for model turn 3; the recording has 2"
    assert report.model_answers_used == (2, 2)
    # the two counts have different totals: each line says what it counts
    text = report.render()
    changed = report.model_requests_changed[0]
    assert f"  model requests changed: {changed} of 3 (of the replay's 3 requests)" in text
    assert text.endswith("  model answers used: 2 of 2 (of the 2 recorded)")


async def test_credentials_are_redacted_consistently_and_still_replay(
    app, tmp_path, write_file
) -> None:
    write_file(
        "secret_tools.py",
        """
        def login(user: str, password: str) -> dict:
            return {"session": {"token": "tok-123", "user": user}, "raw": '{"api_key": "k-9"}'}
        """,
    )
    spec = """
models:
  default: {use: scripted, script: []}
tools:
  login: {call: "secret_tools:login"}
tasks:
  t: {prompt: p, tools: [login]}
state: {record: true}
"""
    app.write(spec, base=False)
    script = "[{call: login, args: {user: ann, password: hunter2}}, {say: 'logged in'}]"
    app.spec.write_text(app.spec.read_text().replace("script: []", f"script: {script}", 1))
    async with ph.load(app.spec) as harness:
        done = await harness.run("t", "log me in", principal="ann")
        (await Recording.from_store(harness.store, done.run_id)).save(tmp_path / "r.yaml")
    text = (tmp_path / "r.yaml").read_text()
    for secret in ("hunter2", "tok-123", "k-9"):
        assert secret not in text
    assert "[REDACTED]" in text
    report = await replay_file(app, tmp_path / "r.yaml")
    assert report.same, report.render()
    # the tool really runs again: its raw result differs from the golden's redacted one, and
    # the replay's own recording (what --update-recordings writes) is redacted in memory too
    app.spec.write_text(
        app.spec.read_text().replace('"secret_tools:login"}', '"secret_tools:login", replay: safe}')
    )
    async with ph.load(app.spec) as harness:
        ran = await harness.replay(tmp_path / "r.yaml", tools="safe")
    assert ran.same, ran.render()
    kept = repr(ran.replayed.to_dict())
    for secret in ("hunter2", "tok-123", "k-9"):
        assert secret not in kept
    import sys

    sys.modules.pop("secret_tools", None)


async def test_a_changed_decision_is_shown_redacted(app) -> None:
    # a run replayed from the store, unredacted (a token in the call's arguments and in the
    # tool's result); today a rule denies that tool: the changed decision is shown, the token
    # is not
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2"
    write(app, script=SCRIPT.replace("{order_id: A-1}}", f"{{order_id: {token}}}}}", 1))
    async with ph.load(app.spec) as harness:
        waiting = await harness.run("orders", "Refund A-1", principal="ann")
        done = await harness.approve(
            waiting.run_id, waiting.approval.approval_id, "approve", approver=FINANCE
        )
        recording = await Recording.from_store(harness.store, done.run_id)
    assert token in repr(recording.trace.to_list())
    write(
        app,
        SPEC.replace('when: tool == "delete_account"', 'when: tool == "lookup_order"'),
        SCRIPT.replace("{order_id: A-1}}", f"{{order_id: {token}}}}}", 1),
    )
    async with ph.load(app.spec) as harness:
        report = await harness.replay(recording)
    assert [(d.change, d.kind, d.key) for d in report.decisions] == [
        ("added", "rule", "R2"),
        ("changed", "tool", "lookup_order"),
    ], report.render()
    assert "[REDACTED]" in report.render()
    assert token not in report.render()
    assert token not in repr(report.decisions)


async def test_save_never_overwrites_unless_asked(app, tmp_path) -> None:
    write(app)
    _, recording = await record_run(app, tmp_path)
    with pytest.raises(FileExistsError, match=r"golden\.yaml exists"):
        recording.save(tmp_path / "golden.yaml")
    recording.save(tmp_path / "golden.yaml", overwrite=True)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("format: pytest-harness/recording@9\ntask: t\n", "recording@9, newer than this.*@2"),
        ("format: something-else\n", "format must be 'pytest-harness/recording@2'"),
        ("- just a list\n", "a recording file is a mapping"),
        ("format: pytest-harness/recording@1\ntask: t\ninput: x\n", "missing required key"),
        ("format: pytest-harness/recording@1\n  bad: [indent\n", "invalid YAML"),
    ],
)
async def test_bad_recording_files_are_archive_errors(tmp_path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ArchiveError, match=message) as info:
        Recording.load(path)
    assert "bad.yaml" in str(info.value)


async def test_replaying_an_unrecorded_run_says_how_to_record(app) -> None:
    write(app, SPEC.replace("state: {record: true}", ""))
    async with ph.load(app.spec) as harness:
        done = await harness.run("orders", "Refund A-1", principal="ann")
        with pytest.raises(
            ph.HarnessError, match=r"was not recorded: start runs with state\.record"
        ):
            await harness.replay(done.run_id)


async def test_replay_of_an_unknown_task(app, tmp_path) -> None:
    write(app)
    await record_run(app, tmp_path)
    write(app, SPEC.replace("  orders:", "  desk:"))
    with pytest.raises(ph.UnknownTask, match="'orders'"):
        await replay_file(app, tmp_path / "golden.yaml")


async def test_a_run_that_fails_for_another_reason_never_replays_same(app, tmp_path) -> None:
    """Recorded: the script runs out at turn 2. Today a guard's own code raises before that turn,
    at the same step: same status, output and decisions up to the end, another error."""
    module = app.root / f"{app.module}.py"
    module.write_text(
        module.read_text() + "\n\ndef broken(*args, **kwargs):\n    raise LookupError('no table')\n"
    )
    write(app, script="[{call: lookup_order, args: {order_id: A-1}}]")
    async with ph.load(app.spec) as harness:
        failed = await harness.run("orders", "look", principal="ann")
        recording = await Recording.from_store(harness.store, failed.run_id)
    assert failed.error is not None and failed.error["type"] == "ScriptExhausted"
    recording.save(tmp_path / "failed.yaml")
    assert (await replay_file(app, tmp_path / "failed.yaml")).same
    guard = f"guards:\n  - {{id: G1, on: tool_result, check: '{app.module}:broken'}}"
    write(app, SPEC.replace("guards: []", guard), "[{call: lookup_order, args: {order_id: A-1}}]")
    report = await replay_file(app, tmp_path / "failed.yaml")
    assert report.status == ("failed", "failed") and report.output == (None, None)
    assert not report.same and report.failed(), report.render()
    (change,) = report.decisions
    assert (change.kind, change.change) == ("output", "changed")
    assert "step 1 output → failed (error: ScriptExhausted → LookupError)" in report.render()


async def test_a_failed_run_recorded_before_errors_were_decisions_still_replays_same(
    app, tmp_path
) -> None:
    write(app, script="[{call: lookup_order, args: {order_id: A-1}}]")
    async with ph.load(app.spec) as harness:
        failed = await harness.run("orders", "look", principal="ann")
        recording = await Recording.from_store(harness.store, failed.run_id)
    recording.save(tmp_path / "old.yaml")
    text = (tmp_path / "old.yaml").read_text(encoding="utf-8")
    assert "    status: failed\n    error: ScriptExhausted\n" in text
    (tmp_path / "old.yaml").write_text(
        text.replace("    status: failed\n    error: ScriptExhausted\n", "    status: failed\n"),
        encoding="utf-8",
    )
    assert (await replay_file(app, tmp_path / "old.yaml")).same


@pytest.mark.parametrize(
    "call, usage, call_id",
    [
        ('ProposedCall(None, "lookup_order", {"order_id": "A-1"})', "TokenUsage(3, 4)", None),
        ('ProposedCall(7, "lookup_order", {"order_id": "A-1"})', "TokenUsage(1.5, 2)", 7),
        ('ProposedCall("c1", "", {})', "TokenUsage(0, 0)", "c1"),
    ],
    ids=["null id", "number id, fractional tokens", "empty name"],
)
async def test_what_a_function_model_answered_loads_from_its_golden(
    app, write_file, tmp_path, call: str, usage: str, call_id: object
) -> None:
    """A `function` model's answer is recorded unchecked: its golden loads and replays same."""
    module = f"fn_{app.module}"
    write_file(
        f"{module}.py",
        f"""
        from pytest_harness.models.base import ModelResponse, ProposedCall, TokenUsage

        def answer(request):
            if len(request.messages) == 1:
                return ModelResponse(calls=({call},), usage={usage})
            return "done"
        """,
    )
    app.write("tasks:\n  orders: {prompt: p, tools: [lookup_order]}\nstate: {record: true}\n")
    text = app.spec.read_text().replace(
        "use: scripted\n    script: []", f"use: function\n    call: '{module}:answer'"
    )
    app.spec.write_text(text)
    async with ph.load(app.spec) as harness:
        done = await harness.run("orders", "x", principal="ann")
        (await Recording.from_store(harness.store, done.run_id)).save(tmp_path / "fn.yaml")
    loaded = Recording.load(tmp_path / "fn.yaml")
    assert loaded.model_turns[0].answer["calls"][0]["id"] == call_id
    assert (await replay_file(app, tmp_path / "fn.yaml")).same


async def test_every_model_attempt_is_in_the_store_journal_with_its_own_id(app) -> None:
    write(app, SPEC, script="[{error: server}, {error: rate_limit}, {say: fine}]")
    async with ph.load(app.spec) as harness:
        done = await harness.run("orders", "hi", principal="ann")
        journal = await harness.store.journal(done.run_id)
    ended = [e for e in journal if e.kind in ("model.failed", "model.response")]
    assert [e.payload.get("error") for e in ended] == ["server", "rate_limit", None]
    started = [e.attempt_id for e in journal if e.kind == "model.started"]
    assert all(a.startswith("att_") for a in started) and len(set(started)) == 3
    assert [e.attempt_id for e in ended] == started


async def test_a_run_whose_model_raised_replays_the_same(app, tmp_path) -> None:
    """A script that runs out (ScriptExhausted) fails the run at that turn, in replay too."""
    write(app, script="[{call: lookup_order, args: {order_id: A-1}}]")
    async with ph.load(app.spec) as harness:
        failed = await harness.run("orders", "look", principal="ann")
        assert failed.failed and failed.error is not None
        assert failed.error["type"] == "ScriptExhausted"
        recording = await Recording.from_store(harness.store, failed.run_id)
    recording.save(tmp_path / "raised.yaml")
    assert recording.model_turns[-1].answer["raised"] == "ScriptExhausted"
    report = await replay_file(app, tmp_path / "raised.yaml")
    assert report.same, report.render()
    assert report.status == ("failed", "failed")
    assert report.model_answers_used == (2, 2)
    # today's code takes another path at that turn: the gate sees it
    write(app, SPEC.replace("tools: [lookup_order, refund, delete_account]", "tools: [refund]"))
    report = await replay_file(app, tmp_path / "raised.yaml")
    assert not report.same


async def test_a_replay_keeps_only_the_journal_its_recording_is_made_of(app) -> None:
    write(app)
    async with ph.load(app.spec) as harness:
        waiting = await harness.run("orders", "Refund A-1", principal="ann")
        done = await harness.approve(
            waiting.run_id, waiting.approval.approval_id, "approve", approver=FINANCE
        )
        entries = await harness.store.journal(done.run_id)
        record = await harness.store.get_run(done.run_id)
        report = await harness.replay(done.run_id)
    kinds = {e.kind for e in entries}
    assert kinds > DERIVED_FROM - {"model.failed", "model.interrupted", "tool.failed"}
    assert kinds - DERIVED_FROM  # the run kept more: events, processed texts, dispatches
    kept = [e for e in entries if e.kind in DERIVED_FROM]
    whole = Recording.from_journal(entries, record=record)
    assert Recording.from_journal(kept, record=record) == whole
    assert Recording.from_journal(kept) == Recording.from_journal(entries)  # by checkpoint
    # with the run's state (from_store), the outcome comes from it: no checkpoint is read
    assert "checkpoint" in kinds and "checkpoint" not in STORED_FROM
    stored = [e for e in entries if e.kind in STORED_FROM]
    assert Recording.from_journal(stored, record=record) == whole
    # the replay's own recording, from a journal of those kinds only, is the recorded one
    assert report.same, report.render()
    assert report.replayed.to_dict() == whole.redacted().to_dict()


async def test_only_a_deferred_report_field_is_made_when_read() -> None:
    from pytest_harness.replay.report import Deferred, ReplayReport

    made: list[int] = []

    def make() -> str:
        made.append(1)
        return "made"

    def kept() -> str:  # a callable value is a value, not a recipe
        raise AssertionError("called")

    fields = {"task": "t", "run_id": "r", "status": ("completed",) * 2, "output": ("o",) * 2}
    deferred = ReplayReport(**fields, replayed=Deferred(make))
    assert made == []
    assert (deferred.replayed, deferred.replayed, made) == ("made", "made", [1])
    assert ReplayReport(**fields, replayed=kept).replayed is kept


async def test_a_session_run_that_waits_keeps_its_history_when_another_completes(
    app, tmp_path
) -> None:
    """Runs A and B of one session both wait for approval; A completes, then B. B's second
    request starts with its first one's conversation (A's messages, not there when B started,
    stay out of it), and B replays the same, from the store and from its golden file."""
    write(app)
    async with ph.load(app.spec) as harness:
        first = await harness.run("orders", "hello", principal="ann")
        first = await harness.approve(
            first.run_id, first.approval.approval_id, "approve", approver=FINANCE
        )
        session = first.session_id
        a = await harness.run("orders", "A", principal="ann", session_id=session)
        b = await harness.run("orders", "B", principal="ann", session_id=session)
        await harness.approve(a.run_id, a.approval.approval_id, "approve", approver=FINANCE)
        b = await harness.approve(b.run_id, b.approval.approval_id, "approve", approver=FINANCE)
        assert b.ok
        recording = await Recording.from_store(harness.store, b.run_id)
        asked = [turn.request["messages"] for turn in recording.model_turns]
        assert len(recording.history) == 6  # the first run's conversation
        assert asked[1][: len(asked[0])] == asked[0] and asked[2][: len(asked[1])] == asked[1]
        from_store = await harness.replay(b.run_id)
    recording.redacted().save(tmp_path / "b.yaml")
    from_file = await replay_file(app, tmp_path / "b.yaml")
    for report in (from_store, from_file):
        assert report.same and report.model_requests_changed == (0, 3), report.render()


async def test_a_run_its_deadline_stopped_replays_the_same_and_keeps_no_duration(
    app, tmp_path
) -> None:
    """The deadline's decision names the limit, not the seconds the run took: its golden file
    holds no duration and its replay, which takes none, is the same."""
    spec = SPEC.replace("rules: [R1, R2]", "rules: [R1, R2]\n    deadline: 0.3s").replace(
        "delete_account]", "delete_account, slow]"
    )
    write(app, spec, script="[{call: slow, args: {seconds: 5}}, {say: done}]")
    async with ph.load(app.spec) as harness:
        limited = await harness.run("orders", "hurry", principal="ann")
        recording = await Recording.from_store(harness.store, limited.run_id)
    assert limited.status is ph.RunStatus.LIMITED and limited.limit == "deadline"
    (decision,) = [d for d in limited.trace if d.kind == "limit"]
    assert decision.detail == {"limit": 0.3}
    assert decision.summary() == "limit deadline → 0.3 reached"
    recording.save(tmp_path / "limited.yaml")
    assert "spent" not in (tmp_path / "limited.yaml").read_text()
    report = await replay_file(app, tmp_path / "limited.yaml")
    assert report.same and report.status == ("limited", "limited"), report.render()
    # a golden recorded before kept the seconds: they are not compared either
    text = (tmp_path / "limited.yaml").read_text()
    assert text.count("    limit: 0.3\n") == 1
    (tmp_path / "old.yaml").write_text(
        text.replace("    limit: 0.3\n", "    limit: 0.3\n    spent: 0.301\n")
    )
    assert Recording.load(tmp_path / "old.yaml").trace[-2].detail["spent"] == 0.301
    report = await replay_file(app, tmp_path / "old.yaml")
    assert report.same, report.render()


class RacingStore(MemoryStore):
    """A memory store whose next `session_runs` misses the runs created so far, as a run
    created at the same moment in another process misses one not yet committed."""

    racing = False

    async def session_runs(self, session_id, *, before=None):  # type: ignore[no-untyped-def]
        if self.racing:
            self.racing = False
            return []
        return await super().session_runs(session_id, before=before)


async def test_runs_created_at_once_in_a_new_session_keep_an_empty_history(app) -> None:
    """B is created while A, created just before in the session the caller named, is not
    visible yet: B's history is empty for good, also after A completes while B waits."""
    write(app)
    store = RacingStore()
    async with ph.load(app.spec, store=store) as harness:
        a = await harness.run("orders", "A", principal="ann", session_id="ses_chosen")
        store.racing = True
        b = await harness.run("orders", "B", principal="ann", session_id="ses_chosen")
        await harness.approve(a.run_id, a.approval.approval_id, "approve", approver=FINANCE)
        b = await harness.approve(b.run_id, b.approval.approval_id, "approve", approver=FINANCE)
        recording = await Recording.from_store(harness.store, b.run_id)
    assert b.ok and recording.history == ()
    assert [m["content"] for m in recording.model_turns[-1].request["messages"][:1]] == ["B"]
