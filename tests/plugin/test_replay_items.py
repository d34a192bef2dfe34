"""`--replay-recordings`: record, replay, drift, accept the drift; with and without xdist."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from .conftest import Project

ANSI = re.compile(r"\x1b\[[0-9;]*m")
FILES = [
    "test_desk/test_big_refund.yaml",
    "test_desk/test_denied.yaml",
    "test_desk/test_redacted.yaml",
    "test_desk/test_small_refund.yaml",
]
STRICTER = ("args.amount > 100", "args.amount > 20")


def recorded(project: Project, workers: int = 0) -> dict[str, str]:
    project.tests()
    result = project.run("--record-recordings=all", workers=workers)
    result.assert_outcomes(passed=4)
    return project.goldens()


def test_record_replay_drift_update_cycle(project: Project, workers: int) -> None:
    # 1. record: every run the tests made is a golden file, named by its test
    goldens = recorded(project, workers)
    assert sorted(goldens) == FILES
    result = project.run("--record-recordings=all", workers=workers)
    result.stdout.fnmatch_lines(["*harness recordings*", "*0 written, 4 unchanged*"])
    assert project.goldens() == goldens  # byte-identical when nothing changed

    # 2. replay on the unchanged spec passes
    result = project.run("--replay-recordings", workers=workers)
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*harness replay*", "4 recordings replayed: 4 same, 0 drifted*"])

    # 3. a stricter rule: the small refund now waits for an approval
    project.change_spec(*STRICTER)
    result = project.run("--replay-recordings", workers=workers)
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*changed: recording recordings/test_desk/test_small_refund.yaml (orders) ended "
            "completed; the replay ended awaiting_approval",
            "  status: completed → awaiting_approval",
            "  decisions:",
            "    + step 2 rule R1 → approve (tool refund)",
            "    - step 2 tool refund → ok",
            "*accept this drift with: pytest --update-recordings recordings/test_desk/"
            "test_small_refund.yaml",
            "*4 recordings replayed: 3 same, 1 drifted, 0 diverged, 0 errors",
            "drifted:",
            "  recordings/test_desk/test_small_refund.yaml: status completed → "
            "awaiting_approval; output and decisions changed",
        ]
    )
    assert project.goldens() == goldens  # a plain replay never writes

    # 4. accept the drift
    result = project.run("--replay-recordings", "--update-recordings", workers=workers)
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "*3 same, 0 drifted, 0 diverged, 0 errors, 1 updated",
            "updated from the replay*",
            "  recordings/test_desk/test_small_refund.yaml: status completed → awaiting_approval*",
        ]
    )
    now = project.goldens()
    changed = [name for name in FILES if now[name] != goldens[name]]
    assert changed == ["test_desk/test_small_refund.yaml"]
    assert "status: awaiting_approval" in now["test_desk/test_small_refund.yaml"]

    # 5. and the replay passes again
    project.run("--replay-recordings", workers=workers).assert_outcomes(passed=4)


def test_junit_holds_the_plain_report(project: Project, workers: int) -> None:
    recorded(project)
    project.change_spec(*STRICTER)
    junit = project.path / "junit.xml"
    result = project.run(
        "--replay-recordings", "--color=yes", f"--junitxml={junit}", workers=workers
    )
    result.assert_outcomes(passed=3, failed=1)
    assert ANSI.search(result.stdout.str())  # the terminal got colour ...
    text = junit.read_text(encoding="utf-8")
    assert "\x1b" not in text and "#x1B" not in text  # ... junit did not
    cases = {c.get("name"): c for c in ET.fromstring(text).iter("testcase")}
    assert set(cases) == {f.split("/")[1].removesuffix(".yaml") for f in FILES}
    failure = cases["test_small_refund"].find("failure")
    assert failure is not None
    assert failure.get("message", "").startswith("changed: recording recordings/test_desk/")
    body = failure.text or ""
    assert "  status: completed → awaiting_approval\n" in body
    assert "    + step 2 rule R1 → approve (tool refund)\n" in body
    assert "harness_replay" not in text  # the plugin's data stays out of junit


def test_terminal_report_is_coloured_with_a_decision_table(project: Project, workers: int) -> None:
    recorded(project)
    project.change_spec(*STRICTER)
    result = project.run("--replay-recordings", "--color=yes", "-k", "small", workers=workers)
    lines = [ANSI.sub("", line) for line in result.outlines]
    header = next(line for line in lines if "recorded" in line and "replayed" in line)
    assert header.split() == ["step", "kind", "key", "recorded", "replayed"]
    row = next(line for line in lines if "big-refund" not in line and " R1 " in line)
    assert row.split()[:5] == ["+", "2", "rule", "R1", "—"]
    assert "\x1b[32m    - Refunded $30." not in result.stdout.str()
    assert any("\x1b[31m" in line and "- Refunded $30." in line for line in result.outlines)


def test_replay_report_json_merges_every_item(project: Project, workers: int) -> None:
    recorded(project)
    project.change_spec(*STRICTER)
    (project.recordings / "test_desk" / "broken.yaml").write_text("format: nope\n")
    report = project.path / "out" / "replay.json"
    result = project.run("--replay-recordings", f"--replay-report={report}", workers=workers)
    result.assert_outcomes(passed=3, failed=1, errors=1)
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["format"] == "pytest-harness/replay-report@1"
    assert data["fail_on"] == ["decisions", "output", "status"]
    assert data["summary"] == {
        "total": 5,
        "same": 3,
        "drifted": 1,
        "diverged": 0,
        "error": 1,
        "updated": 0,
    }
    by_file = {entry["file"]: entry for entry in data["recordings"]}
    drifted = by_file["recordings/test_desk/test_small_refund.yaml"]
    assert drifted["outcome"] == "drifted"
    assert drifted["report"]["status"] == {"recorded": "completed", "replayed": "awaiting_approval"}
    assert by_file["recordings/test_desk/test_denied.yaml"]["report"]["same"] is True
    broken = by_file["recordings/test_desk/broken.yaml"]
    assert broken["outcome"] == "error" and "format must be" in broken["error"]


def test_a_corrupt_recording_is_an_error_naming_the_file(project: Project) -> None:
    recorded(project)
    folder = project.recordings / "test_desk"
    (folder / "corrupt.yaml").write_text("format: pytest-harness/recording@1\ntask: [oops\n")
    (folder / "incident.hx").write_bytes(b"PK\x03\x04")
    result = project.run("--replay-recordings")
    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of replay recordings/test_desk/corrupt.yaml*",
            "cannot replay recordings/test_desk/corrupt.yaml: bad recording file "
            "recordings/test_desk/corrupt.yaml:3: invalid YAML*",
            "*ERROR at setup of replay recordings/test_desk/incident.hx*",
            "cannot replay recordings/test_desk/incident.hx: recordings/test_desk/incident.hx: "
            "not a valid .hx archive: bad_zip: not a readable ZIP archive*",
            "*6 recordings replayed: 4 same, 0 drifted, 0 diverged, 2 errors",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    assert "During handling" not in result.stdout.str()


def test_a_spec_or_script_kept_among_the_recordings_is_skipped_not_an_error(
    project: Project,
) -> None:
    recorded(project)
    folder = project.recordings / "test_desk"
    (folder / "harness.yaml").write_text(project.spec.read_text(encoding="utf-8"))
    (folder / "turns.yaml").write_text("- say: hi\n- call: refund\n  args: {amount: 5}\n")
    result = project.run("--replay-recordings", "-rs")
    result.assert_outcomes(passed=4, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED * recordings/test_desk/harness.yaml: a harness spec, not a recording",
            "SKIPPED * recordings/test_desk/turns.yaml: a model script, not a recording",
        ]
    )
    # named on the command line, it is replayed as the recording it was said to be
    result = project.run("--replay-recordings", "recordings/test_desk/turns.yaml")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["cannot replay recordings/test_desk/turns.yaml: *"])


def test_the_drift_hint_quotes_a_parametrized_file_name_for_the_shell(project: Project) -> None:
    recorded(project)
    folder = project.recordings / "test_desk"
    (folder / "test_small_refund.yaml").rename(folder / "test_small_refund[A-1].yaml")
    project.change_spec(*STRICTER)
    result = project.run("--replay-recordings", "-k", "small")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["accept this drift with: pytest --update-recordings "
         "'recordings/test_desk/test_small_refund[[]A-1[]].yaml'"]
    )  # fmt: skip


def test_an_unknown_task_or_a_broken_spec_is_an_error_per_item(project: Project) -> None:
    recorded(project)
    project.change_spec("  orders:\n", "  desk:\n")
    result = project.run("--replay-recordings")
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines(
        ["cannot replay recordings/test_desk/test_big_refund.yaml: unknown task 'orders'*"]
    )
    project.change_spec("then: deny", "then: maybe")
    result = project.run("--replay-recordings")
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines(
        ["cannot replay recordings/test_desk/test_denied.yaml: *harness.yaml*"]
    )


def test_k_x_and_lf_select_items_by_file(project: Project) -> None:
    recorded(project)
    result = project.run("--replay-recordings", "-k", "refund and not big", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_small_refund.yaml::test_small_refund PASSED*"])
    project.change_spec(*STRICTER)
    project.change_spec("pattern: '\\b\\d{16}\\b'", "pattern: 'Refunded'")
    result = project.run("--replay-recordings", "-x")
    result.assert_outcomes(failed=1)  # test_big_refund.yaml comes first, and stops the run
    result = project.run("--replay-recordings")
    result.assert_outcomes(passed=1, failed=3)
    result = project.run("--replay-recordings", "--lf")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["*run-last-failure: rerun previous 3 failures*"])


def test_with_no_path_the_ini_folder_is_replayed(project: Project) -> None:
    recorded(project)
    project.pytester.makepyfile(test_other="def test_not_collected(): assert False")
    project.run("--replay-recordings").assert_outcomes(passed=4)
    project.run("--replay-recordings", "recordings/test_desk/test_denied.yaml").assert_outcomes(
        passed=1
    )


def test_a_missing_recordings_folder_is_a_usage_error(project: Project) -> None:
    result = project.run("--replay-recordings")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--replay-recordings: no recordings folder recordings*"])


def test_fail_on_requests_fails_after_a_prompt_change(project: Project) -> None:
    recorded(project)
    project.change_spec("You are the order desk.", "You are a careful order desk.")
    result = project.run("--replay-recordings", "-k", "small")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "1 recording replayed: 1 same, 0 drifted, 0 diverged, 0 errors",
            "model requests changed in 1 of 1 replayed (not failing: add requests to "
            "--replay-fail-on to fail on it):",
            "  recordings/test_desk/test_small_refund.yaml: 3 of 3 (system prompt: 1 line changed)",
        ]
    )
    result = project.run("--replay-recordings", "--replay-fail-on=requests", "-k", "small")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*changed: recording*",  # headed as what fails it, not `same`
            "  model requests changed: 3 of 3 (system prompt: 1 line changed)",
            "  system prompt:",
            "    -You are the order desk.",
            "    +You are a careful order desk.",
        ]
    )
    result = project.run("--update-recordings", "-k", "small")  # implies --replay-recordings
    result.assert_outcomes(passed=1)
    result = project.run("--replay-recordings", "--replay-fail-on=requests", "-k", "small")
    result.assert_outcomes(passed=1)


def test_a_diverged_replay_shows_expected_and_actual(project: Project) -> None:
    recorded(project)
    project.change_spec("    then: deny\n", "    then: allow\n")
    result = project.run("--replay-recordings", "--update-recordings", "-k", "denied")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*diverged: recording recordings/test_desk/test_denied.yaml (orders) ended completed;"
            " the replay stopped: tool call delete_account was never recorded at all",
            "  actual:   {name: 'delete_account', args: {user: 'ann'}}",
            "a diverged replay has no complete outcome to accept (not updated)*",
            "*0 same, 0 drifted, 1 diverged, 0 errors",
        ]
    )


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            "--replay-fail-on=status,colour",
            "*--replay-fail-on: unknown kind 'colour'; choose from status, output, decisions, "
            "requests*",
        ),
        (
            "--record-recordings=some",
            "*--record-recordings: invalid choice 'some' (choose from none, new, all; no value "
            "means new)*",
        ),
    ],
)
def test_bad_option_values_list_the_valid_ones(project: Project, option: str, message: str) -> None:
    result = project.run(option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_a_report_that_cannot_be_written_fails_the_session(project: Project) -> None:
    recorded(project)
    blocker = project.path / "blocker"
    blocker.write_text("a file, not a folder")
    result = project.run("--replay-recordings", f"--replay-report={blocker / 'r.json'}")
    result.assert_outcomes(passed=4)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["pytest-harness: could not write the replay report *blocker*"])


def test_replay_tools_safe_runs_safe_tools_and_fails_on_a_new_result(project: Project) -> None:
    recorded(project)
    module = project.path / f"{project.module}.py"
    module.write_text(module.read_text().replace('"total": 250.0', '"total": 99.0'))
    result = project.run("--replay-recordings", "-k", "small")
    result.assert_outcomes(passed=1)  # no tool runs: the recorded result answers
    result = project.run("--replay-recordings", "--replay-tools=safe", "-k", "small")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*changed: recording*", "*~ step 1 tool lookup_order → ok (result.total: 250.0 → 99.0)"]
    )


def test_a_rule_that_fails_at_run_time_shows_its_cel_error_whole(project: Project) -> None:
    recorded(project)
    project.change_spec(
        "rules:\n",
        'rules:\n  - id: typed\n    when: tool == "refund" && args.amount > "lots"\n'
        "    then: deny\n",
    )
    result = project.run("--replay-recordings", "-k", "small")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "deny (tool refund)" in text
    line = next(x for x in text.splitlines() if "error: TypeError: No such overload" in x)
    assert line.rstrip().endswith("or check the CEL specification.")  # whole: nothing cut
    assert "\\'" not in text and "…" not in line
