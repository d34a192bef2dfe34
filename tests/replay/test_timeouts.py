"""A call the harness's own `timeout` stopped replays the same only while that timeout is today's.

The recording holds the harness's verdict (`tool 'slow' timed out after 0.1s`, `model default
did not answer within 0.1s`), not an answer: with the timeout raised or removed, a run today may
get the result the recording does not have, so the replay diverges there. Before, it replayed
the old timeout, `same`. A provider's own timeout error is an answer, played back as it is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import pytest_harness as ph

pytestmark = pytest.mark.asyncio

SPEC = """
rules: []
guards: []
tasks:
  orders:
    prompt: You are the order desk.
    tools: [lookup_order, slow]
state: {record: true}
"""


def write(app, script: str, *, tool: str = "", model: str = "") -> None:
    app.write(SPEC)
    text = app.spec.read_text().replace("script: []", f"script: {script}{model}", 1)
    text = text.replace(
        f'slow: {{call: "{app.module}:slow"}}', f'slow: {{call: "{app.module}:slow"{tool}}}'
    )
    app.spec.write_text(text)


async def record(app, path: Path) -> ph.RunResult:
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Look A-1 up", principal="ann")
        return result, await harness.export(result.run_id, path)


async def replay(app, path: Path) -> ph.ReplayReport:
    async with ph.load(app.spec) as harness:
        return await harness.replay(path)


TOOL_SCRIPT = "[{call: slow, args: {seconds: 5}}, {say: 'done'}]"


@pytest.mark.parametrize("today", [", timeout: 10s", ""])
async def test_a_tool_timeout_raised_or_removed_is_never_the_same(app, tmp_path, today) -> None:
    write(app, TOOL_SCRIPT, tool=", timeout: 0.1s")
    result, golden = await record(app, tmp_path / "g.yaml")
    [call] = result.trace.tool_calls()
    assert call.outcome == "timeout"
    assert (await replay(app, golden)).same
    write(app, TOOL_SCRIPT, tool=today)
    report = await replay(app, golden)
    assert not report.same and report.failed()
    assert report.diverged is not None and "timed out when recorded" in report.diverged


MODEL_SCRIPT = "[{say: 'slow', delay: 5s}, {say: 'fast'}]"


@pytest.mark.parametrize("today", ["\n    timeout: 10s", ""])
async def test_a_model_timeout_raised_or_removed_is_never_the_same(app, tmp_path, today) -> None:
    write(app, MODEL_SCRIPT, model="\n    timeout: 0.1s")
    result, golden = await record(app, tmp_path / "g.yaml")
    assert result.output == "fast"  # the first attempt timed out, the retry answered
    assert (await replay(app, golden)).same
    write(app, MODEL_SCRIPT, model=today)
    report = await replay(app, golden)
    assert not report.same and report.failed()
    assert report.diverged is not None and "model turn 1 timed out" in report.diverged


async def test_a_providers_own_timeout_is_an_answer(app, tmp_path) -> None:
    script = "[{error: timeout}, {say: 'fast'}]"
    write(app, script, model="\n    timeout: 0.1s")
    _, golden = await record(app, tmp_path / "g.yaml")
    write(app, script)
    assert (await replay(app, golden)).same


@pytest.mark.parametrize(
    ("today", "same"),
    [
        ("\n    first_event_timeout: 0.2s", True),
        ("\n    first_event_timeout: 10s", False),
        ("", False),
        ("\n    timeout: 0.2s", False),  # another setting; the first-event one is gone
    ],
)
async def test_a_first_event_timeout_replays_the_same_only_while_it_is_todays(
    app, tmp_path, today, same
) -> None:
    write(app, MODEL_SCRIPT, model="\n    first_event_timeout: 0.2s")
    result, golden = await record(app, tmp_path / "g.yaml")
    assert result.output == "fast"  # the first attempt sent nothing in time, the retry answered
    write(app, MODEL_SCRIPT, model=today)
    report = await replay(app, golden)
    assert report.same is same, report.render()
    if not same:
        assert report.diverged is not None and "got no first event in time" in report.diverged
