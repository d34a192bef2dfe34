"""Each grader check on real runs, graded after the run ends, stored as samples."""

from __future__ import annotations

import pytest

import pytest_harness as ph
from tests.evals.conftest import EvalsApp

pytestmark = pytest.mark.asyncio


async def grades(app: EvalsApp, graders: str, **options: object) -> dict[str, ph.Sample]:
    """Run `orders` once with these graders and return its samples by grader."""
    async with ph.load(app.write(graders, **options)) as harness:
        result = await harness.run("orders", "Where is order A-1?", principal="ann")
        await harness.flush_evals()
        samples = await harness.samples()
    assert {s.run_id for s in samples} == {result.run_id}
    assert all(s.task == "orders" and s.created_at > 0 for s in samples)
    return {s.grader: s for s in samples}


def verdict(sample: ph.Sample) -> tuple[float | None, bool, str | None]:
    return (sample.score, sample.passed, sample.error)


async def test_regex(evals_app: EvalsApp) -> None:
    got = await grades(
        evals_app,
        """
        - {id: polite, check: regex, pattern: '(?i)thank'}
        - {id: rude, check: regex, pattern: 'go away'}
        """,
    )
    assert verdict(got["polite"]) == (1.0, True, None)
    assert got["polite"].detail == "matched '(?i)thank'"
    assert verdict(got["rude"]) == (0.0, False, None)
    assert got["rude"].detail == "no match for 'go away'"


async def test_contains(evals_app: EvalsApp) -> None:
    got = await grades(
        evals_app,
        """
        - {id: order, check: contains, text: [A-9, A-1]}
        - {id: case, check: contains, text: THANK YOU, ignore_case: true}
        - {id: missing, check: contains, text: refund}
        """,
    )
    assert verdict(got["order"]) == (1.0, True, None)
    assert verdict(got["case"]) == (1.0, True, None)
    assert verdict(got["missing"]) == (0.0, False, None)


async def test_max_length(evals_app: EvalsApp) -> None:
    got = await grades(
        evals_app,
        """
        - {id: short, check: max_length, max: 10}
        - {id: roomy, check: max_length, max: 500}
        """,
    )
    assert verdict(got["short"]) == (0.0, False, None)
    assert got["short"].detail == "35 characters, more than 10"
    assert verdict(got["roomy"]) == (1.0, True, None)


async def test_json_schema(evals_app: EvalsApp) -> None:
    schema = "{type: object, required: [status], properties: {status: {type: string}}}"
    graders = f"""
        - {{id: shaped, check: json_schema, schema: {schema}}}
    """
    good = await grades(evals_app, graders, answer='{"status": "delivered"}')
    assert verdict(good["shaped"]) == (1.0, True, None)
    wrong = await grades(evals_app, graders, answer='{"status": 3}')
    assert verdict(wrong["shaped"]) == (0.0, False, None)
    assert "status: 3 is not of type 'string'" in str(wrong["shaped"].detail)
    prose = await grades(evals_app, graders)
    assert verdict(prose["shaped"]) == (0.0, False, None)
    assert str(prose["shaped"].detail).startswith("not JSON")


async def test_cel(evals_app: EvalsApp) -> None:
    got = await grades(
        evals_app,
        """
        - {id: mentions, check: cel, when: 'text.contains("A-1") && task == "orders"'}
        - {id: long, check: cel, when: 'text.size() > 1000'}
        - {id: broken, check: cel, when: 'labels.missing == "x"'}
        """,
    )
    assert verdict(got["mentions"]) == (1.0, True, None)
    assert verdict(got["long"]) == (0.0, False, None)
    score, passed, error = verdict(got["broken"])
    assert (score, passed) == (None, False)
    assert error is not None and "missing" in error


async def test_on_trace_grades_the_rendered_trace(evals_app: EvalsApp) -> None:
    got = await grades(
        evals_app,
        """
        - {id: said, on: trace, check: contains, text: "model default → say"}
        - {id: output-only, check: contains, text: "model default"}
        """,
    )
    assert verdict(got["said"]) == (1.0, True, None)
    assert verdict(got["output-only"]) == (0.0, False, None)


async def test_callable(evals_app: EvalsApp) -> None:
    got = await grades(
        evals_app,
        """
        - {id: shouting, check: callable, call: "{module}:shouting"}
        - {id: half, check: callable, call: "{module}:half", pass_at: 0.5}
        - {id: half-strict, check: callable, call: "{module}:half", pass_at: 0.6}
        - {id: async, check: callable, call: "{module}:async_ok"}
        - {id: too-big, check: callable, call: "{module}:too_big"}
        - {id: wrong-type, check: callable, call: "{module}:wrong_type"}
        - {id: broken, check: callable, call: "{module}:broken"}
        """,
    )
    assert verdict(got["shouting"]) == (0.0, False, None)
    assert len(evals_app.graders.SEEN) == 1  # called with the RunResult
    assert verdict(got["half"]) == (0.5, True, None)
    assert verdict(got["half-strict"]) == (0.5, False, None)
    assert verdict(got["async"]) == (1.0, True, None)
    assert verdict(got["too-big"]) == (None, False, "score 7 is outside 0..1")
    _, _, error = verdict(got["wrong-type"])
    assert error is not None and "returned str 'yes'" in error
    assert verdict(got["broken"]) == (None, False, "RuntimeError: the grader broke")


async def test_a_grader_for_other_tasks_does_not_grade(evals_app: EvalsApp) -> None:
    got = await grades(
        evals_app,
        """
        - {id: mine, check: regex, pattern: Thank, tasks: [orders]}
        - {id: theirs, check: regex, pattern: Thank, tasks: [other]}
        """,
    )
    assert set(got) == {"mine"}
