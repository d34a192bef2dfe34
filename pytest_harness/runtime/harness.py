"""`Harness`: the public async API over a spec, its tools and models, and a store.

Durable runs (DESIGN §4, §5): every run is driven under a lease with a fencing token, so at most
one worker drives it; a worker that stops leaves the run `running` with a lease that expires,
and `recover()` (or `resume(run_id)`) in any process continues it from its last committed
boundary. `pause`/`cancel` write a control request that the driving worker reads at its next
boundary (or act at once, under the lease, when nobody drives the run). `resolve` settles a
tool call a crash left uncertain. `stream` follows a run's event log by cursor.

`Harness` is put together from parts: `runtime.harness_base` (state, lifecycle, creating and
driving runs), `runtime.harness_control` (approvals, resolutions, pause, cancel, resume) and
`runtime.approval_checks` (the checks on those answers); this module holds the run, stream,
recovery, recording and eval methods, and `RunHandle`. `pytest_harness.loading.load()` makes
one (it sits above the runtime: it also picks a store, online evals and Temporal execution).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_harness.errors import HarnessError
from pytest_harness.principal import Principal
from pytest_harness.runtime.arguments import known_run, storable
from pytest_harness.runtime.events import follow
from pytest_harness.runtime.harness_base import EndedRuns
from pytest_harness.runtime.harness_control import HarnessControl
from pytest_harness.runtime.results import RunResult, RunStatus, RunSummary
from pytest_harness.store.base import Event, RunRecord, Sample, check_limit, parse_cursor

if TYPE_CHECKING:
    from datetime import datetime, timedelta

    from pytest_harness.archive.export import ExportPolicy
    from pytest_harness.recording.model import Recording
    from pytest_harness.replay.report import ReplayReport

__all__ = ["EndedRuns", "Harness", "RunHandle"]


class RunHandle:
    """A run started with `Harness.submit()`: its ids now, its events as they come, its result."""

    def __init__(
        self, run_id: str, session_id: str, task: asyncio.Task[RunResult], harness: Harness
    ) -> None:
        self.run_id = run_id
        self.session_id = session_id
        self._task = task
        self._harness = harness

    def events(self, *, after: str = "0") -> AsyncIterator[Event]:
        """The run's events after the cursor `after`, then live ones until it ends or waits.

        The same as `Harness.stream(handle.run_id, after=after)`; see there.
        """
        return self._harness.stream(self.run_id, after=after)

    async def result(self) -> RunResult:
        """Wait until the run ends or suspends and return its result."""
        return await asyncio.shield(self._task)

    def done(self) -> bool:
        """Whether the driving of the run has stopped (ended or suspended)."""
        return self._task.done()


class Harness(HarnessControl):
    """Runs the tasks of one spec against one store. Every method is async.

    Create it with `pytest_harness.load(...)`; close it with `async with` or `aclose()`.
    """

    # -- runs ----------------------------------------------------------------------------

    async def run(
        self,
        task: str,
        input: str,
        *,
        principal: Principal | str,
        tenant: str | None = None,
        session_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> RunResult:
        """Run `task` on `input` until it ends or suspends, and return its result."""
        record, created, history = await self._create(
            task, input, principal, tenant, session_id, labels, idempotency_key
        )
        if not created:
            return await self.result(record.run_id)
        return await self._drive(record, created=True, history=history)

    async def submit(
        self,
        task: str,
        input: str,
        *,
        principal: Principal | str,
        tenant: str | None = None,
        session_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> RunHandle:
        """Start a run and return at once with a handle to it."""
        record, created, history = await self._create(
            task, input, principal, tenant, session_id, labels, idempotency_key
        )
        coro = (
            self._drive(record, created=True, history=history)
            if created
            else self.result(record.run_id)
        )
        job = asyncio.ensure_future(coro)
        self._background.add(job)
        job.add_done_callback(self._background.discard)
        return RunHandle(record.run_id, record.session_id, job, self)

    async def runs(
        self,
        *,
        status: RunStatus | str | None = None,
        task: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
    ) -> list[RunSummary]:
        """Stored runs, newest first."""
        await self._open()
        status_value = RunStatus.parse(status).value if status is not None else None
        if not (storable(task) and storable(tenant)):
            return []  # no stored run has text no store can hold
        records = await self.store.list_runs(
            status=status_value, task=task, tenant=tenant, limit=limit
        )
        return [
            RunSummary(
                run_id=r.run_id,
                session_id=r.session_id,
                task=r.task,
                status=RunStatus(r.status),
                tenant=r.tenant,
                principal=str(r.principal.get("id")),
                created_at=r.created_at,
                updated_at=r.updated_at,
            )
            for r in records
        ]

    async def recover(self) -> list[RunResult]:
        """Resume every interrupted run whose lease expired (their worker stopped).

        For a restarted worker: runs of this spec's tasks left `running` with no live lease,
        and runs whose approvals were all answered (the last a lease ago or more) but that
        nobody resumed because the answering process stopped in between, are claimed one at
        a time (`Store.claim_run`: one atomic write, `FOR UPDATE SKIP
        LOCKED` on Postgres) and each is continued from its last committed boundary. Returns
        the results of the runs this harness drove, and only those: over several workers
        recovering at once, each run appears in exactly one of their results.

        A run whose drive fails (a `HarnessError`: its store refuses a write, its journal
        cannot be written) does not stop the others: each is tried once, and once every other
        run is driven, the first such error is raised, with a note naming every run that
        failed and how many were recovered. The failed runs stay `running` for a later
        `recover()`. `DriveStopped` (after `stop_driving()`) is no `HarnessError`: raised at once.
        """
        results: list[RunResult] = []
        tried: set[str] = set()
        failed: dict[str, HarnessError] = {}
        claimed: list[str] = []

        def note(record: RunRecord) -> None:
            claimed.append(record.run_id)

        while True:
            claimed.clear()
            try:
                result = await self.recover_next(skip=tried, on_claim=note)
            except HarnessError as exc:
                if not claimed:  # the store itself: nothing was claimed
                    _note_failed(exc, failed, results)
                    raise
                tried.add(claimed[0])
                failed[claimed[0]] = exc
                continue
            except BaseException as exc:  # DriveStopped, a cancellation: at once
                _note_failed(exc, failed, results)
                raise
            if result is None:
                break
            tried.add(result.run_id)
            results.append(result)
        if failed:
            first = next(iter(failed.values()))
            _note_failed(first, failed, results)
            raise first
        return results

    async def recover_next(
        self,
        *,
        skip: Collection[str] = (),
        on_claim: Callable[[RunRecord], None] | None = None,
    ) -> RunResult | None:
        """Claim one interrupted run (not in `skip`), drive it, and return its result.

        None when there is nothing to claim. `on_claim` is called with the claimed record
        before the drive starts (the worker logs it). The building block of `recover()` and
        of `pytest-harness worker`.
        """
        await self._open()
        lease = self.spec.document.state.lease
        claim = await self.store.claim_run(
            self.owner,
            lease,
            tasks=list(self._tasks if self._tasks is not None else self.plans.tasks),
            exclude={*self._driving, *(run_id for run_id in skip if storable(run_id))},
            grace=lease,
        )
        if claim is None:
            return None
        record, previous = claim
        if on_claim is not None:
            on_claim(record)
        return await self._drive(record, claimed=True, previous_expiry=previous)

    def stop_driving(self) -> None:
        """Make every run this harness drives stop at its next clean boundary (shutdown).

        A boundary is clean where everything done so far is committed or recomputable: before
        a model call, after a tool's result commit. The drive then raises `DriveStopped`,
        its lease is released, and the run stays `running` for another worker to claim at
        once. Used by `pytest-harness worker` on SIGTERM; irreversible for this harness.
        """
        self._stopping.set()

    def stream(self, run_id: str, *, after: str = "0") -> AsyncIterator[Event]:
        """The run's events after the cursor `after`, then live ones until it ends or waits.

        Use it as `async for event in harness.stream(run_id, after=cursor)`. Stored events come
        in cursor order, each once; save `event.cursor` and pass it back to reconnect without
        gaps or repeats. Events of a run this harness drives arrive at once; those of a run
        driven by another process within half a second. `text_delta` and `attempt_reset`
        events of this process's runs arrive provisionally first, with `cursor == ""`, and are
        not repeated when they commit. Breaking out of the loop does not affect the run. A run
        left `running` by a worker that died is followed until another worker recovers it.
        `ValueError` for a malformed cursor; `UnknownRun` (on first iteration) for no such run.
        """
        parse_cursor(after)
        return follow(self.store, self._hub, run_id, after, ready=self._open)

    # -- recordings ----------------------------------------------------------------------

    async def recording(self, run_id: str) -> Recording:
        """The recording of a recorded run, from its journal where the run executes.

        The store's journal; on Temporal, the journal the run's workflow holds.
        `RecordingError` when the run was not recorded.
        """
        from pytest_harness.recording.model import Recording

        known_run(run_id)
        await self._open()
        return await Recording.from_store(self.store, run_id)

    async def replay(
        self, source: str | os.PathLike[str] | Recording, *, tools: str | None = None
    ) -> ReplayReport:
        """Replay a stored run (by id), a `Recording`, or a recording file against this spec.

        Model answers, tool results and approvals all come from the recording: nothing calls
        out and no tool runs, but today's tool contracts apply (arguments today's schema
        rejects get `invalid_arguments`; a tool no longer in the task, `unknown`). With
        `tools="safe"`, tools whose replay policy is `safe` really run and a result that
        differs from the recorded one is a changed `tool` decision. The report says whether
        the status, output or decisions changed, how many model requests differ and in which
        part, and whether the replay diverged (asked for something the recording lacks).
        """
        from pytest_harness.replay.replayer import replay

        await self._open()
        return await replay(self, source, tools=tools)

    async def export(
        self,
        run_id: str,
        dest: str | os.PathLike[str],
        *,
        policy: ExportPolicy | None = None,
    ) -> Path:
        """Write a recorded run as a `.hx` archive or a `.yaml` golden recording, by suffix.

        A `.hx` archive (DESIGN §12) follows `policy` (default `ExportPolicy()`: metadata
        only); a `.yaml` recording is always redacted and holds no request payloads or
        artifacts. An existing `dest` is refused with `FileExistsError`; `RecordingError` when
        the run was not recorded, `ArchiveError` for another suffix or a limit the archive would
        exceed.
        """
        from pytest_harness.errors import ArchiveError

        path = Path(dest)
        await self._open()
        if path.suffix == ".hx":
            from pytest_harness.archive.export import export_run

            known_run(run_id)
            record = await self.store.get_run(run_id)
            return await export_run(self.store, record, path, policy=policy, spec=self.spec)
        if path.suffix not in (".yaml", ".yml"):
            raise ArchiveError(
                f"cannot export to {path}: the destination must end in .hx (an incident "
                "archive) or .yaml (a golden recording)"
            )
        await self._open()
        recording = await self.recording(run_id)
        if self.evals is not None:  # a recording keeps the grades of the online evals
            from pytest_harness.evals.replay import with_grades

            recording = await with_grades(self, recording)
        return recording.save(path)

    # -- online evals --------------------------------------------------------------------

    async def flush_evals(self) -> None:
        """Wait until the grades of the runs ended so far are stored (DESIGN §15).

        Grading runs in the background, so a run's samples may not be stored when `run()`
        returns; `aclose()` waits for them too.
        """
        if self.evals is not None:
            await self.evals.flush()

    async def samples(
        self,
        *,
        task: str | None = None,
        grader: str | None = None,
        since: datetime | timedelta | float | None = None,
        limit: int | None = 100,
    ) -> list[Sample]:
        """Online eval samples in the store, newest first (DESIGN §15).

        `since` is a moment (a `datetime`, or seconds since the epoch) or a `timedelta` (that
        long ago); `limit=None` returns every match.
        """
        await self._open()
        moment = _moment(since)
        if not (storable(task) and storable(grader)):
            check_limit(limit)
            return []  # no stored sample has text no store can hold
        return await self.store.samples(task=task, grader=grader, since=moment, limit=limit)


def _moment(since: datetime | timedelta | float | None) -> float | None:
    """Seconds since the epoch for `samples(since=...)`."""
    if since is None:
        return None
    from datetime import datetime, timedelta

    if isinstance(since, timedelta):
        return time.time() - since.total_seconds()
    if isinstance(since, datetime):
        return since.timestamp()
    if isinstance(since, int | float) and not isinstance(since, bool):
        return float(since)
    raise TypeError(
        f"since must be a datetime, a timedelta or a number, not {type(since).__name__}"
    )


def _note_failed(
    exc: BaseException, failed: Mapping[str, HarnessError], results: list[RunResult]
) -> None:
    """Say on `exc` which runs `recover()` could not drive so far, and how many it did."""
    if failed:
        exc.add_note(
            f"recover(): {len(failed)} run(s) could not be driven and stay running "
            f"({', '.join(failed)}); {len(results)} other run(s) were recovered"
        )
