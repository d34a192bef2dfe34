"""Text no store can hold gets the same typed answer on Temporal as on every local store.

Before, a run id with a lone surrogate raised a bare `UnicodeEncodeError` out of the SDK on
every lookup, and an approver id with one was sent to the workflow and approved the call. Now
`TemporalHarness` checks a lookup's run id and an answer's arguments as `Harness` does
(`runtime/arguments.py`, `harness_control.checked_approval` / `checked_resolution`) before
anything is sent: `UnknownRun`, `StoreError` naming the argument, and no update reaches the
workflow's history. The cases are `tests/runtime/test_unencodable_ids.py`'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pytest_harness as ph
from pytest_harness.errors import ResolutionError, StoreError, UnknownRun
from tests.runtime.test_unencodable_ids import ANSWERS, FILTERS, FINANCE, LOOKUPS, Lookup, at
from tests.temporal.helpers import WorkerProcess, make_spec

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]


async def handle_events(harness: ph.Harness, run_id: str, tmp: Path) -> list[ph.Event]:
    handle = await harness.submit("refunds", "refund A-1", principal="ann")
    await handle.result()
    handle.run_id = run_id  # the handle's events, of a run id no store can hold
    return [event async for event in handle.events()]


TEMPORAL_LOOKUPS: dict[str, Lookup] = {**LOOKUPS, "handle.events": handle_events}


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory, temporal_server: str) -> Iterator[Path]:
    """A Temporal spec whose `refunds` task stops at an approval, with a worker for it."""
    path = make_spec(tmp_path_factory.mktemp("ids"), temporal_server)
    with WorkerProcess(path):
        yield path


async def waiting_run(harness: ph.Harness) -> ph.RunResult:
    run = await harness.run("refunds", "refund A-1", principal="ann")
    assert run.status is ph.RunStatus.AWAITING_APPROVAL and run.approval is not None
    return run


async def updates(harness: ph.Harness, run_id: str) -> list[str]:
    """The names of the updates the run's workflow accepted: what reached its history."""
    handle = await harness._handle(run_id)  # type: ignore[attr-defined]
    return [
        e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        async for e in handle.fetch_history_events()
        if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]


async def seen(harness: ph.Harness, run: ph.RunResult) -> Any:
    now = await harness.result(run.run_id)
    return now.status, now.approval, await updates(harness, run.run_id)


@pytest.mark.parametrize("bad", ["run_\udcff", "run_\x00"], ids=["surrogate", "NUL"])
@pytest.mark.parametrize("call", list(TEMPORAL_LOOKUPS))
async def test_a_run_id_no_workflow_can_have_is_an_unknown_run(
    spec: Path, tmp_path: Path, call: str, bad: str
) -> None:
    async with ph.load(spec) as harness:
        run = await waiting_run(harness)
        before = await seen(harness, run)
        with pytest.raises(UnknownRun) as caught:
            await TEMPORAL_LOOKUPS[call](harness, bad, tmp_path)
        assert caught.value.run_id == bad
        assert ascii(bad) in str(caught.value)
        assert await seen(harness, run) == before
    assert not (tmp_path / "run.hx").exists() and not (tmp_path / "run.yaml").exists()


@pytest.mark.parametrize("call", list(FILTERS))
async def test_a_filter_no_store_can_hold_matches_nothing(
    spec: Path, tmp_path: Path, call: str
) -> None:
    async with ph.load(spec) as harness:
        run = await waiting_run(harness)
        assert await FILTERS[call](harness, run, tmp_path) == []
        assert run.run_id in [r.run_id for r in await harness.runs(task="refunds")]


@pytest.mark.parametrize("argument", list(ANSWERS))
async def test_an_answer_with_text_no_store_can_hold_is_refused_before_it_is_sent(
    spec: Path, tmp_path: Path, argument: str
) -> None:
    call, shown = ANSWERS[argument]
    async with ph.load(spec) as harness:
        run = await waiting_run(harness)
        before = await seen(harness, run)
        with pytest.raises(StoreError) as caught:
            await call(harness, run, tmp_path)
        expected = f"{shown} is not valid UTF-8 text (a lone surrogate at character {at(shown)})"
        assert str(caught.value).startswith(expected), str(caught.value)
        assert await seen(harness, run) == before
        assert run.approval is not None
        done = await harness.approve(
            run.run_id, run.approval.approval_id, "approve", approver=FINANCE
        )
        assert done.status is ph.RunStatus.COMPLETED
        assert (await updates(harness, run.run_id)).count("approve") == 1


async def test_a_decision_other_than_approve_or_decline_is_refused_before_it_is_sent(
    spec: Path,
) -> None:
    async with ph.load(spec) as harness:
        run = await waiting_run(harness)
        assert run.approval is not None
        before = await seen(harness, run)
        with pytest.raises(ResolutionError, match="decision must be 'approve' or 'decline'"):
            await harness.approve(run.run_id, run.approval.approval_id, "maybe", approver=FINANCE)  # type: ignore[arg-type]
        with pytest.raises(StoreError, match="cannot resolve 'exk_1' of run"):
            await harness.resolve(run.run_id, "exk_1", result="no \udcff")
        assert await seen(harness, run) == before
