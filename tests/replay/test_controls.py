"""A run a `cancel()` or `pause()` ended where it had stopped replays the same: the golden keeps
the control, and the replay applies it where the recorded run was (its status and step)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import pytest_harness as ph
from pytest_harness.errors import ArchiveError
from pytest_harness.recording.model import Recording

pytestmark = pytest.mark.asyncio

SPEC = """
models:
  default:
    use: scripted
    script: [{{call: lookup_order, args: {{order_id: A-1}}}}, {{say: done}}]
tools:
  lookup_order: {{call: "{module}:lookup_order"}}
rules:
  - {{id: check, when: 'tool == "lookup_order"', then: {then}, approvers: [legal]}}
tasks:
  orders: {{prompt: p, tools: [lookup_order]}}
state: {{record: true}}
"""


async def record(app, path: Path, control: str) -> ph.RunResult:
    app.write(SPEC.format(module=app.module, then="approve"), base=False)
    async with ph.load(app.spec) as harness:
        waiting = await harness.run("orders", "look", principal="ann")
        assert waiting.status is ph.RunStatus.AWAITING_APPROVAL
        result = await getattr(harness, control)(waiting.run_id)
        (await Recording.from_store(harness.store, result.run_id)).save(path)
    return result


async def replay(app, path: Path, then: str = "approve") -> ph.ReplayReport:
    app.write(SPEC.format(module=app.module, then=then), base=False)
    async with ph.load(app.spec) as harness:
        return await harness.replay(path)


@pytest.mark.parametrize(("control", "status"), [("cancel", "cancelled"), ("pause", "paused")])
async def test_a_control_where_the_run_waited_replays_the_same(
    app, tmp_path, control, status
) -> None:
    golden = tmp_path / "g.yaml"
    result = await record(app, golden, control)
    assert result.status.value == status
    outcome = yaml.safe_load(golden.read_text())["outcome"]
    assert outcome["control"] == {"action": control, "status": "awaiting_approval", "step": 1}
    report = await replay(app, golden)
    assert report.same and report.status == (status, status), report.render()
    # what --update-recordings would write keeps the control, and replays the same again
    again = tmp_path / "again.yaml"
    report.replayed.save(again)
    assert again.read_text() == golden.read_text()


@pytest.mark.parametrize("control", ["cancel", "pause"])
async def test_a_run_that_no_longer_stops_there_is_drift(app, tmp_path, control) -> None:
    golden = tmp_path / "g.yaml"
    await record(app, golden, control)
    report = await replay(app, golden, then="allow")  # no approval: the run goes on
    # to a call the recording never ran: a diverged replay, never `same`
    assert not report.same and report.failed() and report.diverged is not None


async def test_a_golden_without_its_control_replays_where_the_run_stopped(app, tmp_path) -> None:
    golden = tmp_path / "g.yaml"
    await record(app, golden, "cancel")
    data = yaml.safe_load(golden.read_text())
    del data["outcome"]["control"]  # as goldens recorded before controls were kept
    golden.write_text(yaml.safe_dump(data, sort_keys=False))
    report = await replay(app, golden)
    assert report.status == ("cancelled", "awaiting_approval") and not report.same


@pytest.mark.parametrize(
    ("control", "message"),
    [
        ({"action": "stop", "status": "awaiting_approval", "step": 1}, "outcome.control.action"),
        ({"action": "cancel", "status": "waiting", "step": 1}, "outcome.control.status"),
        ({"action": "cancel", "status": "paused", "step": -1}, "outcome.control.step"),
        ({"action": "cancel", "status": "paused", "step": 1, "at": 2}, "outcome.control"),
    ],
)
async def test_a_malformed_control_names_its_key(app, tmp_path, control, message) -> None:
    golden = tmp_path / "g.yaml"
    await record(app, golden, "cancel")
    data = yaml.safe_load(golden.read_text())
    data["outcome"]["control"] = control
    golden.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ArchiveError, match=r"g\.yaml:\d+ " + re.escape(message)):
        Recording.load(golden)
