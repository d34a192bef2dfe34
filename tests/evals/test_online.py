"""When runs are graded: sampling by run id, after the run ends, in the background."""

from __future__ import annotations

import time

import pytest

import pytest_harness as ph
from pytest_harness.evals import sampled
from pytest_harness.models.scripted import ScriptedProvider
from pytest_harness.testing import call, fail, say
from tests.evals.conftest import EvalsApp

pytestmark = pytest.mark.asyncio

POLITE = "- {id: polite, check: regex, pattern: '(?i)thank'}"


async def graded_share(app: EvalsApp, share: float, runs: int) -> tuple[int, set[str]]:
    """Run `orders` `runs` times with `sample: share`; the graded run ids."""
    async with ph.load(app.write(POLITE, sample=share)) as harness:
        ids = [
            (await harness.run("orders", f"Where is order A-{n}?", principal="ann")).run_id
            for n in range(runs)
        ]
        await harness.flush_evals()
        graded = {s.run_id for s in await harness.samples(limit=None)}
    assert graded <= set(ids)
    assert graded == {run_id for run_id in ids if sampled(run_id, share)}
    return len(graded), graded


async def test_sample_0_grades_nothing(evals_app: EvalsApp) -> None:
    count, _ = await graded_share(evals_app, 0, 50)
    assert count == 0


async def test_sample_1_grades_every_run(evals_app: EvalsApp) -> None:
    count, _ = await graded_share(evals_app, 1, 50)
    assert count == 50


async def test_sample_half_grades_about_half_of_1000_runs(evals_app: EvalsApp) -> None:
    count, _ = await graded_share(evals_app, 0.5, 1000)
    # binomial(1000, 0.5): sd 15.8; 0.44..0.56 is beyond 3.7 sd either side
    assert 440 <= count <= 560, count


async def test_sampling_is_a_pure_function_of_the_run_id() -> None:
    ids = [f"run_{n:032x}" for n in range(2000)]
    assert [sampled(i, 0.3) for i in ids] == [sampled(i, 0.3) for i in ids]
    share = sum(sampled(i, 0.3) for i in ids) / len(ids)
    assert 0.26 <= share <= 0.34
    # a larger share keeps every run a smaller one samples
    assert all(sampled(i, 0.6) for i in ids if sampled(i, 0.3))
    assert not any(sampled(i, 0.0) for i in ids) and all(sampled(i, 1.0) for i in ids)


async def test_a_slow_grader_does_not_delay_the_run(evals_app: EvalsApp) -> None:
    path = evals_app.write("- {id: slow, check: callable, call: '{module}:slow'}")
    async with ph.load(path) as harness:
        started = time.monotonic()
        result = await harness.run("orders", "Where is order A-1?", principal="ann")
        took = time.monotonic() - started
        assert result.ok and took < 0.25
        assert await harness.samples() == []  # still grading
        await harness.flush_evals()
        (sample,) = await harness.samples()
    assert (sample.run_id, sample.passed) == (result.run_id, True)


async def test_a_grader_over_its_timeout_is_an_error(evals_app: EvalsApp) -> None:
    path = evals_app.write("- {id: slow, check: callable, call: '{module}:slow', timeout: 0.05}")
    async with ph.load(path) as harness:
        result = await harness.run("orders", "Where is order A-1?", principal="ann")
        await harness.flush_evals()
        (sample,) = await harness.samples()
    assert result.ok
    assert (sample.score, sample.passed) == (None, False)
    assert sample.error == "took longer than its timeout of 0.05s"


async def test_a_failing_grader_does_not_change_the_run(evals_app: EvalsApp) -> None:
    path = evals_app.write("- {id: broken, check: callable, call: '{module}:broken'}\n" + POLITE)
    async with ph.load(path) as harness:
        result = await harness.run("orders", "Where is order A-1?", principal="ann")
        await harness.flush_evals()
        stored = await harness.result(result.run_id)
        samples = {s.grader: s for s in await harness.samples()}
    assert result.ok and stored == result
    assert samples["broken"].error == "RuntimeError: the grader broke"
    assert samples["polite"].passed


@pytest.mark.parametrize("store", ["memory", "postgres"])
async def test_a_grader_message_with_a_nul_is_stored_with_it_escaped(
    evals_app: EvalsApp, store: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL text holds no NUL: the sample was lost there (logged), kept elsewhere."""
    state = "{use: memory}"
    if store == "postgres":
        monkeypatch.setenv("HARNESS_TEST_DSN", request.getfixturevalue("pg_dsn"))
        schema = request.getfixturevalue("pg_schema")
        state = f"{{use: postgres, dsn_env: HARNESS_TEST_DSN, schema: {schema}}}"
    grader = "- {id: nul, check: callable, call: '{module}:nul_broken'}"
    async with ph.load(evals_app.write(grader, state=state)) as harness:
        await harness.run("orders", "Where is order A-1?", principal="ann")
        await harness.flush_evals()
        (sample,) = await harness.samples()
    assert sample.error == "RuntimeError: the output has a NUL: \\x00"
    assert sample.score is None and not sample.passed


async def test_aclose_waits_for_pending_grades(evals_app: EvalsApp) -> None:
    path = evals_app.write(
        "- {id: slow, check: callable, call: '{module}:slow'}",
        state="{use: sqlite, path: state.db}",
    )
    harness = ph.load(path)
    result = await harness.run("orders", "Where is order A-1?", principal="ann")
    await harness.aclose()
    async with ph.load(path) as again:
        (sample,) = await again.samples()
    assert sample.run_id == result.run_id and sample.passed


def script(*turns: dict[str, object]) -> ScriptedProvider:
    return ScriptedProvider.from_turns(list(turns))


async def test_runs_are_graded_whatever_way_they_end(evals_app: EvalsApp) -> None:
    async with ph.load(evals_app.write(POLITE)) as harness:

        async def run(*turns: dict[str, object]) -> ph.RunResult:
            harness.plans.replace_provider("default", script(*turns))
            return await harness.run("orders", "Refund A-1", principal="ann")

        completed = await run(say("Thank you."))
        failed = await run(fail("refusal"))
        limited = await run(*[call("refund", order_id="A-1", amount=5)] * 4)
        cancelled_waiting = await run(call("refund", order_id="A-2", amount=500))
        waiting = await run(call("refund", order_id="A-1", amount=500), say("Thank you, done."))
        await harness.flush_evals()
        graded = {s.run_id for s in await harness.samples()}
        assert graded == {completed.run_id, failed.run_id, limited.run_id}  # not suspended runs

        assert waiting.approval is not None
        fiona = ph.Principal("fiona", roles=("finance",))
        done = await harness.approve(
            waiting.run_id, waiting.approval.approval_id, "approve", approver=fiona
        )
        cancelled = await harness.cancel(cancelled_waiting.run_id)
        await harness.flush_evals()
        samples = await harness.samples()
    assert [r.status.value for r in (completed, failed, limited, done, cancelled)] == [
        "completed",
        "failed",
        "limited",
        "completed",
        "cancelled",
    ]
    by_run = {s.run_id: s for s in samples}
    assert len(samples) == 5 and len(by_run) == 5  # each run graded once, when it ended
    assert by_run[done.run_id].passed and by_run[completed.run_id].passed
    assert not by_run[cancelled.run_id].passed  # no output: no thanks


async def test_replaying_a_run_does_not_grade_it_online(evals_app: EvalsApp) -> None:
    async with ph.load(evals_app.write(POLITE), record=True) as harness:
        result = await harness.run("orders", "Where is order A-1?", principal="ann")
        await harness.flush_evals()
        report = await harness.replay(result.run_id)
        await harness.flush_evals()
        samples = await harness.samples()
    assert report.same
    assert [s.run_id for s in samples] == [result.run_id]


async def test_samples_since_and_limit(evals_app: EvalsApp) -> None:
    from datetime import datetime, timedelta

    async with ph.load(evals_app.write(POLITE)) as harness:
        await harness.store.add_samples(
            [
                ph.Sample(
                    run_id="run_old",
                    task="orders",
                    grader="polite",
                    score=1.0,
                    passed=True,
                    created_at=time.time() - 7200,
                ),
                ph.Sample(
                    run_id="run_new",
                    task="orders",
                    grader="polite",
                    score=0.0,
                    passed=False,
                    created_at=time.time() - 60,
                ),
            ]
        )
        assert [s.run_id for s in await harness.samples()] == ["run_new", "run_old"]
        assert [s.run_id for s in await harness.samples(since=timedelta(hours=1))] == ["run_new"]
        hour_ago = datetime.now() - timedelta(hours=1)
        assert [s.run_id for s in await harness.samples(since=hour_ago)] == ["run_new"]
        assert len(await harness.samples(since=time.time() - 10_000)) == 2
        assert [s.run_id for s in await harness.samples(limit=1)] == ["run_new"]
        assert await harness.samples(task="other") == []
        with pytest.raises(TypeError, match="since must be"):
            await harness.samples(since="1h")  # type: ignore[arg-type]
