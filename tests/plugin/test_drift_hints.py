"""The command a drifted replay suggests repeats the options that made the replay what it was.

`accept this drift with: pytest --update-recordings FILE` run without the session's
`--replay-tools`, `--harness-spec` or `--harness-env` replays another way and may find nothing
to accept; the hint carries them (shell-quoted), and only when they are not at their defaults.
"""

from __future__ import annotations

import shlex

from .conftest import Project

HINT = "accept this drift with: "
STRICTER = ("args.amount > 100", "args.amount > 20")
ENVIRONMENT = """
environments:
  stricter:
    rules:
      - id: R1
        when: tool == "refund" && args.amount > 20
        then: approve
        approvers: [finance]
"""


def recorded(project: Project) -> None:
    project.tests()
    project.run("--record-recordings=all").assert_outcomes(passed=4)


def hint_of(result) -> str:
    lines = [line for line in result.stdout.lines if line.startswith(HINT)]
    assert len(lines) == 1, result.stdout.str()
    return lines[0].removeprefix(HINT)


def accept(project: Project, command: str) -> None:
    """Run the suggested command (after its `pytest`): it rewrites the drifted file."""
    argv = shlex.split(command)
    assert argv[0] == "pytest"
    result = project.run(*argv[1:])
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["1 recording replayed: 0 same, 0 drifted, *, 1 updated"])


def test_a_drift_found_by_running_the_safe_tools_is_accepted_with_them(project: Project) -> None:
    recorded(project)
    tools = project.path / f"{project.module}.py"
    text = tools.read_text(encoding="utf-8")
    tools.write_text(text.replace('"total": 250.0', '"total": 99.0'), encoding="utf-8")
    assert project.run("--replay-recordings").ret == 0  # no tool runs: nothing changed

    result = project.run("--replay-recordings", "--replay-tools=safe", "-k", "small")
    result.assert_outcomes(failed=1)
    command = hint_of(result)
    assert command == (
        "pytest --update-recordings --replay-tools=safe recordings/test_desk/test_small_refund.yaml"
    )
    accept(project, command)
    result = project.run("--replay-recordings", "--replay-tools=safe", "-k", "small")
    result.assert_outcomes(passed=1)


def test_the_spec_and_environment_of_the_replay_are_in_the_hint_quoted(project: Project) -> None:
    recorded(project)
    text = project.spec.read_text(encoding="utf-8")
    (project.path / "strict spec.yaml").write_text(text + ENVIRONMENT, encoding="utf-8")
    options = ("--harness-spec", "strict spec.yaml", "--harness-env", "stricter")

    result = project.run("--replay-recordings", *options, "-k", "small")
    result.assert_outcomes(failed=1)
    command = hint_of(result)
    assert command == (
        "pytest --update-recordings '--harness-spec=strict spec.yaml' --harness-env=stricter "
        "recordings/test_desk/test_small_refund.yaml"
    )
    accept(project, command)
    result = project.run("--replay-recordings", *options, "-k", "small")
    result.assert_outcomes(passed=1)


def test_options_at_their_defaults_are_left_out(project: Project) -> None:
    recorded(project)
    project.change_spec(*STRICTER)
    result = project.run(
        "--replay-recordings", "--harness-spec=harness.yaml", "--harness-env=offline", "-k", "small"
    )
    result.assert_outcomes(failed=1)
    assert hint_of(result) == (
        "pytest --update-recordings recordings/test_desk/test_small_refund.yaml"
    )
