"""The pytest plugin: options, fixtures, replay items and summaries (DESIGN §7).

Installed through the `pytest11` entry point `harness`, so `pip install pytest-harness` turns
it on and `-p no:harness` turns it off. Importing this module is cheap: the spec loader, the run
loop, YAML, CEL and the stores are imported only when a fixture or a replay item needs them, so
a pytest session that uses none of it pays nothing measurable.

The wiring only; the work is done in `plugin.items` (replay items), `plugin.fixtures` (what the
fixtures share in a test), `plugin.golden` (golden file names and writes), `plugin.summary`
(the summary, unused files, `--replay-report`) and `plugin.render` (how a drifted item reads).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_harness.plugin.settings import (
    FAIL_ON_KINDS,
    RUNS,
    SETTINGS,
    RecordMode,
    Settings,
    parse_fail_on,
)

if TYPE_CHECKING:
    from pytest_harness.plugin.fixtures import TestRuns, Turns
    from pytest_harness.runtime.harness import Harness
    from pytest_harness.testing import SyncHarness

__all__ = [
    "aharness",
    "harness",
    "harness_factory",
    "scripted",
]

_PACKAGE = __name__.partition(".")[0]


def _not_rewritten(pluginmanager: pytest.PytestPluginManager) -> None:
    """Take this package off the modules whose asserts pytest rewrites as they are imported.

    pytest marks every module of a distribution with a `pytest11` entry point for rewriting,
    so the whole runtime (some 200 modules, imported when a fixture or replay item needs them)
    would load through its rewriting hook, whose bytecode is cached apart from Python's: where
    bytecode is not written (`PYTHONDONTWRITEBYTECODE=1`, usual in containers) or cannot be (a
    read-only install), each pytest process would parse, rewrite and compile them again, about
    half a second. Their asserts are internal invariants; what a test is told comes from
    explicit failures, so rewriting them gives nothing. The modules imported to register the
    plugin are already loaded; test files and conftests are rewritten as before.

    pytest has no public way to unmark a name: this uses the hook's `_must_rewrite` set when
    it has one, and otherwise leaves rewriting as it is (tests/plugin/test_wiring.py notices).
    """
    hook = getattr(pluginmanager, "rewrite_hook", None)
    marked = getattr(hook, "_must_rewrite", None)
    if not isinstance(marked, set) or _PACKAGE not in marked:
        return
    marked.discard(_PACKAGE)
    answered = getattr(hook, "_marked_for_rewrite_cache", None)
    if isinstance(answered, dict):
        for name in [n for n in answered if n.partition(".")[0] == _PACKAGE]:
            del answered[name]


RECORDING_SUFFIXES = frozenset({".yaml", ".yml", ".hx"})
_LIVE_BEFORE = pytest.StashKey["bool | None"]()
MARKER = (
    "harness(spec=None, env=None, store=None, allow_live=None): configure this test's "
    "pytest-harness fixtures (spec path relative to the test file; env name; store 'memory' or "
    "'sqlite', fresh per test; allow_live=True permits live model calls). The marker wins over "
    "--harness-spec/--harness-env, which win over the ini values."
)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """Options and ini values, in one group; the package is kept out of assertion rewriting."""
    _not_rewritten(pluginmanager)
    group = parser.getgroup("harness", "pytest-harness: agent runs, golden recordings, replay")
    group.addoption(
        "--harness-spec",
        dest="harness_spec",
        metavar="PATH",
        default=None,
        help="the harness.yaml the fixtures and replays load (overrides the harness_spec ini).",
    )
    group.addoption(
        "--harness-env",
        dest="harness_env",
        metavar="NAME",
        default=None,
        help="the spec environment to load (overrides the harness_env ini; default offline).",
    )
    group.addoption(
        "--replay-recordings",
        dest="harness_replay",
        action="store_true",
        default=False,
        help="replay every recording file (.yaml, .hx) under the given paths as a test item; "
        "with no path, the harness_recordings folder.",
    )
    group.addoption(
        "--replay-fail-on",
        dest="harness_fail_on",
        metavar="KINDS",
        type=parse_fail_on,
        default=None,
        help=f"comma-separated differences that fail a replay, of {', '.join(FAIL_ON_KINDS)} "
        "(default status,output,decisions); a divergence always fails.",
    )
    group.addoption(
        "--replay-tools",
        dest="harness_replay_tools",
        choices=["safe"],
        default=None,
        help="safe = really invoke the tools whose replay policy is safe during replay and "
        "compare their results with the recorded ones (default: no tool runs).",
    )
    group.addoption(
        "--update-recordings",
        dest="harness_update",
        action="store_true",
        default=False,
        help="rewrite the recordings whose replay drifted with the replay's outcome (accept the "
        "drift) and list them; implies --replay-recordings.",
    )
    group.addoption(
        "--record-recordings",
        dest="harness_record",
        metavar="{none,new,all}",
        nargs="?",
        const=RecordMode.NEW.value,
        default=RecordMode.NONE.value,
        help="write the runs tests make through the harness fixtures as golden files under "
        "harness_recordings/<test module>/<test name>[-N].yaml: new (also with no value) = "
        "only missing ones, all = rewrite changed ones, none = write nothing (default).",
    )
    group.addoption(
        "--prune-recordings",
        dest="harness_prune",
        action="store_true",
        default=False,
        help="delete the golden files of fully run test modules that no test wrote (unused).",
    )
    group.addoption(
        "--replay-report",
        dest="harness_report",
        metavar="PATH",
        action="append",
        default=None,
        help="write every replay report of the session to PATH, by its suffix: .json (for "
        "dashboards), .html (one self-contained page), .md (a CI job summary), or a plugin's; "
        "repeat to write several.",
    )
    group.addoption(
        "--harness-strict",
        dest="harness_strict",
        action="store_true",
        default=False,
        help="fail a test that makes harness runs but has no golden file (also with the "
        "harness_strict ini value, or when the CI environment variable is set).",
    )
    group.addoption(
        "--harness-allow-live",
        dest="harness_allow_live",
        action="store_true",
        default=False,
        help="let runs call live model providers (openai, anthropic, ...); blocked by default.",
    )
    parser.addini(
        "harness_spec", "the harness.yaml of the fixtures and replays", default="harness.yaml"
    )
    parser.addini(
        "harness_env",
        "the spec environment of the fixtures and replays (offline: used when the spec has it)",
        default="offline",
    )
    parser.addini(
        "harness_strict",
        "fail tests that make harness runs but have no golden file (as when CI is set)",
        type="bool",
        default=False,
    )
    parser.addini(
        "harness_recordings",
        "the folder of golden recordings (written by --record-recordings, replayed by default)",
        default="recordings",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Read the settings, block live models, and register what the session's options need."""
    config.addinivalue_line("markers", MARKER)
    _record_mode_or_path(config)
    settings = Settings.from_config(config)
    config.stash[SETTINGS] = settings
    if settings.reports:
        from pytest_harness.reports import ReportError, renderer_for

        for path in settings.reports:
            try:
                renderer_for(settings.show(path))
            except ReportError as exc:
                raise pytest.UsageError(str(exc)) from None
    from pytest_harness.models.live import set_live_models_allowed

    config.stash[_LIVE_BEFORE] = set_live_models_allowed(None if settings.allow_live else False)
    pm = config.pluginmanager
    if pm.hasplugin("asyncio") and not pm.hasplugin("harness-asyncio"):
        from pytest_harness.plugin import async_support

        pm.register(async_support, "harness-asyncio")
    if settings.replay and config.args_source is not pytest.Config.ArgsSource.ARGS:
        if not settings.recordings.is_dir():
            raise pytest.UsageError(
                f"--replay-recordings: no recordings folder {settings.show(settings.recordings)} "
                "(set harness_recordings in the ini file, or give the paths to replay)"
            )
        config.args = [str(settings.recordings)]
        config.args_source = pytest.Config.ArgsSource.ARGS
    from pytest_harness.plugin.summary import register

    register(config, settings)


def _record_mode_or_path(config: pytest.Config) -> None:
    """`--record-recordings PATH` means `new` and PATH: give the path back to pytest.

    The option's value is optional, so argparse takes a path that follows it as its value.
    """
    value = str(config.option.harness_record)
    modes = [mode.value for mode in RecordMode]
    if value in modes:
        return
    if not Path(config.invocation_params.dir, value.split("::")[0]).exists():
        raise pytest.UsageError(
            f"--record-recordings: invalid choice {value!r} (choose from {', '.join(modes)}; "
            "no value means new)"
        )
    config.option.harness_record = RecordMode.NEW.value
    if config.args_source is pytest.Config.ArgsSource.ARGS:
        config.args = [value, *config.args]
    else:
        config.args = [value]
        config.args_source = pytest.Config.ArgsSource.ARGS


def pytest_unconfigure(config: pytest.Config) -> None:
    """Restore the live-model switch and close what the replays opened."""
    if _LIVE_BEFORE in config.stash:
        from pytest_harness.models.live import set_live_models_allowed

        set_live_models_allowed(config.stash[_LIVE_BEFORE])
    from pytest_harness.plugin.settings import REPLAY_SESSION

    session = config.stash.get(REPLAY_SESSION, None)
    if session is not None:
        session.close()


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """Under `--replay-recordings`, a recording file is a test item."""
    if file_path.suffix in RECORDING_SUFFIXES and parent.config.stash[SETTINGS].replay:
        from pytest_harness.plugin.items import RecordingFile

        file: pytest.Collector = RecordingFile.from_parent(parent, path=file_path)
        return file
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Mark a test whose setup or call failed or skipped.

    Its fixtures' teardown stops the runs it submitted instead of waiting for them (they may
    never end), and its golden files are kept as they are.
    """
    report = yield
    if report.when != "teardown" and not report.passed:
        runs = item.stash.get(RUNS, None)
        if runs is not None:
            runs.failed = True
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """Switch live calls per `@pytest.mark.harness(allow_live=...)`; check golden files.

    A golden file that could not answer a live model fails the test with why, even when the
    test failed otherwise or caught the error. A test that made runs without golden files is
    listed, and fails when strict (DESIGN §7.1).
    """
    allow = next(
        (m.kwargs["allow_live"] for m in item.iter_markers("harness") if "allow_live" in m.kwargs),
        None,
    )
    try:
        if allow is None:
            result = yield
        else:
            from pytest_harness.models.live import allow_live_models

            with allow_live_models(bool(allow)):
                result = yield
    except Exception:
        runs = item.stash.get(RUNS, None)
        if runs is not None:  # a golden file that could not answer says so, whatever failed
            runs.check_cassette()
        raise
    runs = item.stash.get(RUNS, None)
    if runs is not None:
        runs.check_gated()
    return result


def pytest_assertrepr_compare(
    config: pytest.Config, op: str, left: object, right: object
) -> list[str] | None:
    """`assert result == expected` between `RunResult`s shows the fields and decisions.

    Two `RunResult`s exist only once their module was imported: until then, nothing to check.
    """
    results = sys.modules.get("pytest_harness.runtime.results")
    if results is None or op != "==":
        return None
    if isinstance(left, results.RunResult) and isinstance(right, results.RunResult):
        from pytest_harness.testing import explain_difference

        return explain_difference(left, right)
    return None


# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture
def _harness_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestRuns]:
    """What this test's harness fixtures share; writes its golden runs at teardown."""
    from pytest_harness.plugin.fixtures import TestRuns

    node = request.node
    assert isinstance(node, pytest.Item)
    runs = TestRuns(node, request.config.stash[SETTINGS], tmp_path_factory)
    node.stash[RUNS] = runs
    yield runs
    runs.finish()


@pytest.fixture
def harness(_harness_runs: TestRuns) -> SyncHarness:
    """A blocking `Harness` (same methods) from the ini spec, offline, with a fresh memory store.

    For tests without an event-loop plugin; configure it with `@pytest.mark.harness(...)`.
    """
    return _harness_runs.sync()


@pytest.fixture
def harness_factory(_harness_runs: TestRuns) -> Callable[..., SyncHarness]:
    """Make more blocking harnesses: `harness_factory(spec=..., env=..., store=..., record=...)`.

    Each is closed at teardown; a relative `spec` resolves against the test file's folder.
    """
    return _harness_runs.sync


@pytest.fixture
def scripted(_harness_runs: TestRuns) -> Callable[[str, Turns], None]:
    """`scripted(task_or_model, turns)`: answer the test's next runs of a task (or model).

    Turns are dicts or `pytest_harness.testing.call/say/fail(...)`; they apply to every harness
    of the test, made before or after.
    """
    return _harness_runs.script


@pytest.fixture
def aharness(request: pytest.FixtureRequest) -> Harness:
    """The async `Harness` (same setup as `harness`) for `async def` tests.

    Works under pytest-asyncio (`@pytest.mark.asyncio`) and under anyio (`@pytest.mark.anyio`
    with the asyncio backend); it is closed on the test's own event loop.
    """
    name: str | None = None
    if "anyio_backend" in request.fixturenames:
        name = "_harness_anyio"
    elif request.config.pluginmanager.hasplugin("harness-asyncio"):
        node = request.node
        marker = node.get_closest_marker("asyncio")
        if marker is not None:
            from pytest_harness.plugin.async_support import fixture_name

            scope = marker.kwargs.get("loop_scope") or marker.kwargs.get("scope")
            scope = scope or request.config.getini("asyncio_default_test_loop_scope")
            name = fixture_name(scope or "function")
    if name is None:
        pytest.fail(
            "the aharness fixture is for async tests run by pytest-asyncio "
            "(@pytest.mark.asyncio) or anyio (@pytest.mark.anyio); in a sync test use `harness`",
            pytrace=False,
        )
    found: Harness = request.getfixturevalue(name)
    return found


@pytest.fixture
async def _harness_anyio(_harness_runs: TestRuns, anyio_backend: Any) -> AsyncIterator[Harness]:
    """`aharness` under anyio: set up and closed by anyio's runner, on the test's loop."""
    backend = anyio_backend if isinstance(anyio_backend, str) else anyio_backend[0]
    if backend != "asyncio":
        pytest.fail(
            f"aharness runs on asyncio; this test uses anyio's {backend!r} backend "
            "(parametrize anyio_backend with 'asyncio')",
            pytrace=False,
        )
    harness = _harness_runs.load()
    try:
        yield harness
    finally:
        await _harness_runs.close_async(harness)
