"""The `model` grader: an LLM judge, a model of `models:` asked to score a run.

The judge gets the grader's `prompt` as its system prompt and one user message with the task,
the run's input and the text graded (its output, or its trace). Its score is the first number
in its answer: `0.8`, `Score: 0.8`, `80%` or `8/10`. An answer without a number, or with one
outside 0..1, is a `GraderError` (the sample records it; nothing crashes).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pytest_harness.evals.checks import GradeInput, GraderCheck, GraderError, Verdict
from pytest_harness.models.base import ModelRequest
from pytest_harness.models.live import check_live
from pytest_harness.spec.schema import GraderSpec

if TYPE_CHECKING:
    from pytest_harness.models.base import ModelProvider
    from pytest_harness.runtime.plan import Plans

__all__ = ["build_judge", "judge_message", "parse_score"]

_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>-)?(?P<value>\d+(?:\.\d+)?|\.\d+)(?:\s*(?P<percent>%)|\s*/\s*(?P<scale>\d+(?:\.\d+)?))?"
)


def parse_score(answer: str | None) -> float:
    """The score 0..1 in a judge's answer; `GraderError` when it holds none."""
    text = (answer or "").strip()
    match = _NUMBER.search(text)
    if match is None:
        shown = text if len(text) <= 80 else text[:77] + "..."
        raise GraderError(f"the judge's answer holds no number: {shown!r}")
    value = float(match.group("value"))
    if match.group("percent"):
        value /= 100
    elif match.group("scale"):
        scale = float(match.group("scale"))
        if scale == 0:
            raise GraderError(f"the judge answered a score out of zero: {match.group(0)!r}")
        value /= scale
    if match.group("sign") or not 0.0 <= value <= 1.0:
        raise GraderError(
            f"the judge's score {match.group(0)!r} is outside 0..1; ask it for a number from 0 to 1"
        )
    return value


def judge_message(grader: GraderSpec, subject: GradeInput) -> str:
    """The user message the judge scores."""
    what = "Output" if grader.on.value == "output" else "Trace"
    return (
        f"Task: {subject.result.task}\n"
        f"Status: {subject.result.status.value}\n"
        f"Input:\n{subject.input}\n\n"
        f"{what}:\n{subject.text or '(none)'}"
    )


def build_judge(grader: GraderSpec, plans: Plans) -> tuple[GraderCheck, ModelProvider]:
    """The judge's check, and its provider (to tell whether it calls out)."""
    name = str(grader.model)

    async def grade(subject: GradeInput) -> Verdict:
        provider = plans.provider(name)  # looked up each time: tests may script it anew
        check_live(provider, name)
        request = ModelRequest(
            task=subject.result.task,
            model=name,
            system=str(grader.prompt),
            messages=({"role": "user", "content": judge_message(grader, subject)},),
            tools=(),
            run_id=subject.result.run_id,
            turn=0,
            input=subject.input,
        )
        response = await provider.complete(request)
        answer = (response.text or "").strip()
        score = parse_score(answer)
        shown = answer if len(answer) <= 200 else answer[:197] + "..."
        return Verdict(score, f"judge {name}: {shown}")

    return grade, plans.provider(name)
