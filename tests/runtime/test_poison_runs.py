"""A run whose every drive fails does not keep the other interrupted runs from being recovered.

Claims take the oldest claimable run first, and a drive that fails releases its lease: before,
`recover()` raised on the oldest such run and drove none after it, every time, and a worker
claimed that run again at once, forever, while the runs after it waited. Now `recover()` tries
each run once and raises the first failure after the others, and a worker holds a failing run
back for a lease (doubled at each failure) while it drives the rest.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

import pytest_harness as ph
from pytest_harness.store import SQLiteStore
from pytest_harness.worker import MAX_HOLD_BACK, Worker, run_worker

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
        self.claims_left: int | None = None
        """How many more claims succeed (None: all); then the store is down."""

    async def claim_run(self, *args: Any, **kwargs: Any) -> Any:
        if self.claims_left is not None:
            if self.claims_left <= 0:
                raise ph.StoreError("cannot claim a run: the database is down (injected)")
            self.claims_left -= 1
        return await super().claim_run(*args, **kwargs)

    async def commit(self, run_id: str, token: int, **kwargs: Any) -> Any:
        if self.everything or run_id in self.runs:
            raise ph.StoreError(f"cannot commit run {run_id}: refused (injected)")
        return await super().commit(run_id, token, **kwargs)


@dataclass
class Poisoned:
    """Three runs left `running` by a failed first commit, oldest first; the oldest poisoned."""

    harness: ph.Harness
    store: RefusingStore
    run_ids: list[str]

    @property
    def poisoned(self) -> str:
        return self.run_ids[0]

    async def statuses(self) -> dict[str, str]:
        return {r.run_id: r.status for r in await self.store.list_runs()}


@pytest_asyncio.fixture
async def runs(tmp_path: Path) -> AsyncIterator[Poisoned]:
    (tmp_path / "harness.yaml").write_text(SPEC)
    store = RefusingStore(tmp_path / "state.db")
    async with ph.load(tmp_path / "harness.yaml", store=store) as harness:
        for n in range(3):
            with pytest.raises(ph.RecordingError):
                await harness.run("t", f"run {n}", principal="ann")
        left = sorted(await store.list_runs(), key=lambda r: r.created_at)
        assert [r.status for r in left] == ["running"] * 3
        assert all(r.lease_owner is None for r in left)  # released: claimable at once
        store.everything = False
        store.runs = {left[0].run_id}
        yield Poisoned(harness, store, [r.run_id for r in left])


async def test_recover_drives_the_others_and_then_raises_naming_the_failed_run(
    runs: Poisoned,
) -> None:
    with pytest.raises(ph.RecordingError) as caught:
        await runs.harness.recover()
    assert runs.poisoned in str(caught.value)
    (note,) = caught.value.__notes__
    assert f"1 run(s) could not be driven and stay running ({runs.poisoned})" in note
    assert "2 other run(s) were recovered" in note
    assert await runs.statuses() == {
        runs.poisoned: "running",
        **dict.fromkeys(runs.run_ids[1:], "completed"),
    }
    runs.store.runs.clear()  # what failed is mended: the next recover() drives it
    (again,) = await runs.harness.recover()
    assert (again.run_id, again.status) == (runs.poisoned, ph.RunStatus.COMPLETED)
    assert await runs.harness.recover() == []


async def test_a_store_that_fails_after_a_run_failed_still_names_that_run(runs: Poisoned) -> None:
    runs.store.claims_left = 1  # the poisoned run is claimed, then the database goes down
    with pytest.raises(ph.StoreError, match="the database is down") as caught:
        await runs.harness.recover()
    (note,) = caught.value.__notes__
    assert f"could not be driven and stay running ({runs.poisoned})" in note
    assert "0 other run(s) were recovered" in note


async def test_a_worker_holds_a_failing_run_back_and_drives_the_others(runs: Poisoned) -> None:
    lines: list[tuple[str, dict[str, Any]]] = []
    worker = Worker(
        runs.harness, exit_when_idle=True, log=lambda event, f: lines.append((event, dict(f)))
    )
    stats = await worker.run()
    assert await runs.statuses() == {
        runs.poisoned: "running",
        **dict.fromkeys(runs.run_ids[1:], "completed"),
    }
    errors = [fields for event, fields in lines if event == "run_error"]
    assert [(e["run_id"], e["error"], e["retry_in"]) for e in errors] == [
        (runs.poisoned, "RecordingError", 2.0)
    ]
    assert stats.errors == 1 and stats.statuses == {"completed": 2}
    assert worker.held_back == {runs.poisoned}


async def test_a_batch_worker_that_left_a_run_held_back_exits_1(
    runs: Poisoned, capsys: pytest.CaptureFixture[str]
) -> None:
    args = argparse.Namespace(concurrency=1, idle=1.0, exit_when_idle=True, accept=[])
    assert await run_worker(runs.harness, args) == 1
    said = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [e["run_id"] for e in said if e["event"] == "run_error"] == [runs.poisoned]
    runs.store.runs.clear()  # mended: the next batch drives it and exits 0
    assert await run_worker(runs.harness, args) == 0
    assert set((await runs.statuses()).values()) == {"completed"}


async def test_the_hold_back_doubles_at_each_failure_up_to_its_cap(tmp_path: Path) -> None:
    (tmp_path / "harness.yaml").write_text(SPEC)
    async with ph.load(tmp_path / "harness.yaml") as harness:
        worker = Worker(harness)
        waits = [worker._hold_back("run_x") for _ in range(12)]
        assert waits[:4] == [2.0, 4.0, 8.0, 16.0]
        assert waits[-1] == MAX_HOLD_BACK and max(waits) == MAX_HOLD_BACK
        assert worker._held_back() == {"run_x"}
        worker._held["run_x"] = time.monotonic() - 1  # its wait is over
        assert worker._held_back() == set()
        assert worker._failures == {"run_x": 12}  # it fails again: the wait goes on doubling
        worker._held["run_x"] = time.monotonic() - MAX_HOLD_BACK  # quiet since: forgotten
        assert worker._held_back() == set()
        assert worker._failures == {} and worker._held == {}
