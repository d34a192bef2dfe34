"""The `model` grader: a scripted judge's answers, and how its score is read."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pytest_harness as ph
from pytest_harness.evals.checks import GraderError
from pytest_harness.evals.judge import parse_score
from pytest_harness.models.base import ModelRequest
from pytest_harness.models.function import FunctionProvider
from tests.evals.conftest import EvalsApp

JUDGED = "- {id: judged, check: model, model: judge, prompt: Score it 0 to 1., pass_at: 0.7}"


async def judged(app: EvalsApp, answer: str) -> ph.Sample:
    async with ph.load(app.write(JUDGED, judge=answer)) as harness:
        result = await harness.run("orders", "Where is order A-1?", principal="ann")
        assert result.ok
        await harness.flush_evals()
        (sample,) = await harness.samples(grader="judged")
    return sample


@pytest.mark.asyncio
async def test_a_judge_answering_a_number(evals_app: EvalsApp) -> None:
    sample = await judged(evals_app, "0.8")
    assert (sample.score, sample.passed, sample.error) == (0.8, True, None)
    assert sample.detail == "judge judge: 0.8"


@pytest.mark.asyncio
async def test_a_judge_answering_text_with_a_number(evals_app: EvalsApp) -> None:
    sample = await judged(evals_app, "The desk answered, but curtly. Score: 0.6")
    assert (sample.score, sample.passed, sample.error) == (0.6, False, None)


@pytest.mark.asyncio
async def test_a_judge_answering_garbage_is_an_error_not_a_crash(evals_app: EvalsApp) -> None:
    sample = await judged(evals_app, "What a lovely answer!")
    assert (sample.score, sample.passed) == (None, False)
    assert sample.error == "the judge's answer holds no number: 'What a lovely answer!'"


@pytest.mark.asyncio
async def test_the_judge_sees_the_prompt_input_and_output(evals_app: EvalsApp) -> None:
    seen: list[ModelRequest] = []

    def judge(request: ModelRequest) -> str:
        seen.append(request)
        return "9/10"

    async with ph.load(evals_app.write(JUDGED)) as harness:
        harness.plans.replace_provider("judge", FunctionProvider(judge))
        result = await harness.run("orders", "Where is order A-1?", principal="ann")
        await harness.flush_evals()
        (sample,) = await harness.samples()
    assert (sample.score, sample.passed) == (0.9, True)
    (request,) = seen
    assert request.system == "Score it 0 to 1."
    assert request.tools == () and request.run_id == result.run_id
    content = request.messages[0]["content"]
    assert content == (
        "Task: orders\nStatus: completed\nInput:\nWhere is order A-1?\n\n"
        "Output:\nThank you! Order A-1 was delivered."
    )


@pytest.mark.asyncio
async def test_a_live_judge_where_live_calls_are_blocked_is_an_error(evals_app: EvalsApp) -> None:
    path = evals_app.write(JUDGED)
    text = path.read_text().replace(
        "  judge:\n    use: scripted", "  judge:\n    use: openai\n    model: gpt-4.1-mini\n    x:"
    )
    text = text.replace("    x:\n    script: [{say: '0.8'}]\n", "")
    path.write_text(text)
    with ph.allow_live_models(False):
        async with ph.load(path) as harness:
            result = await harness.run("orders", "Where is order A-1?", principal="ann")
            await harness.flush_evals()
            (sample,) = await harness.samples()
    assert result.ok
    assert sample.score is None and sample.error is not None
    assert "live" in sample.error.lower()


@pytest.mark.parametrize(
    ("answer", "score"),
    [
        ("0.8", 0.8),
        ("1", 1.0),
        ("0", 0.0),
        (".5", 0.5),
        ("Score: 0.75.", 0.75),
        ("I'd say 80%", 0.8),
        ("8/10 - good", 0.8),
        ("8 / 10", 0.8),
        ("**0.9**", 0.9),
    ],
)
def test_parse_score(answer: str, score: float) -> None:
    assert parse_score(answer) == pytest.approx(score)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ("", "holds no number"),
        (None, "holds no number"),
        ("excellent", "holds no number"),
        ("7", "outside 0..1"),
        ("-0.5", "outside 0..1"),
        ("150%", "outside 0..1"),
        ("3/0", "out of zero"),
    ],
)
def test_parse_score_refuses(answer: str | None, message: str) -> None:
    with pytest.raises(GraderError, match=message):
        parse_score(answer)


@settings(max_examples=300, deadline=None)
@given(st.text() | st.from_regex(r"[^0-9]{0,10}-?\d{1,4}(\.\d{1,4})?\s*(%|/\s*\d{1,3})?.{0,10}"))
def test_any_judge_answer_is_a_score_or_a_grader_error(answer: str) -> None:
    """A judge's answer is untrusted text: a score 0..1 or a `GraderError`, nothing else."""
    try:
        score = parse_score(answer)
    except GraderError as exc:
        assert str(exc)
    else:
        assert 0.0 <= score <= 1.0
