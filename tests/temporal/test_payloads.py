"""Runs larger than one Temporal payload (2 MiB): read in pages, or failed with a typed error."""

from __future__ import annotations

import re
import textwrap
import uuid
from pathlib import Path

import pytest

import pytest_harness as ph
from pytest_harness.errors import PayloadTooLarge
from pytest_harness.recording.model import Recording
from pytest_harness.temporal.sessions import slot_id
from tests.temporal.helpers import WorkerProcess, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]

FINANCE = ph.Principal("fin", roles=("finance",))

BIG_TOOL = '''
import os
import time
from pathlib import Path

from pytest_harness.tools.context import current_tool_context


def big(n: int) -> str:
    """A long text (its first attempt hangs when `n` is `HANG_N`)."""
    ctx = current_tool_context()
    if os.environ.get("HANG_N") == str(n) and ctx.attempt == 1:
        (Path(os.environ["EFFECTS"]) / f"hanging-{n}").write_text("")
        time.sleep(60)
    return "x" * n
'''


def big_spec(
    folder: Path, address: str | None, n: int, calls: int = 4, *, record: bool = True
) -> Path:
    """A run whose tool returns `n + i` characters at its i-th call of `calls`, then says done."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "effects").mkdir(exist_ok=True)
    (folder / "bigtools.py").write_text(BIG_TOOL)
    script = (
        "".join(f"      - call: big\n        args: {{n: {n + i}}}\n" for i in range(calls))
        + '      - say: "done"\n'
    )
    execution = (
        ""
        if address is None
        else f'execution: {{use: temporal, address: "{address}", '
        f"task_queue: q-{uuid.uuid4().hex[:8]}}}\n"
    )
    spec = folder / "harness.yaml"
    spec.write_text(
        textwrap.dedent(
            """\
            version: 1
            name: bigdesk
            models:
              m:
                use: scripted
                script:
            """
        )
        + script
        + textwrap.dedent(
            """\
            tools:
              big: {call: "bigtools:big", replay: idempotent}
            rules:
              - id: tiny-needs-finance
                when: tool == "big" && args.n == 7
                then: approve
                approvers: [finance]
            tasks:
              t: {model: m, prompt: Desk., tools: [big]}
            state: {use: memory, record: %s, lease: 3s}
            """
            % ("true" if record else "false")
        )
        + execution
    )
    return spec


@pytest.mark.timeout(300)
async def test_a_run_larger_than_a_payload_completes_and_reads_back_whole(
    tmp_path: Path, temporal_server: str
) -> None:
    local_spec = big_spec(tmp_path / "local", None, 700_000)
    async with ph.load(local_spec) as harness:
        local = await harness.run("t", "go", principal="ann")
        local_journal = await harness.store.journal(local.run_id)
        local_recording = await harness.recording(local.run_id)
    assert local.status is ph.RunStatus.COMPLETED, local.error

    spec = big_spec(tmp_path / "temporal", temporal_server, 700_000)
    with WorkerProcess(spec):
        async with ph.load(spec) as harness:
            done = await harness.run("t", "go", principal="ann")
            again = await harness.result(done.run_id)
            recording = await harness.recording(done.run_id)
            archive = await harness.export(
                done.run_id,
                tmp_path / "out" / "big.hx",
                policy=ph.ExportPolicy(include_payloads=True),
            )
            golden = await harness.export(done.run_id, tmp_path / "out" / "big.yaml")
            listed = await harness.runs()
            events = [e async for e in harness.stream(done.run_id)]
    assert done.status is ph.RunStatus.COMPLETED, done.error
    assert (done.output, again.output) == (local.output, local.output) == ("done", "done")
    assert again.trace == local.trace
    assert [s.run_id for s in listed] == [done.run_id]
    assert events[-1].kind == "run_result"
    assert len(recording.model_turns) == len(local_recording.model_turns) == 5
    assert recording.tool_results == local_recording.tool_results
    assert len(recording.tool_results) == 4
    assert Recording.load(golden).tool_results == recording.tool_results
    played = ph.playback(archive)
    assert [r["kind"] for r in played.records] == [e.kind for e in local_journal]
    assert len(played.records) == len(local_journal)
    assert ph.verify_archive(archive).valid


@pytest.mark.timeout(240)
async def test_a_tool_result_over_the_payload_limit_fails_the_run_with_a_typed_error(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = big_spec(tmp_path, temporal_server, 3_000_000, calls=1)
    with WorkerProcess(spec):
        async with ph.load(spec) as harness:
            failed = await harness.run("t", "go", principal="ann")
            read = await harness.result(failed.run_id)
    assert failed.status is ph.RunStatus.FAILED
    assert failed.error is not None and read.error == failed.error
    assert failed.error["type"] == "PayloadTooLarge"
    message = failed.error["message"]
    assert "tool big" in message
    size = re.search(r"is (\d+) bytes of JSON", message)
    assert size is not None, message
    assert 3_000_000 < int(size[1]) < 3_001_000  # the result once, and its envelope
    assert str(2 * 1024 * 1024 - 16 * 1024) in message  # the limit


@pytest.mark.timeout(240)
async def test_a_whole_conversation_over_the_limit_resent_to_a_new_worker_fails_the_run(
    tmp_path: Path, temporal_server: str
) -> None:
    # 1.2 MB results, each within the limit; the first worker dies in the second call, and
    # the one that takes over must be sent the whole conversation (2.4 MB) for the next turn
    spec = big_spec(tmp_path, temporal_server, 1_200_000, calls=2, record=False)
    first = WorkerProcess(spec, env={"HANG_N": "1200001"})
    second = None
    try:
        async with ph.load(spec) as harness:
            handle = await harness.submit("t", "go", principal="ann")
            wait_for(tmp_path / "effects", "hanging-*")
            first.kill()
            second = WorkerProcess(spec)
            failed = await handle.result()
    finally:
        first.stop()
        if second is not None:
            second.stop()
    assert failed.status is ph.RunStatus.FAILED
    assert failed.error is not None and failed.error["type"] == "PayloadTooLarge"
    message = failed.error["message"]
    assert "the request to model m (the whole conversation, turn 2)" in message, message
    assert str(2 * 1024 * 1024 - 16 * 1024) in message


@pytest.mark.timeout(240)
async def test_a_run_larger_than_a_page_waits_for_an_approval_and_is_approved(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = big_spec(tmp_path, temporal_server, 700_000, calls=2)
    text = spec.read_text().replace("n: 700001", "n: 7")  # the second call needs finance
    spec.write_text(text)
    with WorkerProcess(spec):
        async with ph.load(spec) as harness:
            waiting = await harness.run("t", "go", principal="ann")
            assert waiting.status is ph.RunStatus.AWAITING_APPROVAL, waiting.error
            assert waiting.approval is not None
            listed = await harness.runs(status="awaiting_approval")
            done = await harness.approve(
                waiting.run_id, waiting.approval.approval_id, "approve", approver=FINANCE
            )
    assert [r.run_id for r in listed] == [waiting.run_id]
    assert done.status is ph.RunStatus.COMPLETED, done.error
    assert done.output == "done"
    assert len(done.trace) > len(waiting.trace) > 0


@pytest.mark.timeout(240)
async def test_an_ended_run_is_read_without_a_worker_unless_it_is_larger_than_a_page(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = big_spec(tmp_path, temporal_server, 300_000, calls=2)  # 1.2 MB of messages
    small = big_spec(tmp_path / "small", temporal_server, 10, calls=1)
    with WorkerProcess(spec), WorkerProcess(small):
        async with ph.load(spec) as harness:
            large_run = await harness.run("t", "go", principal="ann")
        async with ph.load(small) as harness:
            small_run = await harness.run("t", "go", principal="ann")
    assert large_run.status is small_run.status is ph.RunStatus.COMPLETED
    async with ph.load(small) as harness:  # no worker: the closed workflow's result is the run
        again = await harness.result(small_run.run_id)
        recording = await harness.recording(small_run.run_id)
    assert (again.output, again.trace) == (small_run.output, small_run.trace)
    assert recording.output == "done"
    async with ph.load(spec) as harness:
        (listed,) = await harness.runs()  # an ended run's head is its workflow's result
        with pytest.raises(ph.ExecutionError, match="pytest-harness worker") as caught:
            await harness.result(large_run.run_id)
    assert (listed.run_id, listed.status) == (large_run.run_id, ph.RunStatus.COMPLETED)
    assert f"run {large_run.run_id} has ended" in str(caught.value)


@pytest.mark.timeout(240)
async def test_a_start_over_the_payload_limit_is_refused_with_a_typed_error_and_takes_no_slot(
    tmp_path: Path, temporal_server: str
) -> None:
    spec = big_spec(tmp_path, temporal_server, 10, calls=1)
    async with ph.load(spec) as harness:
        with pytest.raises(PayloadTooLarge) as caught:
            await harness.submit("t", "y" * 2_200_000, principal="ann", session_id="s1")
        small = await harness.submit("t", "go", principal="ann", session_id="s1")
    error = caught.value
    assert error.what.startswith("the start of a run of task t in session s1"), error.what
    assert "its input, 2200002 bytes" in str(error)
    assert error.size > 2_200_000 and error.limit == 2 * 1024 * 1024 - 16 * 1024
    # the refused start took no slot: the next run of the session is its first
    queue = re.search(r"task_queue: (q-\w+)", spec.read_text())
    assert queue is not None
    assert small.run_id == slot_id(queue[1], "s1", 1)
