"""A model call the run's deadline cut is a turn of its recording: the replay cuts it again.

Before, the golden of such a run (a test of a deadline with a scripted `delay`) had no turn for
the cut call, and its replay, which takes no time, asked for one past the end: `diverged` with
the spec unchanged, so that golden could never pass the gate.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import pytest_harness as ph
from pytest_harness.recording.model import Recording

pytestmark = pytest.mark.asyncio

SPEC = """
rules: []
guards: []
tasks:
  orders:
    prompt: You are the order desk.
    tools: [lookup_order]
{deadline}
state: {{record: true}}
"""

SCRIPT = "[{call: lookup_order, args: {order_id: A-1}}, {say: 'too late', delay: 5s}]"


def write(app, deadline: str) -> None:
    app.write(SPEC.format(deadline=deadline))
    app.spec.write_text(app.spec.read_text().replace("script: []", f"script: {SCRIPT}", 1))


async def record(app, path: Path) -> ph.RunResult:
    write(app, "    deadline: 0.2s")
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "Look A-1 up", principal="ann")
        (await Recording.from_store(harness.store, result.run_id)).save(path)
    return result


async def replay(app, path: Path, deadline: str) -> ph.ReplayReport:
    write(app, deadline)
    async with ph.load(app.spec) as harness:
        return await harness.replay(path)


async def test_a_model_call_the_deadline_cut_replays_the_same(app, tmp_path) -> None:
    golden = tmp_path / "g.yaml"
    result = await record(app, golden)
    assert result.status is ph.RunStatus.LIMITED and result.limit == "deadline"
    turns = yaml.safe_load(golden.read_text())["model_turns"]
    assert [t["answer"].get("interrupted") for t in turns] == [None, "deadline"]
    report = await replay(app, golden, "    deadline: 0.2s")
    assert report.same, report.render()
    assert report.model_answers_used == (2, 2)
    # the replay's own recording (what --update-recordings writes) replays the same too
    again = tmp_path / "again.yaml"
    report.replayed.save(again)
    assert (await replay(app, again, "    deadline: 0.2s")).same


async def test_the_deadline_removed_today_is_never_the_same(app, tmp_path) -> None:
    """A run today waits for the answer the recording does not have: the replay diverges."""
    golden = tmp_path / "g.yaml"
    await record(app, golden)
    report = await replay(app, golden, "")
    assert not report.same and report.failed()
    assert report.diverged is not None and "cut by the run's deadline" in report.diverged
