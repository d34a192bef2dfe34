"""What the `harness`, `aharness`, `harness_factory` and `scripted` fixtures share in one test.

Each test gets a `TestRuns`: it loads harnesses (from the marker, the command line or the ini,
in that order of precedence), each with a fresh store, applies the test's scripts to them, and at
teardown closes them and writes the test's runs as golden files when `--record-recordings` asks.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_harness.errors import HarnessError, SpecError
from pytest_harness.models.live import check_live
from pytest_harness.plugin.golden import golden_key, golden_name, write_golden
from pytest_harness.plugin.settings import (
    DEFAULT_ENV,
    RECORDINGS_PROPERTY,
    UNGATED_PROPERTY,
    RecordMode,
    Settings,
)

if TYPE_CHECKING:
    from pytest_harness.models.base import ModelProvider, ModelRequest, ModelResponse
    from pytest_harness.models.scripted import Script
    from pytest_harness.plugin.cassette import Cassette
    from pytest_harness.recording.model import Recording
    from pytest_harness.runtime.harness import Harness
    from pytest_harness.store.base import NewRun, RunRecord, Store
    from pytest_harness.testing import SyncHarness

__all__ = ["MARKER_KEYS", "TaskScripts", "TestRuns", "load_harness", "marker_options"]

NO_ENV = "none"
"""The environment name that means no overlay: the spec's base models, as written."""
MARKER_KEYS = ("spec", "env", "store", "allow_live")
"""What `@pytest.mark.harness(...)` accepts."""

Turns = Sequence[Mapping[str, Any]] | Mapping[str, Any]


def marker_options(node: pytest.Item) -> dict[str, Any]:
    """The `harness` marker's keywords for `node`, the closest marker winning per keyword."""
    found: dict[str, Any] = {}
    for marker in node.iter_markers("harness"):
        if marker.args:
            pytest.fail(
                f"{node.nodeid}: @pytest.mark.harness takes keywords only "
                f"({', '.join(MARKER_KEYS)}), got positional {marker.args!r}",
                pytrace=False,
            )
        unknown = sorted(set(marker.kwargs) - set(MARKER_KEYS))
        if unknown:
            pytest.fail(
                f"{node.nodeid}: @pytest.mark.harness got unknown keyword "
                f"{', '.join(map(repr, unknown))}; it accepts {', '.join(MARKER_KEYS)}",
                pytrace=False,
            )
        for key, value in marker.kwargs.items():
            found.setdefault(key, value)
    return found


def load_harness(
    spec: Path, env: str, *, store: Store | str | None = None, record: bool | None = None
) -> Harness:
    """`ph.load(...)`, where the default `offline` environment applies only if the spec has one.

    `env="none"` loads the spec without an environment overlay (its base models, e.g. live).
    """
    from pytest_harness.loading import load

    if env == NO_ENV:
        return load(spec, env="", store=store, record=record)
    try:
        return load(spec, env=env, store=store, record=record)
    except SpecError as exc:
        if env == DEFAULT_ENV and exc.key == "environments" and "unknown environment" in exc.reason:
            return load(spec, env="", store=store, record=record)
        raise


class TaskScripts:
    """A model's provider whose turns come from `scripted(task, turns)` for some of its tasks.

    Runs of other tasks go to the model's previous provider, still blocked when it is live and
    live calls are not allowed.
    """

    name = "scripted"
    live = False

    def __init__(self, original: ModelProvider, model: str) -> None:
        self.original = original
        self.model = model
        self.tasks: dict[str, ModelProvider] = {}

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer from the task's script, or from the previous provider."""
        scripted = self.tasks.get(request.task)
        if scripted is not None:
            return await scripted.complete(request)
        check_live(self.original, self.model)
        return await self.original.complete(request)

    def retry_delay(self, attempt: int, error: Any = None) -> float:
        """Scripted errors are retried at once."""
        return 0.0


@dataclass(slots=True, eq=False)
class _Entry:
    """One harness a test made, in the order made."""

    harness: Harness
    facade: SyncHarness | None
    record: bool
    routers: dict[str, TaskScripts] = field(default_factory=dict)
    runs: list[Recording | None] | None = None
    """The recordings of its runs, in start order, once collected at teardown (None: unrecorded)."""


class TestRuns:
    """The harnesses one test made through the fixtures, its scripts, and its golden runs."""

    __test__ = False

    def __init__(self, node: pytest.Item, settings: Settings, tmp: pytest.TempPathFactory) -> None:
        self.node = node
        self.settings = settings
        self.marker = marker_options(node)
        self.failed = False
        """Set when the test's setup or call failed or skipped: its golden files are kept."""
        self.started = 0
        """How many runs the test's harnesses started (an idempotent repeat is not a run)."""
        self._tmp = tmp
        self.cassette: Cassette | None = None
        """The test's golden files as its live models' answers, once a harness has a live one."""
        self._entries: list[_Entry] = []
        self._scripts: list[tuple[str, Script, bool]] = []

    # -- making harnesses ------------------------------------------------------------------

    def resolve(
        self, spec: str | os.PathLike[str] | None = None, env: str | None = None
    ) -> tuple[Path, str]:
        """The spec path and environment of a harness: arguments > marker > command line > ini.

        A relative spec path given to the marker or the factory resolves against the test
        file's folder.
        """
        spec = spec if spec is not None else self.marker.get("spec")
        env = env if env is not None else self.marker.get("env")
        if spec is None:
            path = self.settings.spec
        else:
            path = Path(os.fspath(spec))
            if not path.is_absolute():
                path = self.node.path.parent / path
        return path, self.settings.env if env is None else str(env)

    def load(
        self,
        *,
        spec: str | os.PathLike[str] | None = None,
        env: str | None = None,
        store: Store | str | None = None,
        record: bool | None = None,
    ) -> Harness:
        """Load a harness for this test (a fresh memory store unless told otherwise)."""
        path, env_name = self.resolve(spec, env)
        chosen = store if store is not None else self.marker.get("store", "memory")
        if record is None and self.settings.record is not RecordMode.NONE:
            record = True
        try:
            harness = load_harness(path, env_name, store=self._fresh_store(chosen), record=record)
        except HarnessError as exc:
            problem = f"pytest-harness: cannot load {self.settings.show(path)}: {exc}"
        else:
            return self._add(harness)
        pytest.fail(problem, pytrace=False)

    def _add(self, harness: Harness) -> Harness:
        self._cassette(harness)
        self._count_runs(harness)
        entry = _Entry(harness=harness, facade=None, record=harness.record)
        for name, script, _ in self._scripts:
            self._apply(entry, name, script)
        self._check_scripts_apply(entry)
        self._entries.append(entry)
        return harness

    def _cassette(self, harness: Harness) -> None:
        """Answer the harness's live models from the test's golden files (or record them)."""
        plans = harness.plans
        if not any(getattr(plans.provider(m), "live", False) for m in harness.spec.document.models):
            return
        from pytest_harness.plugin.cassette import Cassette

        if self.cassette is None:
            self.cassette = Cassette(self.node.nodeid, self.settings)
        self.cassette.attach(harness)

    def _count_runs(self, harness: Harness) -> None:
        """Count the runs `harness` starts, whatever starts them (run, submit, a helper)."""
        store = harness.store
        create_run = store.create_run

        async def counting(new: NewRun) -> tuple[RunRecord, bool]:
            record, created = await create_run(new)
            if created:
                self.started += 1
                if self.cassette is not None:
                    self.cassette.started(record.run_id)
            return record, created

        store.create_run = counting  # type: ignore[method-assign,assignment]

    def check_cassette(self) -> None:
        """Fail the test when its golden files could not answer its live models (and why)."""
        if self.cassette is not None and self.cassette.diverged:
            pytest.fail("\n".join(self.cassette.diverged), pytrace=False)

    def check_gated(self) -> None:
        """After the test's call: fail on golden files that could not answer; check gating.

        A golden file that could not answer a live model fails the test with why. Runs without
        golden files are published (and fail the test, when strict).

        A test that is recording (`--record-recordings`) writes them, so it is not checked.
        """
        settings = self.settings
        self.check_cassette()
        if not self.started or settings.record is not RecordMode.NONE:
            return
        folder, base = golden_key(self.node.nodeid)
        names = [golden_name(base, n) for n in range(1, self.started + 1)]
        missing = [
            settings.show(settings.recordings / folder / name)
            for name in names
            if not (settings.recordings / folder / name).is_file()
        ]
        if not missing:
            return
        import json
        import shlex

        data = {"runs": self.started, "missing": missing}
        self.node.user_properties.append((UNGATED_PROPERTY, json.dumps(data)))
        if settings.strict:
            runs = f"{self.started} harness run{'s' if self.started > 1 else ''}"
            files = "no golden file" if len(missing) == len(names) else "missing golden files"
            pytest.fail(
                f"{self.node.nodeid} made {runs} but has {files} ({', '.join(missing)}), and "
                f"{settings.strict} requires them: record them with: pytest "
                f"--record-recordings=new {shlex.quote(self.node.nodeid)}",
                pytrace=False,
            )

    def sync(
        self,
        *,
        spec: str | os.PathLike[str] | None = None,
        env: str | None = None,
        store: Store | str | None = None,
        record: bool | None = None,
    ) -> SyncHarness:
        """A blocking facade over a new harness for this test (closed at teardown)."""
        from pytest_harness.testing import SyncHarness

        harness = self.load(spec=spec, env=env, store=store, record=record)
        facade = SyncHarness(harness)
        self._entries[-1].facade = facade
        return facade

    def _fresh_store(self, store: Store | str) -> Store | str:
        """`"sqlite"` means a new database file in the test's temporary folder."""
        if store != "sqlite":
            return store
        from pytest_harness.store.sqlite import SQLiteStore

        folder = self._tmp.mktemp("harness-sqlite", numbered=True)
        return SQLiteStore(folder / "state.db")

    # -- scripts ---------------------------------------------------------------------------

    def script(self, task_or_model: str, turns: Turns) -> None:
        """Answer the next runs of `task_or_model` (a task, else a model) with `turns`."""
        from pytest_harness.models.scripted import parse_script

        data: Any = dict(turns) if isinstance(turns, Mapping) else [dict(t) for t in turns]
        script = parse_script(data)
        applied = [self._apply(entry, task_or_model, script) for entry in self._entries]
        if self._entries and not any(applied):
            raise ValueError(self._unknown_name(task_or_model, self._entries[0].harness))
        self._scripts.append((task_or_model, script, any(applied)))

    def _apply(self, entry: _Entry, name: str, script: Script) -> bool:
        from pytest_harness.models.scripted import ScriptedProvider

        document = entry.harness.spec.document
        plans = entry.harness.plans
        if name in document.tasks:
            model = document.tasks[name].model
            router = entry.routers.get(model)
            if router is None:
                router = TaskScripts(plans.provider(model), model)
                entry.routers[model] = router
                plans.replace_provider(model, router)
            router.tasks[name] = ScriptedProvider(script, model_name=model)
            return True
        if name in document.models:
            provider = ScriptedProvider(script, model_name=name)
            if name in entry.routers:
                entry.routers[name].original = provider
            else:
                plans.replace_provider(name, provider)
            return True
        return False

    def _check_scripts_apply(self, entry: _Entry) -> None:
        """A script that fits no harness of the test so far must fit this one."""
        document = entry.harness.spec.document
        for i, (name, script, applied) in enumerate(self._scripts):
            fits = name in document.tasks or name in document.models
            if not fits and not applied:
                raise ValueError(self._unknown_name(name, entry.harness))
            self._scripts[i] = (name, script, applied or fits)

    def _unknown_name(self, name: str, harness: Harness) -> str:
        document = harness.spec.document
        return (
            f"scripted({name!r}, ...): {self.settings.show(harness.spec.path)} has no task or "
            f"model of that name (tasks: {', '.join(document.tasks) or 'none'}; "
            f"models: {', '.join(document.models) or 'none'})"
        )

    # -- teardown --------------------------------------------------------------------------

    @property
    def _counting(self) -> bool:
        return self.settings.tracks_goldens

    def _writing(self, entry: _Entry) -> bool:
        """Whether this harness's runs become golden files (else they are only counted)."""
        return entry.record and self.settings.record is not RecordMode.NONE

    async def close_async(self, harness: Harness) -> None:
        """Collect an async harness's runs (when golden runs are tracked), then close it."""
        try:
            entry = next(e for e in self._entries if e.harness is harness)
            if self.failed:  # its submitted runs are not waited for: they may never end
                await harness._stop_submitted()
            elif self._counting:
                entry.runs = await _recordings(harness, recorded=self._writing(entry))
        finally:
            await harness.aclose()

    def finish(self) -> None:
        """Close the test's facades and write its golden runs (reported to the controller)."""
        try:
            for entry in self._entries:
                facade = entry.facade
                if facade is None:
                    continue
                try:
                    if self.failed:  # its submitted runs are not waited for: they may never end
                        facade.wait(entry.harness._stop_submitted())
                    elif self._counting:
                        facade.wait_for_runs()
                        runs = _recordings(entry.harness, recorded=self._writing(entry))
                        entry.runs = facade.wait(runs)
                finally:
                    facade.close()
        finally:
            if self._counting and self._entries:
                self._write_goldens()

    def _write_goldens(self) -> None:
        settings = self.settings
        folder, base = golden_key(self.node.nodeid)
        files: dict[str, str] = {}
        count = 0
        if not self.failed:
            runs = [run for entry in self._entries for run in entry.runs or ()]
            count = len(runs)
            for n, recording in enumerate(runs, 1):
                path = settings.recordings / folder / golden_name(base, n)
                if recording is None or settings.record is RecordMode.NONE:
                    continue
                files[settings.show(path)] = write_golden(recording, path, settings.record)
        data = {"folder": folder, "base": base, "runs": count, "failed": self.failed}
        data["files"] = files
        import json

        self.node.user_properties.append((RECORDINGS_PROPERTY, json.dumps(data)))


async def _recordings(harness: Harness, *, recorded: bool) -> list[Recording | None]:
    """The recordings of a harness's runs, in the order they were started.

    A run still running is left out; with `recorded` false only the count matters (None each).
    """
    summaries = list(reversed(await harness.runs(limit=1_000_000)))
    out: list[Recording | None] = []
    for summary in summaries:
        if summary.status.value == "running":
            continue
        if not recorded:
            out.append(None)
            continue
        recording = await harness.recording(summary.run_id)
        if harness.evals is not None:  # golden files keep the grades of the online evals
            from pytest_harness.evals.replay import with_grades

            recording = await with_grades(harness, recording)
        out.append(recording)
    return out
