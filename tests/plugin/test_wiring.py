"""How the plugin is installed: light to import, off with `-p no:harness`, the repo's example."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_harness.plugin.settings import DEFAULT_FAIL_ON, FAIL_ON_KINDS
from pytest_harness.recording.model import Recording
from pytest_harness.replay import report

ROOT = Path(__file__).resolve().parents[2]
HEAVY = (
    "rich",
    "deepdiff",
    "aiosqlite",
    "yaml",
    "cel",
    "pydantic",
    "pydantic_core",
    "httpx",
    "jinja2",
    "jsonschema",
    "tenacity",
    "docstring_parser",
    "psycopg",
    "temporalio",
)
ENGINE = ("pytest_harness.runtime", "pytest_harness.spec", "pytest_harness.store")
"""The run loop, the spec and the stores: a session that uses no fixture imports none of them."""


def test_importing_the_plugin_imports_nothing_heavy() -> None:
    code = (
        "import sys, pytest_harness.pytest_plugin; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


def test_a_session_that_uses_none_of_it_imports_nothing_heavy(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_light=f"""
        import sys

        def test_nothing_heavy_was_imported():
            heavy = {HEAVY!r}
            assert [m for m in sys.modules if m.split('.')[0] in heavy] == []
            assert [m for m in sys.modules if m.startswith({ENGINE!r})] == []
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:asyncio", "-p", "no:anyio")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["plugins: *harness-*"])


def test_pytest_does_not_rewrite_the_runtime_s_asserts(pytester: pytest.Pytester) -> None:
    """Modules imported during a session load as plain bytecode, not through assertion rewriting.

    pytest marks every module of a plugin's distribution for rewriting; rewritten bytecode is
    cached apart and, where bytecode is not written (PYTHONDONTWRITEBYTECODE=1), rebuilt from
    source in every process.
    """
    pytester.makepyfile(
        test_loaders="""
        def test_the_runtime_is_not_rewritten():
            import pytest_harness.runtime.engine as engine
            import pytest_harness.recording.golden as golden
            for module in (engine, golden):
                assert type(module.__loader__).__name__ != "AssertionRewritingHook", module

        def test_a_test_file_still_is():
            assert type(__loader__).__name__ == "AssertionRewritingHook"
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:asyncio", "-p", "no:anyio")
    result.assert_outcomes(passed=2)


def test_no_harness_turns_it_off(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("-p", "no:harness", "--replay-recordings")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unrecognized arguments: --replay-recordings*"])


def test_fail_on_kinds_match_the_replay_report() -> None:
    assert frozenset(FAIL_ON_KINDS) == report.FAIL_ON
    assert DEFAULT_FAIL_ON == report.DEFAULT_FAIL_ON


LIVE_TEST = "test_the_live_model_answers_from_its_golden_file"


def test_the_repository_recordings_are_the_shop_tests_runs(pytester: pytest.Pytester) -> None:
    """Recording the example's tests again writes exactly the committed golden files."""
    app = pytester.path / "shop"
    shutil.copytree(
        ROOT / "fixtures" / "shop", app, ignore=shutil.ignore_patterns("__pycache__", ".harness")
    )
    out = pytester.path / "recordings"
    result = pytester.runpytest(
        str(app / "test_shop.py"),
        "-p",
        "no:cacheprovider",
        f"--harness-spec={app / 'harness.yaml'}",
        "-o",
        f"harness_recordings={out}",
        "-o",
        "asyncio_default_fixture_loop_scope=function",
        "--record-recordings=all",
        # its one live-model test re-records only from the live model (a cassette)
        "--deselect",
        f"{app.name}/test_shop.py::{LIVE_TEST}",
    )
    result.assert_outcomes(passed=15)
    committed = ROOT / "recordings" / "test_shop"
    written = {p.name: p.read_bytes() for p in (out / "test_shop").iterdir()}
    assert set(written) | {f"{LIVE_TEST}.yaml"} == {p.name for p in committed.iterdir()}
    assert len(written) >= 10
    for name, text in written.items():
        assert text.startswith(b"format: pytest-harness/recording@2\n")
        before = committed / name
        if before.read_bytes().startswith(b"format: pytest-harness/recording@2\n"):
            assert text == before.read_bytes(), name  # re-recording writes the same bytes
        else:  # a @1 file, migrated on load: the same run in every respect but the format
            old, new = Recording.load(before), Recording.load(out / "test_shop" / name)
            assert _run_of(old) == _run_of(new), name


def test_the_repository_recordings_replay_clean(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(
        "--replay-recordings",
        str(ROOT / "recordings"),
        f"--harness-spec={ROOT / 'fixtures' / 'shop' / 'harness.yaml'}",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=len(list((ROOT / "recordings").rglob("*.yaml"))))


def _run_of(recording: Recording) -> dict[str, object]:
    """Everything of a recording but the format's own fields (request digests, kept parts)."""
    data = recording.to_dict()
    for key in ("system", "tool_schemas"):
        data.pop(key)
    for turn in data["model_turns"]:
        turn.pop("request")
    return data
