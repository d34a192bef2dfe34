"""A replay runs with the caller's labels merged with TODAY's task labels, as a run would."""

from __future__ import annotations

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
    script: [{{call: lookup_order, args: {{order_id: A-1}}}}, {{say: done}}]
tools:
  lookup_order: {{call: "{module}:lookup_order"}}
rules:
  - id: gold-needs-legal
    when: tool == "lookup_order" && has(labels.tier) && labels.tier == "gold"
    then: approve
    approvers: [legal]
tasks:
  orders:
    prompt: p
    tools: [lookup_order]
    labels: {labels}
state: {{record: true}}
"""


async def record(app, path: Path, labels: str, **given: str) -> ph.RunResult:
    app.write(SPEC.format(labels=labels, module=app.module), base=False)
    async with ph.load(app.spec) as harness:
        result = await harness.run("orders", "look", principal="ann", labels=given or None)
        (await Recording.from_store(harness.store, result.run_id)).save(path)
    return result


async def replay(app, path: Path, labels: str) -> ph.ReplayReport:
    app.write(SPEC.format(labels=labels, module=app.module), base=False)
    async with ph.load(app.spec) as harness:
        return await harness.replay(path)


@pytest.mark.parametrize(
    ("before", "after", "statuses"),
    [
        ("{tier: silver}", "{tier: gold}", ("completed", "awaiting_approval")),
        # the run now calls the tool, which the recording never ran: the replay diverges
        ("{tier: gold}", "{tier: silver}", ("awaiting_approval", "running")),
        ("{tier: gold}", "{}", ("awaiting_approval", "running")),
    ],
)
async def test_a_task_label_edited_today_is_drift(app, tmp_path, before, after, statuses) -> None:
    golden = tmp_path / "g.yaml"
    await record(app, golden, before)
    assert (await replay(app, golden, before)).same
    report = await replay(app, golden, after)
    assert report.status == statuses and not report.same, report.render()


async def test_the_callers_labels_still_win_over_the_tasks(app, tmp_path) -> None:
    golden = tmp_path / "g.yaml"
    result = await record(app, golden, "{tier: silver}", tier="gold")
    assert result.status is ph.RunStatus.AWAITING_APPROVAL
    data = yaml.safe_load(golden.read_text())
    assert data["labels"] == {"tier": "gold"} and data["given_labels"] == {"tier": "gold"}
    assert (await replay(app, golden, "{tier: bronze}")).same


async def test_a_golden_recorded_before_given_labels_replays_its_labels(app, tmp_path) -> None:
    golden = tmp_path / "g.yaml"
    await record(app, golden, "{tier: gold}")
    data = yaml.safe_load(golden.read_text())
    del data["given_labels"]
    golden.write_text(yaml.safe_dump(data, sort_keys=False))
    assert (await replay(app, golden, "{tier: gold}")).same
