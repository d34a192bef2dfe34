"""Golden files as cassettes: a test's live models answer from its golden files (DESIGN §7.1).

When a harness made by the fixtures has a live model (`openai`, `anthropic`, a plugin's live
provider), the record mode decides where that model's answers come from, for the whole test:

- `none` (the default): from the test's golden files (`<test>.yaml` for its first run,
  `<test>-2.yaml` for its second, …), each run's answers in order; nothing goes to the network.
  A test without golden files is refused with `LiveModelBlocked` naming the command that
  records them, even when live calls are allowed (`--harness-allow-live`, the `allow_live`
  marker): recording is what `new` and `all` are for.
- `new`: a test with golden files answers from them; one without calls the live model (which
  needs `--harness-allow-live`) and its runs are written.
- `all`: every test calls the live model and its files are rewritten.

Only model answers come from the file: tools, rules and guards run for real. A run that asks
for a turn past its file's end, whose recorded answer calls a tool its task no longer offers,
or a test that makes more runs than it has files, raises
`CassetteDiverged` (a `ReplayDiverged`) out of the run, naming the command that re-records the
test, and the test fails with it even when the test catches it.
"""

from __future__ import annotations

import shlex
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from pytest_harness.errors import ArchiveError, HarnessError, ModelError, ReplayDiverged
from pytest_harness.models.base import ModelRequest, ModelResponse
from pytest_harness.models.live import check_live
from pytest_harness.plugin.golden import golden_key, golden_name
from pytest_harness.plugin.settings import RecordMode, Settings

if TYPE_CHECKING:
    from pytest_harness.models.base import ModelProvider
    from pytest_harness.recording.model import ModelTurn, Recording
    from pytest_harness.runtime.harness import Harness

__all__ = ["Cassette", "CassetteDiverged", "CassetteError", "CassetteProvider"]


class CassetteDiverged(ReplayDiverged):
    """A test's run asked its golden file for a model answer the file does not have."""


class CassetteError(HarnessError):
    """A golden file that cannot answer a test's run: unreadable, or of another task or spec."""


class Cassette:
    """The golden files of one test, read as the model answers of its runs."""

    def __init__(self, nodeid: str, settings: Settings) -> None:
        self.nodeid = nodeid
        self.settings = settings
        folder, base = golden_key(nodeid)
        self.folder = settings.recordings / folder
        self.base = base
        self.diverged: list[str] = []
        """The divergences and bad files met, each said once (the test fails with them)."""
        self._runs: dict[str, int] = {}
        self._answers: dict[str, dict[str, deque[ModelTurn]]] = {}
        self._used: dict[str, int] = {}
        self.playing = self._decide()
        """Whether live models answer from the golden files (else they are called)."""

    def _decide(self) -> bool:
        if self.settings.record is RecordMode.ALL:
            return False
        return self.path(1).is_file()

    def path(self, n: int) -> Path:
        """The golden file of the test's `n`-th run."""
        return self.folder / golden_name(self.base, n)

    def show(self, path: Path) -> str:
        """`path` relative to the rootdir, as messages show it."""
        return self.settings.show(path)

    @property
    def rerecord(self) -> str:
        """The command that re-records this test from the live model."""
        return f"pytest --record-recordings=all --harness-allow-live {shlex.quote(self.nodeid)}"

    @property
    def record_new(self) -> str:
        """The command that records this test's missing golden files from the live model."""
        return f"pytest --record-recordings=new --harness-allow-live {shlex.quote(self.nodeid)}"

    def blocked_hint(self) -> str:
        """What `LiveModelBlocked` says when the test may not call the live model."""
        first = self.show(self.path(1))
        if self.settings.record is RecordMode.NONE:
            return (
                f"{self.nodeid} has no golden file ({first}) to answer from; record it once "
                f"with the live model: {self.record_new}"
            )
        again = self.rerecord if self.settings.record is RecordMode.ALL else self.record_new
        return (
            f"--record-recordings={self.settings.record.value} calls the live model to write "
            f"{first}, which needs --harness-allow-live: {again}"
        )

    def started(self, run_id: str) -> None:
        """A run of the test was created: it answers from the next golden file."""
        if run_id not in self._runs:
            self._runs[run_id] = len(self._runs) + 1

    # -- answering -------------------------------------------------------------------------

    def answer(self, request: ModelRequest, models: frozenset[str], provider: str) -> ModelResponse:
        """The recorded answer to `request`, its run's next turn for its model.

        `models` are the spec's model names; `provider` is the live provider's name.
        """
        n = self._runs.get(request.run_id)
        if n is None:  # a run this test's store did not create (should not happen)
            n = len(self._runs) + 1
            self._runs[request.run_id] = n
        turns = self._turns(request, n, models)
        queue = turns.get(request.model)
        if request.model not in turns and request.turn == 0 and not request.tools:
            # Not a turn of the run: an online eval's judge grading it. Its verdict is not in
            # the golden file's turns, so it is not played back (a grader's failure never
            # changes the run; the replay gate does not re-grade live judges either).
            from pytest_harness.errors import LiveModelBlocked

            raise LiveModelBlocked(
                provider,
                request.model,
                "a live judge is not answered from golden files",
            )
        if not queue:
            used = self._used.get(request.run_id, 0)
            path = self.show(self.path(n))
            self._fail_diverged(
                f"{self.nodeid}: run {n} asked model {request.model!r} for a turn past the end "
                f"of {path} ({used} recorded turn{'s' if used != 1 else ''} used; last "
                f"request: {request.describe()}); the run no longer matches its golden file: "
                f"check the change, then re-record with: {self.rerecord}",
                expected={"file": path, "model_turns": used},
                actual={"model": request.model, "last_message": request.describe()},
            )
        turn = queue.popleft()
        used = self._used[request.run_id] = self._used.get(request.run_id, 0) + 1
        offered = {tool.name for tool in request.tools}
        for call in turn.answer.get("calls") or ():
            name = str(call.get("name"))
            if name not in offered:
                path = self.show(self.path(n))
                self._fail_diverged(
                    f"{self.nodeid}: turn {used} of {path} calls tool {name!r}, which run {n} "
                    f"(task {request.task!r}) no longer offers (tools: "
                    f"{', '.join(sorted(offered)) or 'none'}); the run no longer matches its "
                    f"golden file: check the change, then re-record with: {self.rerecord}",
                    expected={"file": path, "turn": used, "call": name},
                    actual={"tools": sorted(offered)},
                )
        return _response(turn, request)

    def _turns(
        self, request: ModelRequest, n: int, models: frozenset[str]
    ) -> dict[str, deque[ModelTurn]]:
        found = self._answers.get(request.run_id)
        if found is not None:
            return found
        path = self.path(n)
        if not path.is_file():
            have = n - 1
            self._fail_diverged(
                f"{self.nodeid} made run {n} but has {have} golden file{'s' if have != 1 else ''}"
                f" ({self.show(path)} is missing); the test now makes more runs than were "
                f"recorded: check the change, then re-record with: {self.rerecord}",
                expected={"runs": have},
                actual={"run": n, "task": request.task, "input": request.input},
            )
        recording = self._read(path)
        if recording.task != request.task:
            self._fail_error(
                f"{self.show(path)} was recorded for task {recording.task!r}, but run {n} of "
                f"{self.nodeid} is task {request.task!r} (a golden file of another test or "
                f"spec?); re-record it with: {self.rerecord}"
            )
        unknown = sorted({t.model for t in recording.model_turns} - models)
        if unknown:
            self._fail_error(
                f"{self.show(path)} holds answers of model {', '.join(map(repr, unknown))}, "
                f"which the spec does not define (models: {', '.join(sorted(models))}); it "
                f"belongs to another spec: re-record it with: {self.rerecord}"
            )
        queues: dict[str, deque[ModelTurn]] = {}
        for turn in recording.model_turns:
            queues.setdefault(turn.model, deque()).append(turn)
        self._answers[request.run_id] = queues
        return queues

    def _read(self, path: Path) -> Recording:
        from pytest_harness.recording.golden import recording_fields
        from pytest_harness.recording.model import Recording

        try:
            return Recording(**recording_fields(path))
        except ArchiveError as exc:
            self._fail_error(
                f"cannot answer {self.nodeid} from its golden file: {exc}; fix the file, or "
                f"delete it and record it again with: {self.record_new}"
            )

    def _fail_diverged(self, reason: str, *, expected: Any, actual: Any) -> NoReturn:
        self._note(reason)
        raise CassetteDiverged(reason, expected=expected, actual=actual)

    def _fail_error(self, message: str) -> NoReturn:
        self._note(message)
        raise CassetteError(message)

    def _note(self, message: str) -> None:
        if message not in self.diverged:
            self.diverged.append(message)

    # -- wiring ----------------------------------------------------------------------------

    def attach(self, harness: Harness) -> None:
        """Put this cassette in front of every live model of `harness`."""
        plans = harness.plans
        models = frozenset(harness.spec.document.models)
        for name in harness.spec.document.models:
            provider = plans.provider(name)
            if getattr(provider, "live", False):
                plans.replace_provider(name, CassetteProvider(self, provider, models))


def _response(turn: ModelTurn, request: ModelRequest) -> ModelResponse:
    """A recorded turn as the answer (or the recorded error), as a replay plays it."""
    from pytest_harness.replay.tape import recorded_answer

    return recorded_answer(turn.answer, request)


class CassetteProvider:
    """A live model's provider, answering from the test's golden files or calling the model."""

    def __init__(self, cassette: Cassette, original: ModelProvider, models: frozenset[str]) -> None:
        self.cassette = cassette
        self.original = original
        self.models = models
        self.name = original.name
        self.live = not cassette.playing
        """Live only when the test calls the model (not when it plays its golden files)."""
        self.refuses_live = self.live and cassette.settings.record is RecordMode.NONE
        """Record mode `none` never goes to the network, even with live calls allowed."""
        self.blocked_hint = cassette.blocked_hint()
        """What `LiveModelBlocked` says when the test may not call the live model."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """The golden file's next answer, or the live model's."""
        if self.cassette.playing:
            return self.cassette.answer(request, self.models, self.name)
        check_live(self, request.model)  # the run loop checks this first; a direct call too
        return await self.original.complete(request)

    def retry_delay(self, attempt: int, error: ModelError | None = None) -> float:
        """Recorded errors are retried at once; a live model waits as it says."""
        if self.cassette.playing:
            return 0.0
        return self.original.retry_delay(attempt, error)
