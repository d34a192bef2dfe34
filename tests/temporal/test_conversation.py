"""The conversation a run's model activities carry: whole once, then only what each turn adds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

import pytest_harness as ph
from pytest_harness.temporal.conversation import Conversations, Sent, chain
from tests.temporal.helpers import WorkerProcess, make_spec

USER = {"role": "user", "content": "refund A-1"}
CALL = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "refund"}]}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "ok"}


def test_a_worker_that_served_the_last_attempt_gets_only_the_tail() -> None:
    sent, worker = Sent(), Conversations()
    first = sent.wire([USER], full=False)
    assert first == {"known": 0, "digest": "", "tail": [USER]}
    assert worker.messages("run_1", first) == [USER]
    sent.sent([USER], first)
    second = sent.wire([USER, CALL, RESULT], full=False)
    assert second == {"known": 1, "digest": chain("", [USER]), "tail": [CALL, RESULT]}
    assert worker.messages("run_1", second) == [USER, CALL, RESULT]
    sent.sent([USER, CALL, RESULT], second)
    again = sent.wire([USER, CALL, RESULT], full=False)  # a retry of the same turn
    assert again["tail"] == [] and worker.messages("run_1", again) == [USER, CALL, RESULT]


def test_any_other_worker_or_a_rewritten_conversation_gets_it_whole() -> None:
    sent = Sent()
    sent.sent([USER], sent.wire([USER], full=False))
    tail = sent.wire([USER, CALL], full=False)
    assert Conversations().messages("run_1", tail) is None  # a worker that never saw the run
    stale = Conversations()
    stale.messages("run_1", {"known": 0, "digest": "", "tail": [{"role": "user", "content": "x"}]})
    assert stale.messages("run_1", tail) is None  # it holds another conversation of that length
    assert sent.wire([{"role": "user", "content": "other"}, CALL], full=False)["known"] == 0
    whole = sent.wire([USER, CALL], full=True)
    assert whole["known"] == 0 and Conversations().messages("run_1", whole) == [USER, CALL]


def test_what_was_sent_is_kept_as_sent() -> None:
    sent, message = Sent(), {"role": "user", "content": "refund", "parts": ["a"]}
    sent.sent([message], sent.wire([message], full=False))
    message["parts"].append("b")  # the engine's copy changed: the worker's did not
    assert sent.wire([message], full=False)["known"] == 0


def test_workers_forget_the_least_recent_runs() -> None:
    worker = Conversations(limit=2)
    for run in ("a", "b", "c"):
        worker.messages(run, {"known": 0, "digest": "", "tail": [USER]})
    tail = {"known": 1, "digest": chain("", [USER]), "tail": []}
    assert worker.messages("a", tail) is None
    assert worker.messages("c", tail) == [USER]


async def _model_inputs(address: str, run_id: str) -> list[dict[str, Any]]:
    client = await Client.connect(address)
    history = await client.get_workflow_handle(run_id).fetch_history()
    inputs = []
    for event in history.events:
        scheduled = event.activity_task_scheduled_event_attributes
        if (
            event.HasField("activity_task_scheduled_event_attributes")
            and scheduled.activity_type.name == "harness_model"
        ):
            inputs.append(json.loads(scheduled.input.payloads[0].data))
    return inputs


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_run_sends_its_conversation_once_and_again_to_a_new_worker(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = make_spec(tmp_path, temporal_server)
    async with ph.load(spec) as harness:
        with WorkerProcess(spec):
            waiting = await harness.run("refunds", "refund A-1", principal="ann", session_id="s")
        assert waiting.approval is not None
        with WorkerProcess(spec):  # it never saw the run: the next turn is sent whole
            fin = ph.Principal("fin", roles=("finance",))
            done = await harness.approve(
                waiting.run_id, waiting.approval.approval_id, "approve", approver=fin
            )
    assert done.status is ph.RunStatus.COMPLETED, done.error
    sends = [
        i["request"]["conversation"] for i in await _model_inputs(temporal_server, done.run_id)
    ]
    assert [(s["known"], len(s["tail"])) for s in sends] == [(0, 1), (1, 2), (0, 3)]
    assert all(
        "history" not in i["conf"] for i in await _model_inputs(temporal_server, done.run_id)
    )


@pytest.mark.slow
@pytest.mark.asyncio
async def test_reading_a_waiting_run_leaves_its_history_as_it_is(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = make_spec(tmp_path, temporal_server)
    with WorkerProcess(spec):
        async with ph.load(spec) as harness:
            waiting = await harness.run(
                "refunds", "refund A-1", principal="ann", idempotency_key="k"
            )
            assert waiting.status is ph.RunStatus.AWAITING_APPROVAL and waiting.approval
            client = await Client.connect(temporal_server)
            handle = client.get_workflow_handle(waiting.run_id)
            before = len((await handle.fetch_history()).events)
            for _ in range(20):  # the same run asked for again and again, waited for each time
                again = await harness.run(
                    "refunds", "refund A-1", principal="ann", idempotency_key="k"
                )
                assert (again.run_id, again.status) == (waiting.run_id, waiting.status)
            assert len((await handle.fetch_history()).events) == before
            fin = ph.Principal("fin", roles=("finance",))
            done = await harness.approve(
                waiting.run_id, waiting.approval.approval_id, "approve", approver=fin
            )
            assert done.status is ph.RunStatus.COMPLETED, done.error
            history = await handle.fetch_history()
    # updates answer with the run's state, never with its journal or events
    answers = [
        e.workflow_execution_update_completed_event_attributes.outcome.success.payloads
        for e in history.events
        if e.HasField("workflow_execution_update_completed_event_attributes")
    ]
    data = [p[0].data for p in answers if p]
    assert any(b'"state"' in d for d in data)
    assert not any(b'"journal"' in d or b'"events"' in d for d in data)


def test_any_text_has_a_digest() -> None:
    odd = {"role": "tool", "content": "name-\udcff.txt"}  # a lone surrogate (os.listdir)
    sent, worker = Sent(), Conversations()
    wire = sent.wire([USER, odd], full=False)
    assert worker.messages("run_1", wire) == [USER, odd]
    sent.sent([USER, odd], wire)
    assert worker.messages("run_1", sent.wire([USER, odd], full=False)) == [USER, odd]
