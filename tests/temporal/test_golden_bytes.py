"""A Temporal run's golden file is byte for byte the local golden of the same run.

Temporal's default JSON converter sorts every mapping's keys, so the goldens written from
Temporal runs listed tool arguments, schemas and answers alphabetically; the harness's clients
and workers use `temporal.converter` (keys in the order built) instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import pytest_harness as ph
from tests.temporal.helpers import WorkerProcess, make_spec

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]


async def _goldens(spec: Path, folder: Path) -> dict[str, str]:
    """The goldens of a completed run and of one that waits for an approval, as text."""
    texts = {}
    async with ph.load(spec) as harness:
        for task in ("small_refunds", "refunds"):  # the second waits (refund over 100)
            result = await harness.run(task, "Refund A-1", principal="ann")
            path = await harness.export(result.run_id, folder / f"{task}.yaml")
            texts[task] = path.read_text(encoding="utf-8")
    return texts


async def test_a_temporal_runs_golden_is_the_local_golden(
    tmp_path: Path, temporal_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = make_spec(tmp_path / "app", temporal_server)
    local = remote.with_name("local.yaml")
    lines = remote.read_text().splitlines(keepends=True)
    local.write_text("".join(line for line in lines if not line.startswith("execution:")))
    monkeypatch.setenv("EFFECTS", str(tmp_path / "app" / "effects"))
    here = await _goldens(local, tmp_path)
    worker = WorkerProcess(remote)
    try:
        there = await _goldens(remote, tmp_path / "app")
    finally:
        worker.stop()
    assert there == here
    assert "args:\n        order_id: A-1\n        amount: 250\n" in here["refunds"]
