"""Graders in the replay gate (DESIGN §15): re-grade the recorded and the replayed outcome.

Each grader that calls nothing out (every check but a judge on a live model) is applied to the
recorded outcome and to the replayed one, with today's spec. One that passes on the recording
and fails on the replay is a changed `grader` decision: drift, which fails the gate like any
other changed decision. A live judge is not re-graded; the report names it, with the grade the
recording kept. Recordings keep grades (`Recording.grades`, a `grades:` list in golden files):
the replayed recording carries the replay's, so `--update-recordings` writes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pytest_harness.evals.online import Grade, Grader, OnlineEvals, grade_all
from pytest_harness.runtime.results import RunResult, RunStatus, Usage
from pytest_harness.runtime.trace import Decision

if TYPE_CHECKING:
    from pytest_harness.recording.model import Recording
    from pytest_harness.replay.report import DecisionChange
    from pytest_harness.runtime.harness import Harness

__all__ = ["Regrade", "recorded_result", "regrade", "with_grades"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Regrade:
    """What re-grading a replay found."""

    changes: tuple[DecisionChange, ...] = ()
    """A `grader` decision per grader that passed on the recording and fails on the replay."""
    not_regraded: tuple[str, ...] = ()
    """Live judges, each with the grade the recording kept (`judged (recorded: 0.8, passed)`)."""
    grades: tuple[Mapping[str, Any], ...] = ()
    """The replay's grades, for the replayed recording."""


def graders_of(harness: Harness) -> tuple[Grader, ...]:
    """The harness's online eval graders (none without `evals.online`)."""
    evals = harness.evals
    return evals.graders if isinstance(evals, OnlineEvals) else ()


def recorded_result(recording: Recording) -> RunResult:
    """The recorded outcome as a `RunResult`, for graders."""
    return RunResult(
        run_id=recording.run_id or "",
        session_id="",
        task=recording.task,
        status=RunStatus.parse(recording.status),
        output=recording.output,
        error=recording.error,
        usage=Usage.from_dict(recording.usage),
        trace=recording.trace,
        labels=dict(recording.labels),
        limit=recording.limit,
    )


async def regrade(harness: Harness, recording: Recording, replayed: RunResult) -> Regrade:
    """Grade the recorded and the replayed outcome with every grader that calls nothing out."""
    from pytest_harness.replay.report import DecisionChange, diff_fields

    graders = [g for g in graders_of(harness) if g.applies(recording.task)]
    if not graders:
        return Regrade()
    offline = [g for g in graders if not g.live]
    live = [g for g in graders if g.live]
    principal = dict(recording.principal)
    before = await grade_all(offline, recorded_result(recording), recording.input, principal)
    after = await grade_all(offline, replayed, recording.input, principal)
    step = max((d.step for d in replayed.trace), default=0)
    changes = []
    for old, new in zip(before, after, strict=True):
        if old.passed and not new.passed:
            expected = Decision(step, "grader", old.grader, _detail(old))
            actual = Decision(step, "grader", new.grader, _detail(new))
            changes.append(
                DecisionChange(
                    change="changed",
                    step=step,
                    kind="grader",
                    key=new.grader,
                    expected=expected,
                    actual=actual,
                    fields=diff_fields(expected.detail, actual.detail),
                )
            )
    kept = {str(g.get("grader")): g for g in recording.grades}
    missing = {g.id for g in live} - set(kept)
    if missing:  # a stored run replayed by id: its live judges' samples
        kept.update(await _stored_grades(harness, recording, missing))
    notes = []
    for grader in live:
        old_grade = kept.get(grader.id)
        if old_grade is None:
            notes.append(f"{grader.id} (a live judge; the recording kept no grade)")
        else:
            notes.append(f"{grader.id} (a live judge; recorded: {_shown(old_grade)})")
    grades = [g.to_dict() for g in after] + [kept[g.id] for g in live if g.id in kept]
    return Regrade(changes=tuple(changes), not_regraded=tuple(notes), grades=tuple(grades))


async def with_grades(harness: Harness, recording: Recording) -> Recording:
    """The recording with the grades it keeps.

    Those are today's offline graders on its outcome, and the stored sample of each live judge
    that graded the run.
    """
    graders = [g for g in graders_of(harness) if g.applies(recording.task)]
    if not graders:
        return recording
    offline = [g for g in graders if not g.live]
    grades: list[Mapping[str, Any]] = [
        g.to_dict()
        for g in await grade_all(
            offline, recorded_result(recording), recording.input, dict(recording.principal)
        )
    ]
    live = {g.id for g in graders if g.live}
    stored = await _stored_grades(harness, recording, live)
    grades += [stored[g.id] for g in graders if g.id in stored]
    return replace(recording, grades=tuple(grades))


async def _stored_grades(
    harness: Harness, recording: Recording, graders: set[str]
) -> dict[str, Mapping[str, Any]]:
    """The stored samples of `graders` for the recorded run, by grader, errors left out.

    A judge that could not grade (blocked as live under pytest, say) says nothing about the run.
    """
    if not graders or not recording.run_id:
        return {}
    found: dict[str, Mapping[str, Any]] = {}
    for sample in await harness.samples(task=recording.task, limit=None):
        if sample.run_id == recording.run_id and sample.grader in graders and not sample.error:
            grade = Grade(
                grader=sample.grader,
                score=sample.score,
                passed=sample.passed,
                detail=sample.detail,
            )
            found[sample.grader] = grade.to_dict()
    return found


def _detail(grade: Grade) -> dict[str, Any]:
    detail: dict[str, Any] = {"passed": grade.passed, "score": grade.score}
    if grade.detail:
        detail["detail"] = grade.detail
    if grade.error:
        detail["error"] = grade.error
    return detail


def _shown(grade: Mapping[str, Any]) -> str:
    if grade.get("error"):
        return f"error {grade['error']}"
    verdict = "passed" if grade.get("passed") else "failed"
    return f"{grade.get('score')}, {verdict}"
