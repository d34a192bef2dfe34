"""`--replay-recordings`: every recording file becomes a test item that replays it.

An item loads its file and finds the spec's harness in setup (so a file that does not load, a
spec with a mistake or a task the spec lost is an error naming the file), replays it in the call
phase, and fails when the report differs in a way `--replay-fail-on` counts (a divergence always
fails). `--update-recordings` rewrites a drifted file with the replay's outcome instead. The spec
is loaded once per spec and environment per process, and every replay of the process runs on one
event loop.

The outcome of each item travels to the summary as JSON in `report.user_properties`, so the
pytest-xdist controller sees the workers' outcomes as it sees its own.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Coroutine, Iterator
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from pytest_harness.errors import HarnessError
from pytest_harness.plugin.settings import REPLAY_PROPERTY, REPLAY_SESSION, SETTINGS, Settings
from pytest_harness.recording.model import Recording

if TYPE_CHECKING:
    import asyncio

    from _pytest._code.code import ExceptionInfo, TerminalRepr, TracebackStyle

    from pytest_harness.replay.report import ReplayReport
    from pytest_harness.runtime.harness import Harness

__all__ = [
    "RecordingFile",
    "RecordingItem",
    "ReplayFailed",
    "ReplaySession",
]

T = TypeVar("T")


class ReplaySession:
    """The event loop and the loaded harnesses that one process's replay items share."""

    def __init__(self) -> None:
        self._runner: asyncio.Runner | None = None
        self._harnesses: dict[tuple[Path, str], Harness | HarnessError] = {}

    def harness(self, spec: Path, env: str) -> Harness:
        """The harness of `spec` in `env`, loaded once (a loading error is raised every time)."""
        key = (spec, env)
        found = self._harnesses.get(key)
        if found is None:
            from pytest_harness.plugin.fixtures import load_harness

            try:
                found = load_harness(spec, env, store="memory")
            except HarnessError as exc:
                found = exc
            self._harnesses[key] = found
        if isinstance(found, HarnessError):
            raise found
        return found

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the session's event loop.

        Straight on the runner's loop: `asyncio.Runner.run` would read and set the SIGINT
        handler around every replay, a millisecond each. A Ctrl-C raises
        `KeyboardInterrupt` out of the loop instead, and `close` cancels what it left.
        """
        if self._runner is None:
            import asyncio

            self._runner = asyncio.Runner()
        return self._runner.get_loop().run_until_complete(coro)

    def close(self) -> None:
        """Close every loaded harness and the event loop."""
        if self._runner is None:
            return
        for harness in self._harnesses.values():
            if not isinstance(harness, HarnessError):
                self._runner.run(harness.aclose())
        self._harnesses.clear()
        self._runner.close()
        self._runner = None


class ReplayFailed(Exception):
    """A replay that differs from its recording in a way that fails the item."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        super().__init__(data.get("plain") or data.get("file"))


class RecordingFile(pytest.File):
    """A recording file (`.yaml`, `.hx`): one item, named by the file."""

    def collect(self) -> Iterator[RecordingItem]:
        """The file's single replay item."""
        yield RecordingItem.from_parent(self, name=self.path.stem)


class RecordingItem(pytest.Item):
    """Replays one recording file against the current spec and code."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._recording: Recording | None = None
        self._harness: Harness | None = None
        self._settings: Settings = self.config.stash[SETTINGS]

    @cached_property
    def shown(self) -> str:
        """The file as messages name it (relative to the rootdir)."""
        return self._settings.show(self.path)

    def setup(self) -> None:
        """Load the recording and the spec's harness; any problem is an error naming the file."""
        settings = self._settings
        try:
            recording = Recording.load(self.path, source=self.shown)
            session = self.config.stash.get(REPLAY_SESSION, None)
            if session is None:
                session = self.config.stash[REPLAY_SESSION] = ReplaySession()
            harness = session.harness(settings.spec, settings.env)
            harness.spec.task(recording.task)
        except HarnessError as exc:
            if (kind := self._beside_the_recordings()) is not None:
                pytest.skip(f"{self.shown}: {kind}, not a recording")
            problem = f"cannot replay {self.shown}: {str(exc).replace(str(self.path), self.shown)}"
        else:
            self._recording, self._harness = recording, harness
            return
        self._publish({"outcome": "error", "error": problem})
        pytest.fail(problem, pytrace=False)

    def _beside_the_recordings(self) -> str | None:
        """What this file is when it was found in a folder and is plainly not a recording.

        A file named on the command line is always replayed as a recording (its error stands).
        """
        from pytest_harness.recording.sniff import not_a_recording

        here = self.config.invocation_params.dir
        named = {(here / arg.split("::", 1)[0]).resolve() for arg in self.config.args}
        if self.path.resolve() in named:
            return None
        return not_a_recording(self.path)

    def runtest(self) -> None:
        """Replay the recording; fail on drift (or rewrite it under `--update-recordings`)."""
        assert self._recording is not None and self._harness is not None
        settings = self._settings
        try:
            replaying = self._harness.replay(self._recording, tools=settings.replay_tools)
            report = self.config.stash[REPLAY_SESSION].run(replaying)
        except HarnessError as exc:
            self._publish({"outcome": "error", "error": f"cannot replay {self.shown}: {exc}"})
            raise
        failed = report.failed(settings.fail_on)
        outcome = "same"
        if report.divergence is not None:
            outcome = "diverged"
        elif failed:
            outcome = "drifted"
        hint: str | None = None
        archive = self.path.suffix == ".hx"  # an incident stays as it happened: never rewritten
        if settings.update and not archive and report.divergence is None and report.differences:
            report.replayed.save(self.path, overwrite=True)
            outcome, failed = "updated", False
        elif archive and failed:
            hint = (
                "an incident archive is evidence and is never rewritten"
                + (" (not updated)" if settings.update else "")
                + "; fix the regression, or delete the archive if the new behaviour is intended"
            )
        elif report.divergence is not None:
            hint = (
                "a diverged replay has no complete outcome to accept"
                + (" (not updated)" if settings.update else "")
                + "; re-record the run (its test with --record-recordings=all)"
            )
        elif failed:
            command = ["pytest", "--update-recordings", *settings.replay_args, self.shown]
            hint = f"accept this drift with: {shlex.join(command)}"
        data = _report_data(report, outcome, settings, failed=failed)
        if hint is not None:
            data["hint"] = hint
        self._publish(data)
        if failed:
            raise ReplayFailed(data)

    def repr_failure(
        self, excinfo: ExceptionInfo[BaseException], style: TracebackStyle | None = None
    ) -> str | TerminalRepr:
        """The replay report for a drift; one line naming the file for a harness error."""
        if isinstance(excinfo.value, ReplayFailed):
            from pytest_harness.plugin.render import ReplayFailureRepr

            data = excinfo.value.data
            return ReplayFailureRepr(data["report"], data["plain"], data.get("hint"))  # type: ignore[return-value]
        if isinstance(excinfo.value, HarnessError):
            return f"cannot replay {self.shown}: {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """Where the item comes from: its file."""
        return self.path, None, f"replay {self.shown}"

    def teardown(self) -> None:
        """Keep the replay's data on the call (or setup) report only, not on teardown's.

        The item lets its recording go: pytest keeps every item to the session's end, and
        10,000 recordings held there are what the garbage collector walks again and again.
        """
        self._recording = None
        self.user_properties[:] = [p for p in self.user_properties if p[0] != REPLAY_PROPERTY]

    def _publish(self, data: dict[str, Any]) -> None:
        data = {"file": self.shown, "nodeid": self.nodeid, **data}
        self.user_properties.append((REPLAY_PROPERTY, json.dumps(data)))


def _report_data(
    report: ReplayReport, outcome: str, settings: Settings, *, failed: bool
) -> dict[str, Any]:
    """What the summary, the JSON report and a controller's failure display need of a report."""
    data: dict[str, Any] = {
        "outcome": outcome,
        "differences": sorted(report.differences),
        "status": list(report.status),
        "reason": report.diverged,
        "requests": {
            "changed": report.model_requests_changed[0],
            "total": report.model_requests_changed[1],
            "parts": list(report.requests_explained),
        },
    }
    if failed or outcome == "updated" or settings.reports:
        data["plain"] = report.render(settings.fail_on)
        data["report"] = report.to_dict()
    return data
