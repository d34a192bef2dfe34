"""Runs larger than one Temporal payload (2 MiB): read in pages, or failed with a typed error."""

from __future__ import annotations

import re
import textwrap
import uuid
from pathlib import Path

import pytest

import pytest_harness as ph
from pytest_harness.recording.model import Recording
from tests.temporal.helpers import WorkerProcess

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]

BIG_TOOL = '''
def big(n: int) -> str:
    """A long text."""
    return "x" * n
'''


def big_spec(folder: Path, address: str | None, n: int, calls: int = 4) -> Path:
    """A run whose tool returns `n` characters, `calls` times, then says done (recorded)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "effects").mkdir(exist_ok=True)
    (folder / "bigtools.py").write_text(BIG_TOOL)
    script = (
        "".join(f"      - call: big\n        args: {{n: {n}}}\n" for _ in range(calls))
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
            tasks:
              t: {model: m, prompt: Desk., tools: [big]}
            state: {use: memory, record: true, lease: 5s}
            """
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
