"""`pytest-harness worker`: a long-running process that recovers and drives runs (DESIGN §8).

A worker loads the spec, opens its store, and loops: it claims a run that needs a driver
(`Harness.recover_next`: a run left `running` by a worker that stopped, whose lease expired,
or a run whose approvals were all answered but that nobody resumed) and drives it until it
ends or waits again. With nothing to claim it looks again every `idle` seconds. Claims are
atomic in the store (`FOR UPDATE SKIP LOCKED` on Postgres), so any number of workers, on any
number of hosts, split the runs of one database and no run is driven by two of them.

SIGTERM (or SIGINT) stops it cleanly: no new run is claimed, each run being driven stops at
its next clean boundary (the model call or tool in flight finishes and its result is
committed), its lease is released so another worker can take it at once, and the process
exits 0. A second signal meanwhile stops it at once (`Worker.stop_now`: the drives are
cancelled, each releases its lease) and the process exits 1. A SIGKILLed worker leaves its
runs to the others once their leases expire.

Every event is one JSON object per line on stderr (`worker_started`, `run_claimed`,
`run_done`, `run_released`, `run_error`, `worker_stopping`, `worker_stopping_now`,
`worker_stopped`), with `ts`, `worker` (the lease owner id) and, per run, `run_id`, `task` and
`status`.

A run whose drive fails (`run_error`, with `retry_in`) is not claimed again for a lease, then
twice that after each further failure (at most `MAX_HOLD_BACK` seconds), so the runs after it
are driven meanwhile: claims take the oldest run first, and a run that fails every time would
otherwise be the only one this worker ever claims. A store that cannot be read at all makes
the worker wait `idle` seconds before asking again.

It works on every store that several processes can share: sqlite (one host) and postgres.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from pytest_harness.errors import HarnessError

if TYPE_CHECKING:
    from pytest_harness.runtime.harness import Harness
    from pytest_harness.store.base import RunRecord

__all__ = ["MAX_HOLD_BACK", "Worker", "WorkerStats", "add_worker_command", "json_log", "run_worker"]

Log = Callable[[str, Mapping[str, Any]], None]


def json_log(stream: TextIO | None = None) -> Log:
    """A log that writes each event as one JSON line (default: to stderr) and flushes."""

    def log(event: str, fields: Mapping[str, Any]) -> None:
        out = stream if stream is not None else sys.stderr
        line = json.dumps(
            {"ts": round(time.time(), 3), "event": event, **fields},
            ensure_ascii=False,
            default=str,
        )
        out.write(line + "\n")
        out.flush()

    return log


MAX_HOLD_BACK = 600.0
"""The longest a worker waits before it claims again a run whose drives keep failing."""


@dataclass(slots=True)
class WorkerStats:
    """What a worker did: runs claimed, how they left it, errors."""

    claimed: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    """How many driven runs ended or suspended with each status."""
    released: int = 0
    """Runs given back at a boundary because the worker was stopping."""
    errors: int = 0


class Worker:
    """Claims and drives runs of one harness until `stop()` (or SIGTERM in `serve`).

    `concurrency` runs are driven at once (each its own loop); `idle` is how long to wait
    before looking again when there is nothing to claim. With `exit_when_idle`, a loop ends
    when it finds nothing to claim (for batch jobs and benchmarks).
    """

    def __init__(
        self,
        harness: Harness,
        *,
        concurrency: int = 1,
        idle: float = 1.0,
        exit_when_idle: bool = False,
        log: Log | None = None,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an integer of 1 or more, got {concurrency!r}")
        if not idle > 0:
            raise ValueError(f"idle must be a positive number of seconds, got {idle!r}")
        if harness.store.kind == "memory":
            raise harness.spec.error(
                "a worker drives runs that other processes started, so it needs a store they "
                "share: use sqlite or postgres, not memory",
                ("state", "use"),
            )
        self.harness = harness
        self.concurrency = concurrency
        self.idle = float(idle)
        self.exit_when_idle = exit_when_idle
        self.stats = WorkerStats()
        self._log = log if log is not None else json_log()
        self._stop = asyncio.Event()
        self._loops: asyncio.Future[list[None]] | None = None
        self.forced = False
        """Whether `stop_now()` cancelled the drives (a second signal)."""
        self._held: dict[str, float] = {}
        """Run id -> until when (monotonic) it is not claimed: its last drive failed."""
        self._failures: dict[str, int] = {}
        """Run id -> how many drives of it failed in a row."""

    @property
    def held_back(self) -> set[str]:
        """The runs not claimed now because their last drive here failed (`run_error`)."""
        return self._held_back()

    @property
    def stopping(self) -> bool:
        """Whether `stop()` was called."""
        return self._stop.is_set()

    def stop(self) -> None:
        """Claim nothing more; runs being driven stop at their next clean boundary."""
        if self._stop.is_set():
            return
        self._stop.set()
        self.harness.stop_driving()
        self._emit("worker_stopping", {})

    def stop_now(self) -> None:
        """Stop at once: `stop()`, and cancel the drives instead of waiting for a boundary.

        Each cancelled drive releases its run's lease; the run stays `running` from its last
        commit, and whoever takes it next decides about a call that was in flight by its
        replay policy (a `manual` one becomes uncertain). What a second SIGTERM or Ctrl-C does.
        """
        self.stop()
        loops = self._loops
        if self.forced or loops is None or loops.done():
            return
        self.forced = True
        self._emit("worker_stopping_now", {})
        loops.cancel()

    async def serve(self) -> WorkerStats:
        """Run until `stop()`, or SIGTERM/SIGINT (handled here); return what was done.

        The first signal is `stop()`; another one while runs finish is `stop_now()`.
        """
        loop = asyncio.get_running_loop()
        handled: list[signal.Signals] = []
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(signum, self._signalled)
            except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover
                continue  # not the main thread, or not supported here
            handled.append(signum)
        try:
            return await self.run()
        finally:
            for signum in handled:
                loop.remove_signal_handler(signum)

    def _signalled(self) -> None:
        if self.stopping:
            self.stop_now()
        else:
            self.stop()

    async def run(self) -> WorkerStats:
        """The worker's loops, without installing signal handlers."""
        harness = self.harness
        await harness.store.open()
        self._emit(
            "worker_started",
            {
                "spec": str(harness.spec.path),
                "store": harness.store.kind,
                "concurrency": self.concurrency,
                "lease": harness.spec.document.state.lease,
            },
        )
        self._loops = asyncio.gather(*(self._loop() for _ in range(self.concurrency)))
        try:
            await self._loops
        except asyncio.CancelledError:
            if not self.forced:
                raise  # cancelled from outside, not by stop_now()
        stats = self.stats
        self._emit(
            "worker_stopped",
            {
                "claimed": stats.claimed,
                "statuses": stats.statuses,
                "released": stats.released,
                "errors": stats.errors,
                "forced": self.forced,
            },
        )
        return stats

    async def _loop(self) -> None:
        from pytest_harness.runtime.engine import DriveStopped

        while not self._stop.is_set():
            claimed: list[RunRecord] = []
            started = time.monotonic()
            try:
                result = await self.harness.recover_next(
                    skip=self._held_back(), on_claim=self._on_claim(claimed)
                )
            except DriveStopped as stopped:
                self.stats.released += 1
                self._emit("run_released", {"run_id": stopped.run_id, "status": "running"})
                continue
            except HarnessError as exc:
                self.stats.errors += 1
                fields: dict[str, Any] = {"error": type(exc).__name__, "message": str(exc)}
                if not claimed:  # the store itself failed: wait before asking it again
                    self._emit("run_error", fields)
                    await self._pause()
                    continue
                run = claimed[0]
                wait = self._hold_back(run.run_id)
                where = {"run_id": run.run_id, "task": run.task}
                self._emit("run_error", {**where, **fields, "retry_in": wait})
                continue
            if result is None:
                if self.exit_when_idle:
                    return
                await self._pause()
                continue
            self._failures.pop(result.run_id, None)
            self._held.pop(result.run_id, None)
            status = result.status.value
            self.stats.statuses[status] = self.stats.statuses.get(status, 0) + 1
            self._emit(
                "run_done",
                {
                    "run_id": result.run_id,
                    "task": result.task,
                    "status": status,
                    "seconds": round(time.monotonic() - started, 3),
                },
            )

    def _held_back(self) -> set[str]:
        """The runs whose last drive failed, until their wait is over (`_hold_back`).

        A run quiet for `MAX_HOLD_BACK` seconds after its wait (driven by another worker,
        cancelled, or mended) is forgotten, so the failure counts stay bounded.
        """
        now = time.monotonic()
        for run_id in [r for r, until in self._held.items() if until + MAX_HOLD_BACK <= now]:
            del self._held[run_id]
            self._failures.pop(run_id, None)
        return {run_id for run_id, until in self._held.items() if until > now}

    def _hold_back(self, run_id: str) -> float:
        """Skip a run whose drive failed for a while, longer each time it fails again.

        Claims take the oldest run first: a run whose every drive fails (a value its store
        refuses, a journal that cannot be written) would be claimed again at once, and the
        runs after it would wait forever. It waits a lease, doubled at each failure up to
        `MAX_HOLD_BACK` seconds, while the worker drives the others; then it is tried again
        (what failed may have been transient). Seconds it waits.
        """
        failures = self._failures.get(run_id, 0) + 1
        self._failures[run_id] = failures
        lease = self.harness.spec.document.state.lease
        wait = min(MAX_HOLD_BACK, float(lease) * 2.0 ** min(failures - 1, 30))
        self._held[run_id] = time.monotonic() + wait
        return wait

    async def _pause(self) -> None:
        """Wait `idle` seconds, or less if the worker is stopped meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), self.idle)

    def _emit(self, event: str, fields: Mapping[str, Any]) -> None:
        self._log(event, {"worker": self.harness.owner, **fields})

    def _on_claim(self, into: list[RunRecord]) -> Callable[[RunRecord], None]:
        """The `on_claim` of `recover_next`: keep the claimed run in `into` and log it."""

        def claimed(record: RunRecord) -> None:
            into.append(record)
            self._claimed(record)

        return claimed

    def _claimed(self, record: RunRecord) -> None:
        self.stats.claimed += 1
        self._emit(
            "run_claimed",
            {
                "run_id": record.run_id,
                "task": record.task,
                "status": record.status,
                "lease_token": record.lease_token,
            },
        )


# -- the command --------------------------------------------------------------------------------


def add_worker_command(
    parser: argparse.ArgumentParser, spec_and_env: Callable[[argparse.ArgumentParser], None]
) -> None:
    """Add the arguments of `pytest-harness worker` to its parser (`cli_parser.py` wires it in)."""
    spec_and_env(parser)
    parser.add_argument(
        "--concurrency", metavar="N", type=_positive_int, default=1, help="runs driven at once"
    )
    parser.add_argument(
        "--idle",
        metavar="SECONDS",
        type=_positive_float,
        default=1.0,
        help="how long to wait before looking again when there is nothing to do (default 1)",
    )
    parser.add_argument(
        "--exit-when-idle", action="store_true", help="exit when there is nothing to claim"
    )
    parser.add_argument(
        "--accept",
        metavar="DIGEST",
        action="append",
        default=[],
        help="execution.use: temporal: also drive runs started for this spec digest (repeatable)",
    )


async def run_worker(harness: Harness, args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT; the exit code.

    0, or 1 when a second signal forced it or, with `--exit-when-idle`, when runs whose drive
    failed were left held back (`run_error`): the batch did not drive them.
    """
    if harness.spec.document.execution.use == "temporal":
        from pytest_harness.temporal.worker import serve

        return await serve(harness, accept=args.accept)
    worker = Worker(
        harness,
        concurrency=args.concurrency,
        idle=args.idle,
        exit_when_idle=args.exit_when_idle,
    )
    await worker.serve()
    if worker.forced or (args.exit_when_idle and worker.held_back):
        return 1
    return 0


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of 1 or more, got {value!r}")
    return number


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = 0.0
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value!r}")
    return number
