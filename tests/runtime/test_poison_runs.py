"""A run whose every drive fails does not keep the other interrupted runs from being recovered.

Claims take the oldest claimable run first, and a drive that fails releases its lease: before,
`recover()` raised on the oldest such run and drove none after it, every time, and a worker
claimed that run again at once, forever, while the runs after it waited. Now `recover()` tries
each run once and raises the first failure after the others, and a worker holds a failing run
back for a lease (doubled at each failure) while it drives the rest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import pytest_harness as ph
from pytest_harness.store import SQLiteStore
from pytest_harness.worker import MAX_HOLD_BACK, Worker

pytestmark = pytest.mark.asyncio

SPEC = """
version: 1
name: poison
models:
  default:
    use: scripted
    script: [{say: one}, {say: two}, {say: three}, {say: four}]
tasks:
  t: {prompt: p}
state: {use: sqlite, path: state.db, record: true, lease: 2s}
"""


class RefusingStore(SQLiteStore):
    """A sqlite store that refuses every commit while `everything`, then those of `runs`."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.everything = True
        self.runs: set[str] = set()

    async def commit(self, run_id: str, token: int, **kwargs: Any) -> Any:
        if self.everything or run_id in self.runs:
            raise ph.StoreError(f"cannot commit run {run_id}: refused (injected)")
        return await super().commit(run_id, token, **kwargs)


async def interrupted(harness: ph.Harness, store: RefusingStore, count: int) -> list[str]:
    """`count` runs left `running` by a failed first commit, oldest first; the oldest poisoned."""
    for n in range(count):
        with pytest.raises(ph.RecordingError):
            await harness.run("t", f"run {n}", principal="ann")
    runs = sorted(await store.list_runs(), key=lambda r: r.created_at)
    assert [r.status for r in runs] == ["running"] * count
    assert all(r.lease_owner is None for r in runs)  # released: claimable at once
    store.everything = False
    store.runs = {runs[0].run_id}
    return [r.run_id for r in runs]


async def test_recover_drives_the_others_and_then_raises_naming_the_failed_run(
    tmp_path: Path,
) -> None:
    (tmp_path / "harness.yaml").write_text(SPEC)
    store = RefusingStore(tmp_path / "state.db")
    async with ph.load(tmp_path / "harness.yaml", store=store) as harness:
        poisoned, *others = await interrupted(harness, store, 3)
        with pytest.raises(ph.RecordingError) as caught:
            await harness.recover()
        assert poisoned in str(caught.value)
        (note,) = caught.value.__notes__
        assert f"1 run(s) could not be driven and stay running ({poisoned})" in note
        assert "2 other run(s) were recovered" in note
        statuses = {r.run_id: r.status for r in await store.list_runs()}
        assert statuses == {poisoned: "running", **dict.fromkeys(others, "completed")}
        store.runs.clear()  # what failed is mended: the next recover() drives it
        (again,) = await harness.recover()
        assert (again.run_id, again.status) == (poisoned, ph.RunStatus.COMPLETED)
        assert await harness.recover() == []


async def test_a_worker_holds_a_failing_run_back_and_drives_the_others(tmp_path: Path) -> None:
    (tmp_path / "harness.yaml").write_text(SPEC)
    store = RefusingStore(tmp_path / "state.db")
    lines: list[tuple[str, dict[str, Any]]] = []
    async with ph.load(tmp_path / "harness.yaml", store=store) as harness:
        poisoned, *others = await interrupted(harness, store, 3)
        worker = Worker(
            harness, exit_when_idle=True, log=lambda event, f: lines.append((event, dict(f)))
        )
        stats = await worker.run()
        statuses = {r.run_id: r.status for r in await store.list_runs()}
    assert statuses == {poisoned: "running", **dict.fromkeys(others, "completed")}
    errors = [fields for event, fields in lines if event == "run_error"]
    assert [(e["run_id"], e["error"], e["retry_in"]) for e in errors] == [
        (poisoned, "RecordingError", 2.0)
    ]
    assert stats.errors == 1 and stats.statuses == {"completed": 2}


async def test_the_hold_back_doubles_at_each_failure_up_to_its_cap(tmp_path: Path) -> None:
    (tmp_path / "harness.yaml").write_text(SPEC)
    async with ph.load(tmp_path / "harness.yaml") as harness:
        worker = Worker(harness)
        waits = [worker._hold_back("run_x") for _ in range(12)]
        assert waits[:4] == [2.0, 4.0, 8.0, 16.0]
        assert waits[-1] == MAX_HOLD_BACK and max(waits) == MAX_HOLD_BACK
        assert worker._held_back() == {"run_x"}
        worker._held["run_x"] = 0.0  # its wait is over
        assert worker._held_back() == set()
