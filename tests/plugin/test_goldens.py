"""`--record-recordings`: golden files named by test, written when changed, unused ones pruned."""

from __future__ import annotations

import pytest

from pytest_harness.plugin.golden import belongs_to, golden_key, golden_names, sanitize

from .conftest import Project

MANY = """
import pytest

class TestDesk:
    def test_two_runs(self, harness):
        harness.run("orders", "Refund $30 on A-1", principal="ann")
        harness.run("orders", "Delete it", principal="ann")

@pytest.mark.parametrize("amount", ["30", "250"])
def test_amounts(harness, amount):
    harness.run("orders", f"Refund ${amount} on A-1", principal="ann")

def test_factory_and_submit(harness, harness_factory):
    harness.run("orders", "Card please", principal="ann")
    harness_factory().submit("orders", "Delete it", principal="bob")  # never awaited

def test_no_runs(harness):
    pass
"""


def test_names_follow_the_tests_and_their_runs(project: Project) -> None:
    project.tests(MANY)
    result = project.run("--record-recordings=new")
    result.assert_outcomes(passed=5)
    assert sorted(project.goldens()) == [
        "test_desk/TestDesk.test_two_runs-2.yaml",
        "test_desk/TestDesk.test_two_runs.yaml",
        "test_desk/test_amounts[250].yaml",
        "test_desk/test_amounts[30].yaml",
        "test_desk/test_factory_and_submit-2.yaml",
        "test_desk/test_factory_and_submit.yaml",
    ]
    goldens = project.goldens()
    assert "input: Delete it" in goldens["test_desk/TestDesk.test_two_runs-2.yaml"]
    assert "status: awaiting_approval" in goldens["test_desk/test_amounts[250].yaml"]
    second = goldens["test_desk/test_factory_and_submit-2.yaml"]
    assert "id: bob" in second and "status: completed" in second
    assert "output: Your card is [REDACTED]." in goldens["test_desk/test_factory_and_submit.yaml"]


def test_new_keeps_existing_files_and_all_rewrites_only_changes(project: Project) -> None:
    project.tests()
    project.run("--record-recordings=new").assert_outcomes(passed=4)
    small = project.recordings / "test_desk" / "test_small_refund.yaml"
    big = project.recordings / "test_desk" / "test_big_refund.yaml"
    small.write_text(small.read_text().replace("Refunded $30.", "Refunded thirty."))
    big.unlink()
    stamps = {p.name: p.stat().st_mtime_ns for p in small.parent.iterdir()}

    result = project.run("--record-recordings=new")
    result.stdout.fnmatch_lines(
        ["golden runs in recordings: 1 written, 0 unchanged, 3 kept (already there)", "*big*"]
    )
    assert "Refunded thirty." in small.read_text()  # new never overwrites

    stamps = {p.name: p.stat().st_mtime_ns for p in small.parent.iterdir()}
    result = project.run("--record-recordings=all")
    result.stdout.fnmatch_lines(
        ["golden runs in recordings: 1 written, 3 unchanged", "  written: *test_small_refund.yaml"]
    )
    assert "Refunded $30." in small.read_text()
    after = {p.name: p.stat().st_mtime_ns for p in small.parent.iterdir()}
    assert [n for n in after if after[n] != stamps[n]] == ["test_small_refund.yaml"]


def test_unused_files_are_listed_for_complete_modules_and_pruned(project: Project) -> None:
    project.tests()
    project.run("--record-recordings=all").assert_outcomes(passed=4)
    folder = project.recordings / "test_desk"
    (folder / "test_removed.yaml").write_text("format: x\n")
    (folder / "test_small_refund-2.yaml").write_text("format: x\n")  # a run it no longer makes
    (project.recordings / "elsewhere").mkdir()
    (project.recordings / "elsewhere" / "exported.yaml").write_text("format: x\n")

    result = project.run("--record-recordings=all", "-k", "small")
    result.stdout.fnmatch_lines(
        [
            "*harness recordings*",
            "*0 written, 1 unchanged",
            "*not checked (no test module ran in full)",
        ]
    )

    result = project.run("--record-recordings=all")
    result.stdout.fnmatch_lines(
        [
            "2 unused golden files (no test wrote them; delete them with --prune-recordings):",
            "  recordings/test_desk/test_removed.yaml",
            "  recordings/test_desk/test_small_refund-2.yaml",
        ]
    )
    assert (folder / "test_removed.yaml").exists()

    result = project.run("--prune-recordings")  # counts runs without writing anything
    result.stdout.fnmatch_lines(
        ["deleted 2 unused golden files:", "*test_removed.yaml", "*-2.yaml"]
    )
    assert sorted(p.name for p in folder.iterdir()) == [
        "test_big_refund.yaml",
        "test_denied.yaml",
        "test_redacted.yaml",
        "test_small_refund.yaml",
    ]
    assert (project.recordings / "elsewhere" / "exported.yaml").exists()


def test_a_failing_test_writes_nothing_and_keeps_its_files(project: Project) -> None:
    project.tests()
    project.run("--record-recordings=all").assert_outcomes(passed=4)
    before = project.goldens()
    project.change_spec("Refunded $30.", "Refunded 30 dollars.")
    project.tests(
        """
        def test_small_refund(harness):
            result = harness.run("orders", "Refund $30 on A-1", principal="ann")
            assert result.output == "Refunded $30."

        def test_big_refund(harness):
            pass

        def test_denied(harness):
            pass

        def test_redacted(harness):
            pass
        """
    )
    result = project.run("--record-recordings=all", "--prune-recordings")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(
        [
            "1 test did not pass; its golden runs were not written:",
            "  test_desk.py::test_small_refund",
            "deleted 3 unused golden files:",
        ]
    )
    assert project.goldens() == {
        "test_desk/test_small_refund.yaml": before["test_desk/test_small_refund.yaml"]
    }


def test_under_xdist_every_file_is_written_once_and_the_summary_merged(project: Project) -> None:
    project.tests(MANY)
    project.tests(name="test_more")
    (project.recordings / "test_more").mkdir(parents=True)
    (project.recordings / "test_more" / "test_gone.yaml").write_text("format: x\n")
    result = project.run("--record-recordings=all", "--prune-recordings", workers=2)
    result.assert_outcomes(passed=9)
    result.stdout.fnmatch_lines(
        [
            "golden runs in recordings: 10 written, 0 unchanged",
            "deleted 1 unused golden file:",
            "  recordings/test_more/test_gone.yaml",
        ]
    )
    files = project.goldens()
    assert len(files) == 10
    assert not list(project.recordings.rglob("*.tmp"))
    result = project.run("--record-recordings=all", workers=2)
    result.stdout.fnmatch_lines(
        [
            "golden runs in recordings: 0 written, 10 unchanged",
            "no unused golden files in recordings/test_desk/, recordings/test_more/",
        ]
    )
    assert project.goldens() == files


def test_two_tests_claiming_one_golden_name_is_a_usage_error(project: Project) -> None:
    project.tests("def test_same(harness):\n    pass\n", name="test_desk")
    sub = project.path / "sub"
    sub.mkdir()
    (sub / "test_desk.py").write_text("def test_same(harness):\n    pass\n")
    result = project.run("--record-recordings=new", "--import-mode=importlib")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*test_desk.py::test_same and *test_desk.py::test_same would write the same golden*"]
    )


def test_golden_names() -> None:
    assert golden_key("tests/test_shop.py::TestDesk::test_refund[big-1]") == (
        "test_shop",
        "TestDesk.test_refund[big-1]",
    )
    assert golden_key("t/test_x.py::test_y[a b/c]") == ("test_x", "test_y[a_b_c]")
    assert sanitize(".hidden") == "_hidden"
    long = sanitize("x" * 300)
    assert len(long) < 140 and long.startswith("x" * 120 + "~")
    assert golden_names("t", 3) == ["t.yaml", "t-2.yaml", "t-3.yaml"]
    assert belongs_to("t.yaml", "t") and belongs_to("t-12.yaml", "t")
    assert not belongs_to("t-0.yaml", "t") and not belongs_to("t2.yaml", "t")
    assert not belongs_to("t[a]-2.yaml", "t") and belongs_to("t[a]-2.yaml", "t[a]")
