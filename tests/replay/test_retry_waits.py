"""A replay charges the waits its recording's model retries took: the retry budget decides alike.

The run waited before each retry as its provider asked (`retry_after`, a backoff); the golden
keeps each wait with its error, and the replay charges it to the model's `retry_budget` (and
the deadline) without sleeping, so it stops retrying where the run did, or where today's
budget says.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

import pytest_harness as ph
from pytest_harness.recording.model import Recording

pytestmark = pytest.mark.asyncio

SPEC = """
models:
  default:
    use: scripted
    retries: 20
    retry_budget: {budget}
    fallback: [backup]
    script: [{script}]
  backup: {{use: scripted, script: [{{say: from backup}}]}}
tasks:
  t: {{prompt: p}}
state: {{record: true}}
"""


def limited(wait: float, n: int) -> str:
    return ", ".join([f"{{error: rate_limit, retry_after: {wait}s}}"] * n)


async def record(app, path: Path, *, budget: str, script: str) -> ph.RunResult:
    app.write(SPEC.format(budget=budget, script=script), base=False)
    async with ph.load(app.spec) as harness:
        result = await harness.run("t", "hi", principal="ann")
        (await Recording.from_store(harness.store, result.run_id)).save(path)
    return result


async def replay(app, path: Path, *, budget: str, script: str) -> ph.ReplayReport:
    app.write(SPEC.format(budget=budget, script=script), base=False)
    async with ph.load(app.spec) as harness:
        return await harness.replay(path)


async def test_a_run_whose_budget_stopped_its_retries_replays_the_same(app, tmp_path) -> None:
    """Two waits of 0.05 s fit a budget of 0.1 s; the third failure goes to the fallback."""
    golden, script = tmp_path / "g.yaml", limited(0.05, 5)
    result = await record(app, golden, budget="0.1s", script=script)
    assert [d.key for d in result.trace.of_kind("model")] == ["default"] * 3 + ["backup"]
    turns = yaml.safe_load(golden.read_text())["model_turns"]
    assert [t["answer"].get("wait") for t in turns] == [0.05, 0.05, 0.05, None]
    started = time.monotonic()
    report = await replay(app, golden, budget="0.1s", script=script)
    assert time.monotonic() - started < 0.1  # charged, never slept
    assert report.same, report.render()


async def test_a_budget_lowered_below_a_recorded_wait_is_drift(app, tmp_path) -> None:
    """Recorded: one 0.05 s wait, then the answer. Today's budget of 0.01 s cannot wait it: the
    step goes to the fallback model, as a run today does (the replay plays it the recorded
    answer: its output is the same, its decisions are not)."""
    golden, script = tmp_path / "g.yaml", limited(0.05, 1) + ", {say: from default}"
    assert (await record(app, golden, budget="1s", script=script)).output == "from default"
    report = await replay(app, golden, budget="0.01s", script=script)
    assert not report.same and report.failed(), report.render()
    assert "step 1 model backup" in report.render()  # the answer now comes from the fallback


async def test_a_golden_recorded_before_waits_were_kept_replays_as_it_did(app, tmp_path) -> None:
    golden, script = tmp_path / "g.yaml", limited(0.05, 1) + ", {say: from default}"
    await record(app, golden, budget="1s", script=script)
    data = yaml.safe_load(golden.read_text())
    del data["model_turns"][0]["answer"]["wait"]
    golden.write_text(yaml.safe_dump(data, sort_keys=False))
    assert (await replay(app, golden, budget="1s", script=script)).same


@pytest.mark.parametrize("wait", ["-1", "'5'", "true", ".nan"])
async def test_a_wait_that_is_no_duration_is_refused_at_load(app, tmp_path, wait: str) -> None:
    golden, script = tmp_path / "g.yaml", limited(0.05, 1) + ", {say: from default}"
    await record(app, golden, budget="1s", script=script)
    golden.write_text(golden.read_text().replace("wait: 0.05", f"wait: {wait}", 1))
    with pytest.raises(ph.ArchiveError, match="wait"):
        Recording.load(golden)


async def test_what_a_failed_attempt_cost_counts_in_the_replay(app, write_file, tmp_path) -> None:
    """The failed attempt charged 500 tokens, its retry 100. A token budget of 550 today
    limits the run; a replay that lost the failed attempt's usage would say `same`."""
    module = f"fn_{app.module}"
    write_file(
        f"{module}.py",
        """
        from pytest_harness.errors import ModelError
        from pytest_harness.models.base import ModelResponse, TokenUsage

        def answer(request):
            if request.turn == 0:
                raise ModelError("server", "overloaded", usage=(500, 0))
            return ModelResponse(text="done", usage=TokenUsage(90, 10))
        """,
    )
    spec = """
models:
  default: {{use: function, call: '{module}:answer', retries: 1}}
tasks:
  t: {{prompt: p, budget: {{tokens: {tokens}}}}}
state: {{record: true}}
"""
    app.write(spec.format(module=module, tokens=10_000), base=False)
    async with ph.load(app.spec) as harness:
        done = await harness.run("t", "x", principal="ann")
        (await Recording.from_store(harness.store, done.run_id)).save(tmp_path / "g.yaml")
    assert done.usage.tokens_in == 590
    app.write(spec.format(module=module, tokens=550), base=False)
    async with ph.load(app.spec) as harness:
        assert (await harness.run("t", "x", principal="ann")).status is ph.RunStatus.LIMITED
        report = await harness.replay(tmp_path / "g.yaml")
    assert report.status == ("completed", "limited"), report.render()
