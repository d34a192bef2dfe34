"""Ungated tests are visible, and fail when strict (DESIGN §7.1); replaying nothing is no pass."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from pytest_harness.plugin.settings import in_ci

from .conftest import Project

NEW_TEST = """
def test_small_refund(harness):
    assert harness.run("orders", "Refund $30 on A-1", principal="ann").ok


def test_two_runs(harness):
    harness.run("orders", "Refund $30 on A-1", principal="ann")
    harness.run("orders", "Card please", principal="ann")


def test_no_runs(harness):
    pass
"""


def test_tests_without_golden_files_are_listed_with_the_command(project: Project) -> None:
    project.tests(NEW_TEST)
    result = project.run()
    result.assert_outcomes(passed=3)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*= harness recordings =*",
            "2 tests made harness runs but have no golden file, so the replay gate does not "
            "cover them:",
            "  test_desk.py::test_small_refund (missing recordings/test_desk/test_small_refund"
            ".yaml)",
            "  test_desk.py::test_two_runs (missing recordings/test_desk/test_two_runs.yaml, "
            "recordings/test_desk/test_two_runs-2.yaml)",
            "record them with: pytest --record-recordings=new test_desk.py::test_small_refund "
            "test_desk.py::test_two_runs",
        ]
    )
    assert "test_no_runs" not in result.stdout.str()


@pytest.mark.parametrize(
    "how", ["option", "ini", "CI=true", "CI=1", "CI=yes"], ids=lambda how: how.replace("=", "-")
)
def test_strict_fails_them_with_the_command_that_records_them(
    project: Project, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    project.tests(NEW_TEST)
    args: list[str] = []
    if how == "option":
        args.append("--harness-strict")
    elif how == "ini":
        args += ["-o", "harness_strict=true"]
    else:
        monkeypatch.setenv("CI", how.split("=", 1)[1])
    result = project.run(*args)
    result.assert_outcomes(passed=1, failed=2)
    reason = {"option": "--harness-strict", "ini": "the harness_strict ini value"}.get(how, how)
    result.stdout.fnmatch_lines(
        [
            f"*test_desk.py::test_small_refund made 1 harness run but has no golden file "
            f"(recordings/test_desk/test_small_refund.yaml), and {reason} requires them: record "
            "them with: pytest --record-recordings=new test_desk.py::test_small_refund",
        ]
    )
    result.stdout.fnmatch_lines([f"*have no golden file*; they fail because {reason} is set:"])

    # recorded, the same tests pass strictly
    assert project.run("--record-recordings").ret == pytest.ExitCode.OK
    project.run(*args).assert_outcomes(passed=3)


@pytest.mark.parametrize("value", ["", "0", "false", "False"])
def test_ci_set_to_nothing_or_false_is_not_strict(
    project: Project, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("CI", value)
    project.tests(NEW_TEST)
    project.run().assert_outcomes(passed=3)
    assert not in_ci({"CI": value})
    assert in_ci({"CI": "true"}) and not in_ci({})


def test_a_test_with_fewer_golden_files_than_runs_fails_strictly(project: Project) -> None:
    project.tests(NEW_TEST)
    project.run("--record-recordings=new")
    (project.recordings / "test_desk" / "test_two_runs-2.yaml").unlink()
    result = project.run("--harness-strict")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        ["*test_two_runs made 2 harness runs but has missing golden files "
         "(recordings/test_desk/test_two_runs-2.yaml)*"]
    )  # fmt: skip


def test_strict_under_xdist_merges_the_list(project: Project) -> None:
    project.tests(NEW_TEST)
    result = project.run("--harness-strict", workers=2)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        ["2 tests made harness runs but have no golden file*", "record them with: *"]
    )


def test_record_recordings_without_a_value_means_new(project: Project) -> None:
    project.tests(NEW_TEST)
    result = project.run("--record-recordings")
    result.stdout.fnmatch_lines(["golden runs in recordings: 3 written, 0 unchanged, 0 kept*"])
    result = project.run("--record-recordings", "test_desk.py::test_small_refund")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["golden runs in recordings: 0 written, 0 unchanged, 1 kept*"])


def test_replaying_a_path_without_recordings_says_so_and_exits_5(project: Project) -> None:
    project.tests(NEW_TEST)
    empty = project.path / "nothing"
    empty.mkdir()
    result = project.run("--replay-recordings", "nothing")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(
        ["no recordings replayed: no recording files (.yaml, .yml, .hx) were collected from "
         "nothing"]
    )  # fmt: skip

    # python tests alone under --replay-recordings: they run, and the session still says so
    result = project.run("--replay-recordings", "test_desk.py")
    result.assert_outcomes(passed=3)
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(["no recordings replayed: *test_desk.py"])


def test_junit_class_names_of_replay_items_drop_the_suffix(project: Project) -> None:
    project.tests(NEW_TEST)
    project.run("--record-recordings=new")
    junit = project.path / "junit.xml"
    result = project.run("--replay-recordings", f"--junitxml={junit}")
    result.assert_outcomes(passed=3)
    cases = ET.parse(junit).getroot().iter("testcase")
    found = sorted((c.get("classname"), c.get("name")) for c in cases)
    assert found == [
        ("recordings.test_desk.test_small_refund", "test_small_refund"),
        ("recordings.test_desk.test_two_runs", "test_two_runs"),
        ("recordings.test_desk.test_two_runs-2", "test_two_runs-2"),
    ]


def test_the_header_names_the_golden_folder(project: Project) -> None:
    project.tests(NEW_TEST)
    result = project.run("--record-recordings=new")
    result.stdout.fnmatch_lines(
        ["harness: spec harness.yaml (env offline), golden files in recordings/"]
    )
    assert "harness:" not in project.run().stdout.str()


def test_the_unused_check_names_every_golden_folder_it_checked(project: Project) -> None:
    project.tests(NEW_TEST)
    project.tests("def test_plain():\n    pass\n", name="test_other")
    result = project.run("--record-recordings")
    result.stdout.fnmatch_lines(["no unused golden files in recordings/test_desk/"])
    project.tests(NEW_TEST, name="test_more")
    result = project.run("--record-recordings", "--prune-recordings")
    result.stdout.fnmatch_lines(
        ["no unused golden files in recordings/test_desk/, recordings/test_more/"]
    )
    # one test picked by node id: its module did not run in full, so nothing is unused
    result = project.run("--record-recordings", "--prune-recordings", "test_desk.py::test_no_runs")
    result.stdout.fnmatch_lines(["unused golden files: not checked (no test module ran in full)"])
    assert len(project.goldens()) == 6
