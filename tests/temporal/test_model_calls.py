"""Model calls on Temporal: each attempt an activity, accounted exactly as a local run's."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

import pytest_harness as ph
from tests.temporal.helpers import WorkerProcess, temporal_execution, wait_for, write_app

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]

MODELS = '''
import os
import time
from pathlib import Path

from pytest_harness.models.base import ModelResponse, ProposedCall, TokenUsage


def answer(request):
    """Refund at the first turn, then say so; the first worker hangs in its first attempt."""
    folder = Path(os.environ["EFFECTS"])
    with (folder / "models.log").open("a") as log:
        log.write(f"{request.attempt_id} {request.turn} {os.getpid()}\\n")
    if os.environ.get("HANG_MODEL"):
        (folder / f"model-hanging-{request.attempt_id}").write_text(str(os.getpid()))
        time.sleep(60)
    if request.turn == 0:
        call = ProposedCall("c1", "refund", {"order_id": "A-1", "amount": 5})
        return ModelResponse(calls=(call,), usage=TokenUsage(30, 4))
    for piece in ("Refun", "ded."):
        request.on_text(piece)
    return ModelResponse(text="Refunded.", usage=TokenUsage(50, 2))
'''


def _spec(folder: Path, execution: str) -> Path:
    """A spec whose models fail, retry, fall back and cost money; `execution` as given."""
    return write_app(
        folder,
        f"""\
            version: 1
            name: tmodels
            models:
              main:
                use: scripted
                retries: 1
                price: {{input_per_mtok: 3, output_per_mtok: 15}}
                fallback: [backup]
                script:
                  - error: rate_limit
                    retry_after: 0.01
                  - call: refund
                    args: {{order_id: A-1, amount: 5}}
                    usage: {{input_tokens: 120, output_tokens: 8}}
                  - error: server
                  - error: server
              backup:
                use: scripted
                price: {{input_per_mtok: 1, output_per_mtok: 5}}
                script:
                  - say: "Refunded by the backup."
                    usage: {{input_tokens: 200, output_tokens: 6}}
              hanging:
                use: function
                call: "tmodels:answer"
            tools:
              refund: {{call: "ttools:refund", replay: idempotent}}
            tasks:
              refunds: {{model: main, prompt: "Desk.", tools: [refund], budget: {{usd: 1.0}}}}
              hangs: {{model: hanging, prompt: "Desk.", tools: [refund]}}
            state: {{use: memory, record: true, lease: 2s}}
            {execution}
            """,
        tmodels=MODELS,
    )


def _decisions(result: ph.RunResult) -> list[tuple[Any, ...]]:
    return [(d.step, d.kind, d.key, d.detail) for d in result.trace]


async def _events(harness: ph.Harness, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    seen = []
    async for event in harness.stream(run_id):
        data = {k: v for k, v in event.data.items() if k not in ("attempt", "execution_key")}
        seen.append((event.kind, data))
    return seen


async def test_a_temporal_run_decides_counts_and_records_as_a_local_run(
    tmp_path: Path, temporal_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = _spec(tmp_path / "local", "")
    remote = _spec(tmp_path / "remote", temporal_execution(temporal_server))
    monkeypatch.setenv("EFFECTS", str(tmp_path / "local" / "effects"))
    monkeypatch.syspath_prepend(str(tmp_path / "local"))
    async with ph.load(local) as harness:
        here = await harness.run("refunds", "refund A-1", principal="ann")
        here_events = await _events(harness, here.run_id)
        here_recording = await harness.recording(here.run_id)
    worker = WorkerProcess(remote)
    try:
        async with ph.load(remote) as harness:
            there = await harness.run("refunds", "refund A-1", principal="ann")
            there_events = await _events(harness, there.run_id)
            there_recording = await harness.recording(there.run_id)
    finally:
        worker.stop()
    assert here.status is ph.RunStatus.COMPLETED, here.error
    assert here.output == "Refunded by the backup."
    assert [d[1] for d in _decisions(here)].count("model") == 5  # 2 answers, 3 failed attempts
    assert (there.status, there.output) == (here.status, here.output)
    assert _decisions(there) == _decisions(here)
    assert there.usage == here.usage
    assert here.usage.usd > 0
    assert there_events == here_events
    assert there_recording.to_dict() == here_recording.to_dict()


async def test_worker_killed_during_a_model_call_another_worker_asks_again(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = _spec(tmp_path, temporal_execution(temporal_server))
    effects = tmp_path / "effects"
    first = WorkerProcess(spec, env={"HANG_MODEL": "1"})
    second = None
    try:
        async with ph.load(spec) as harness:
            handle = await harness.submit("hangs", "refund A-1", principal="ann")
            wait_for(effects, "model-hanging-*")
            first.kill()
            second = WorkerProcess(spec)
            result = await handle.result()
            events = [e async for e in harness.stream(handle.run_id)]
            journal = await _journal(harness, spec, handle.run_id)
    finally:
        first.stop()
        if second is not None:
            second.stop()
    assert result.status is ph.RunStatus.COMPLETED, result.error
    assert result.output == "Refunded."
    asked = [line.split() for line in (effects / "models.log").read_text().splitlines()]
    # the lost attempt, asked again at the same turn with a new attempt id, then turn 1
    assert [a[1] for a in asked] == ["0", "0", "1"]
    assert len({a[0] for a in asked}) == 3
    assert asked[0][2] != asked[1][2]  # in two worker processes
    # counted as the engine counts a lost attempt: interrupted, not failed, not charged
    (lost,) = [e for e in journal if e["kind"] == "model.interrupted"]
    assert lost["attempt_id"] == asked[0][0]
    assert "lost" in lost["payload"]["reason"]
    assert not [e for e in journal if e["kind"] == "model.failed"]
    assert [e.data["reason"] for e in events if e.kind == "attempt_reset"] == ["interrupted"]
    # the streamed text arrives with its attempt's answer, as stored events of the run
    deltas = [(e.data["seq"], e.data["text"]) for e in events if e.kind == "text_delta"]
    assert deltas == [(1, "Refun"), (2, "ded.")]
    assert (result.usage.tokens_in, result.usage.tokens_out, result.usage.steps) == (80, 6, 2)
    assert not result.usage.incomplete  # as after a stopped worker locally
    assert [d.kind for d in result.trace].count("model") == 2


async def _journal(harness: ph.Harness, spec: Path, run_id: str) -> list[dict[str, Any]]:
    """The journal the run's workflow holds."""
    from pytest_harness.temporal.client import connect

    client = await connect(harness.spec)
    snap = await client.get_workflow_handle(run_id).query("snapshot")
    return list(snap["journal"])


ARTIFACT_TOOLS = '''
from pytest_harness import Artifact


def receipt(order_id: str) -> dict:
    """Write a receipt."""
    return {"receipt": Artifact(f"receipt for {order_id}".encode(), "text/plain", name="r.txt")}
'''


async def test_a_recorded_runs_artifacts_go_to_the_workers_store(
    tmp_path: Path, temporal_server: str
) -> None:
    (tmp_path / "atools.py").write_text(ARTIFACT_TOOLS)
    spec = tmp_path / "harness.yaml"
    spec.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: tart
            models:
              m:
                use: scripted
                script:
                  - call: receipt
                    args: {{order_id: A-1}}
                  - say: "Here."
            tools:
              receipt: {{call: "atools:receipt", replay: safe}}
            tasks:
              receipts: {{model: m, prompt: "Desk.", tools: [receipt]}}
            state: {{use: sqlite, path: "{tmp_path / "state.db"}", record: true, lease: 2s}}
            execution:
              use: temporal
              address: "{temporal_server}"
              task_queue: q-{uuid.uuid4().hex[:8]}
            """
        )
    )
    worker = WorkerProcess(spec)
    try:
        async with ph.load(spec) as harness:
            result = await harness.run("receipts", "receipt A-1", principal="ann")
            journal = await _journal(harness, spec, result.run_id)
    finally:
        worker.stop()
    assert result.status is ph.RunStatus.COMPLETED, result.error
    (returned,) = [e for e in journal if e["kind"] == "tool.returned"]
    (uri,) = returned["payload"]["artifacts"]
    assert returned["payload"]["outcome"]["value"]["receipt"]["artifact"] == uri
    async with ph.open_store(tmp_path / "state.db") as store:
        stored = await store.artifact(uri.rsplit(":", 1)[1])
    assert stored is not None
    assert (stored.data, stored.media_type, stored.name) == (
        b"receipt for A-1",
        "text/plain",
        "r.txt",
    )


SLOW = """\
version: 1
name: tslow
models:
  slow: {use: scripted, timeout: 1s, retries: 0, script: [{say: late, delay: 4s}]}
  silent:
    use: scripted
    first_event_timeout: 1s
    retries: 0
    script: [{say: late, delay: 4s}]
tools: {}
tasks:
  slow: {model: slow, prompt: "Desk."}
  silent: {model: silent, prompt: "Desk."}
state: {use: memory, record: true, lease: 2s}
"""


async def test_model_timeouts_end_an_attempt_as_locally(
    tmp_path: Path, temporal_server: str
) -> None:
    local = tmp_path / "local.yaml"
    local.write_text(SLOW)
    remote = tmp_path / "remote.yaml"
    queue = f"q-{uuid.uuid4().hex[:8]}"
    remote.write_text(
        SLOW + f'execution: {{use: temporal, address: "{temporal_server}", task_queue: {queue}}}\n'
    )
    async with ph.load(local) as harness:
        here = [await harness.run(task, "hi", principal="ann") for task in ("slow", "silent")]
    worker = WorkerProcess(remote)
    try:
        async with ph.load(remote) as harness:
            there = [await harness.run(task, "hi", principal="ann") for task in ("slow", "silent")]
    finally:
        worker.stop()
    for a, b in zip(here, there, strict=True):
        assert a.status is ph.RunStatus.FAILED
        assert (b.status, b.error) == (a.status, a.error)
        assert _decisions(b) == _decisions(a)
    assert "did not answer within 1" in here[0].error["message"]
    assert "first_event_timeout" in here[1].error["message"]
