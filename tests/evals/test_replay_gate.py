"""Graders in the replay gate: re-graded on the recorded and the replayed outcome."""

from __future__ import annotations

from dataclasses import replace

import pytest

import pytest_harness as ph
from pytest_harness.recording.model import Recording
from tests.plugin.conftest import SPEC, Project

GRADERS = """
  judge:
    use: scripted
    script: [{{say: "0.9"}}]
evals:
  online:
    graders:
      - id: no-card-numbers
        check: cel
        when: '!text.matches("[0-9]{{16}}")'
      - id: judged
        check: model
        model: judge
        prompt: Score 0 to 1.
        pass_at: 0.7
"""


def drop_guard(project: Project) -> None:
    lines = project.spec.read_text(encoding="utf-8").splitlines(keepends=True)
    harmless = "  - {id: G1, on: input, check: contains, text: never-asked, action: warn}\n"
    kept = [harmless if "id: G1" in line else line for line in lines]
    assert kept != lines
    project.spec.write_text("".join(kept), encoding="utf-8")


@pytest.fixture
def project(pytester: pytest.Pytester) -> Project:
    made = Project(pytester)
    text = SPEC.replace("tools:\n", GRADERS.split("evals:")[0] + "tools:\n", 1)
    text = text.replace("\nmodels:\n  default:", "\nmodels:\n  default:")
    made.write_spec(text + "evals:" + GRADERS.split("evals:")[1])
    return made


def test_a_grader_drift_fails_replay_recordings(project: Project) -> None:
    project.tests()
    project.run("--record-recordings=all").assert_outcomes(passed=4)
    golden = (project.recordings / "test_desk" / "test_redacted.yaml").read_text()
    assert "grades:\n- grader: no-card-numbers\n  score: 1.0\n  passed: true\n" in golden
    assert "- grader: judged\n  score: 0.9\n  passed: true\n" in golden
    project.run("--replay-recordings").assert_outcomes(passed=4)

    # without the redacting guard, the card number reaches the output: the grader fails now
    drop_guard(project)
    result = project.run("--replay-recordings")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*changed: recording recordings/test_desk/test_redacted.yaml (orders)*",
            "  decisions:",
            "*~ step 1 grader no-card-numbers (*passed: True → False; score: 1.0 → 0.0)",
        ]
    )

    # --update-recordings accepts it, and the file keeps the replay's grades
    project.run("--replay-recordings", "--update-recordings").assert_outcomes(passed=4)
    updated = (project.recordings / "test_desk" / "test_redacted.yaml").read_text()
    assert "- grader: no-card-numbers\n  score: 0.0\n  passed: false\n" in updated
    project.run("--replay-recordings").assert_outcomes(passed=4)


@pytest.mark.asyncio
async def test_a_grader_that_now_passes_is_no_drift_and_a_live_judge_is_not_regraded(
    project: Project,
) -> None:
    project.change_spec(
        '    script: [{say: "0.9"}]',
        "    model: gpt-4.1-mini\n    api_key_env: NO_SUCH_KEY_FOR_TESTS",
    )
    project.change_spec("  judge:\n    use: scripted", "  judge:\n    use: openai")
    with ph.allow_live_models(False):  # the live judge's online grade is an error, offline
        async with ph.load(project.spec, record=True) as harness:
            result = await harness.run("orders", "Card please", principal="ann")
            recording = await Recording.from_store(harness.store, result.run_id)
            # as if recorded before the guard existed, and graded by the live judge back then
            recording = replace(
                recording,
                output="Your card is 4111111111111111.",
                grades=({"grader": "judged", "score": 0.8, "passed": True},),
            )
            report = await harness.replay(recording)
            await harness.flush_evals()
            (online,) = await harness.samples(grader="judged")
    assert online.error is not None and "live" in online.error.lower()
    assert not any(c.kind == "grader" for c in report.decisions)  # failed → passes: no drift
    assert report.not_regraded == ("judged (a live judge; recorded: 0.8, passed)",)
    assert "  not re-graded: judged (a live judge; recorded: 0.8, passed)" in report.render()
    assert report.to_dict()["not_regraded"] == list(report.not_regraded)
    kept = {g["grader"]: g for g in report.replayed.grades}
    assert kept["judged"]["score"] == 0.8 and kept["no-card-numbers"]["passed"] is True


@pytest.mark.asyncio
async def test_a_stored_run_keeps_its_live_judge_sample(project: Project) -> None:
    project.change_spec(
        '    script: [{say: "0.9"}]',
        "    model: gpt-4.1-mini\n    api_key_env: NO_SUCH_KEY_FOR_TESTS",
    )
    project.change_spec("  judge:\n    use: scripted", "  judge:\n    use: openai")
    project.change_spec("  online:\n", "  online:\n    sample: 0\n")
    with ph.allow_live_models(False):
        async with ph.load(project.spec, record=True) as harness:
            result = await harness.run("orders", "Card please", principal="ann")
            await harness.flush_evals()
            assert await harness.samples() == []  # sample: 0
            before = await harness.replay(result.run_id)
            judged = ph.Sample(
                run_id=result.run_id,
                task="orders",
                grader="judged",
                score=0.6,
                passed=False,
                detail="judge judge: 0.6",
                created_at=1.0,
            )
            await harness.store.add_samples([judged])
            after = await harness.replay(result.run_id)
            path = await harness.export(result.run_id, project.path / "run.yaml")
    assert before.not_regraded == ("judged (a live judge; the recording kept no grade)",)
    assert after.not_regraded == ("judged (a live judge; recorded: 0.6, failed)",)
    grades = {g["grader"]: g for g in Recording.load(path).grades}
    assert grades["judged"]["score"] == 0.6 and grades["no-card-numbers"]["passed"] is True
