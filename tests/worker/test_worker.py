"""`pytest-harness worker` with real processes: N workers split the runs of one store, a
SIGKILLed worker's runs are recovered by another, SIGTERM stops at a boundary, a SIGSTOPped
worker past its lease cannot write after SIGCONT. On sqlite and postgres."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import pytest_harness as ph
from pytest_harness.runtime.state import RunState
from pytest_harness.store.base import EventDraft, NewRun
from pytest_harness.worker import Worker

pytestmark = pytest.mark.asyncio

TOOLS = '''
import os, time
import pytest_harness as ph
from pytest_harness.models.base import ModelResponse, ProposedCall, TokenUsage

LEDGER = os.path.join(os.path.dirname(__file__), "ledger.txt")
STEPS = int(os.environ.get("WORKER_TEST_STEPS", "2"))


def _write(line):
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\\n").encode())
    finally:
        os.close(fd)


def step(n: int, seconds: float) -> dict:
    """One unit of work (idempotent: the service keys it by execution key)."""
    ctx = ph.current_tool_context()
    _write(f"start {ctx.run_id} {ctx.execution_key} {ctx.attempt} {os.getpid()}")
    time.sleep(seconds)
    _write(f"done {ctx.run_id} {ctx.execution_key} {ctx.attempt} {os.getpid()}")
    return {"n": n}


def model(request):
    done = sum(1 for m in request.messages if m["role"] == "tool")
    if done >= STEPS:
        return ModelResponse(text=f"finished {request.input}", usage=TokenUsage(5, 2))
    seconds = float(request.input.split()[1])
    call = ProposedCall(f"c{done}", "step", {"n": done, "seconds": seconds})
    return ModelResponse(calls=(call,), usage=TokenUsage(5, 2))
'''

SPEC = """
version: 1
name: workers
models:
  default: {{use: function, call: "{mod}:model", retries: 0}}
tools:
  step: {{call: "{mod}:step", replay: idempotent}}
tasks:
  t: {{prompt: p, tools: [step]}}
state: {{{state}, lease: {lease}}}
"""


class WorkerApp:
    """A temp app, its store settings, and the worker processes started on it."""

    def __init__(self, root: Path, state: str, env: dict[str, str]) -> None:
        self.root = root
        self.module = f"wtools_{uuid.uuid4().hex[:10]}"
        (root / f"{self.module}.py").write_text(TOOLS, encoding="utf-8")
        self.state = state
        self.env = env
        self.spec = root / "harness.yaml"
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.write(lease="1s")

    def write(self, *, lease: str) -> None:
        self.spec.write_text(
            SPEC.format(mod=self.module, state=self.state, lease=lease), encoding="utf-8"
        )

    def start(self, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.root / f"worker-{len(self.procs)}.log"
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                [sys.executable, "-m", "pytest_harness", "worker", str(self.spec), *extra],
                stdout=subprocess.DEVNULL,
                stderr=sink,
                env=self.env,
            )
        self.procs.append((proc, log))
        return proc, log

    async def seed(self, inputs: list[str]) -> list[str]:
        """Create runs no process holds (their creator stopped before driving them)."""
        ids = []
        async with ph.load(self.spec) as harness:
            for text in inputs:
                run_id = f"run_{uuid.uuid4().hex}"
                await harness.store.create_run(
                    NewRun(
                        run_id=run_id,
                        session_id=f"ses_{uuid.uuid4().hex}",
                        task="t",
                        tenant=None,
                        principal={"id": "ann", "roles": [], "tenant": None},
                        input=text,
                        labels={},
                        idempotency_key=None,
                        status="running",
                        state=RunState().to_dict(),
                        events=[EventDraft("run_started", {"task": "t"})],
                    )
                )
                ids.append(run_id)
        return ids

    async def wait_all_ended(self, run_ids: list[str], timeout: float = 60) -> list[ph.RunResult]:
        deadline = time.monotonic() + timeout
        async with ph.load(self.spec) as harness:
            while True:
                results = [await harness.result(run_id) for run_id in run_ids]
                if all(r.status.ended for r in results):
                    return results
                if time.monotonic() > deadline:
                    pending = [r.run_id for r in results if not r.status.ended]
                    raise AssertionError(f"runs still not ended after {timeout}s: {pending}")
                await asyncio.sleep(0.1)

    def ledger(self) -> list[list[str]]:
        path = self.root / "ledger.txt"
        if not path.exists():
            return []
        return [line.split() for line in path.read_text().splitlines()]

    def stop_all(self) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def events_of(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


async def wait_for_line(log: Path, predicate: Any, timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists():
            for event in events_of(log):
                if predicate(event):
                    return event
        await asyncio.sleep(0.02)
    raise AssertionError(f"no such line in {log} after {timeout}s:\n{log.read_text()}")


@pytest.fixture(params=["sqlite", "postgres"])
def worker_app(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Any:
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    if request.param == "postgres":
        env["WORKER_TEST_DSN"] = request.getfixturevalue("pg_dsn")
        schema = request.getfixturevalue("pg_schema")
        state = f"use: postgres, dsn_env: WORKER_TEST_DSN, schema: {schema}"
        monkeypatch.setenv("WORKER_TEST_DSN", env["WORKER_TEST_DSN"])
    else:
        state = "use: sqlite, path: state.db"
    made = WorkerApp(tmp_path, state, env)
    yield made
    made.stop_all()
    sys.modules.pop(made.module, None)


@pytest.mark.slow
async def test_workers_split_the_runs_and_none_is_driven_twice(worker_app: WorkerApp) -> None:
    app = worker_app
    run_ids = await app.seed([f"job 0.05 {i}" for i in range(24)])
    started = time.monotonic()
    for _ in range(3):
        app.start("--idle", "0.1", "--exit-when-idle")
    for proc, log in app.procs:
        assert proc.wait(timeout=120) == 0, log.read_text()
    elapsed = time.monotonic() - started
    results = await app.wait_all_ended(run_ids, timeout=5)
    assert all(r.ok for r in results), [(r.run_id, r.status, r.error) for r in results]
    claims: Counter[str] = Counter()
    per_worker = []
    for _, log in app.procs:
        claimed = [e["run_id"] for e in events_of(log) if e["event"] == "run_claimed"]
        done = [e["run_id"] for e in events_of(log) if e["event"] == "run_done"]
        assert sorted(claimed) == sorted(done)
        claims.update(claimed)
        per_worker.append(len(claimed))
    assert sorted(claims) == sorted(run_ids) and set(claims.values()) == {1}, claims
    assert sum(1 for n in per_worker if n) >= 2, per_worker  # the work was split
    # Every tool call ran exactly once: no run was driven by two workers.
    starts = Counter(entry[2] for entry in app.ledger() if entry[0] == "start")
    assert len(starts) == 48 and set(starts.values()) == {1}
    print(f"\n24 runs, 3 workers: {per_worker} in {elapsed:.1f}s")


@pytest.mark.slow
async def test_a_killed_workers_runs_are_recovered_by_another(worker_app: WorkerApp) -> None:
    app = worker_app
    run_ids = await app.seed([f"job 0.3 {i}" for i in range(6)])
    victim, victim_log = app.start("--idle", "0.1")
    claimed = await wait_for_line(victim_log, lambda e: e["event"] == "run_claimed")
    await asyncio.sleep(0.4)  # inside its first tool call
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    survivor, survivor_log = app.start("--idle", "0.1")
    results = await app.wait_all_ended(run_ids, timeout=120)
    survivor.send_signal(signal.SIGTERM)
    logs = f"victim:\n{victim_log.read_text()}\nsurvivor:\n{survivor_log.read_text()}"
    assert survivor.wait(timeout=60) == 0, logs
    assert all(r.ok and len(r.trace.tool_calls("step")) == 2 for r in results), logs
    taken = [e["run_id"] for e in events_of(survivor_log) if e["event"] == "run_claimed"]
    assert claimed["run_id"] in taken, logs  # the victim's run was recovered by the survivor
    ledger = app.ledger()
    # No lost result: each of the 12 calls has a finished invocation. A call the kill
    # interrupted (its victim's attempt never finished) ran again with the same execution
    # key and the next attempt; no other call ran twice. (An attempt the victim committed as
    # dispatched may have died before the tool's first line: the ledger then starts at 2.)
    keys = {entry[2] for entry in ledger}
    assert len(keys) == 12, (ledger, logs)
    for key in keys:
        starts = [e for e in ledger if e[0] == "start" and e[2] == key]
        attempts = [int(e[3]) for e in starts]
        assert attempts == sorted(set(attempts)) and attempts[-1] <= 2, (ledger, logs)
        for earlier in starts[:-1]:
            assert earlier[4] == str(victim.pid), (ledger, logs)  # only the victim's repeated
        assert any(e[0] == "done" and e[2] == key for e in ledger)
    assert events_of(survivor_log)[-1]["event"] == "worker_stopped"


@pytest.mark.slow
async def test_sigterm_stops_at_the_next_boundary_and_releases_the_lease(
    worker_app: WorkerApp,
) -> None:
    app = worker_app
    app.write(lease="30s")  # only a released lease lets the next worker in at once
    [run_id] = await app.seed(["job 0.8 slow"])
    proc, log = app.start("--idle", "0.1")
    await wait_for_line(log, lambda e: e["event"] == "run_claimed")
    deadline = time.monotonic() + 20
    while not any(e[0] == "start" for e in app.ledger()):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, log.read_text()
    kinds = [e["event"] for e in events_of(log)]
    assert kinds[-3:] == ["worker_stopping", "run_released", "worker_stopped"], kinds
    ledger = app.ledger()
    assert [e[0] for e in ledger] == ["start", "done"]  # the tool in flight finished
    async with ph.load(app.spec) as harness:
        record = await harness.store.get_run(run_id)
        assert (record.status, record.lease_owner) == ("running", None)
        calls = record.state["calls"]
        assert [c["status"] for c in calls] == ["done"]  # its result was committed
    second, second_log = app.start("--idle", "0.1", "--exit-when-idle")
    assert second.wait(timeout=60) == 0, second_log.read_text()
    [result] = await app.wait_all_ended([run_id])
    assert result.ok
    first_key = ledger[0][2]
    assert [e[2] for e in app.ledger() if e[0] == "start"].count(first_key) == 1


@pytest.mark.slow
async def test_a_second_signal_stops_at_once_though_a_tool_blocks(worker_app: WorkerApp) -> None:
    app = worker_app
    app.write(lease="30s")  # only a released lease would let the next worker in at once
    [run_id] = await app.seed(["job 3600 stuck"])  # its tool blocks for an hour
    proc, log = app.start("--idle", "0.1")
    deadline = time.monotonic() + 60
    while not any(e[0] == "start" for e in app.ledger()):
        assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
        await asyncio.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    await wait_for_line(log, lambda e: e["event"] == "worker_stopping")
    proc.send_signal(signal.SIGINT)  # Ctrl-C: do not wait for the hour
    try:
        code = proc.wait(timeout=20)  # before: the second signal did nothing
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"the worker ignored the second signal:\n{log.read_text()}") from None
    assert code == 1, log.read_text()
    events = events_of(log)
    assert [e["event"] for e in events][-3:] == [
        "worker_stopping",
        "worker_stopping_now",
        "worker_stopped",
    ]
    assert events[-1]["forced"] is True
    assert [e[0] for e in app.ledger()] == ["start"]  # the tool never finished
    async with ph.load(app.spec) as harness:
        record = await harness.store.get_run(run_id)
    assert (record.status, record.lease_owner) == ("running", None)  # lease released
    assert [c["status"] for c in record.state["calls"]] == ["dispatched"]


@pytest.mark.slow
async def test_a_stopped_worker_past_its_lease_cannot_write_after_sigcont(
    worker_app: WorkerApp,
) -> None:
    app = worker_app
    [run_id] = await app.seed(["job 0.5 frozen"])
    frozen, frozen_log = app.start("--idle", "0.1")
    deadline = time.monotonic() + 20
    while not any(e[0] == "start" for e in app.ledger()):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    frozen.send_signal(signal.SIGSTOP)
    try:
        await asyncio.sleep(1.5)  # past its 1 s lease
        other, other_log = app.start("--idle", "0.1", "--exit-when-idle")
        assert other.wait(timeout=60) == 0, other_log.read_text()
        [result] = await app.wait_all_ended([run_id])
        assert result.ok
        async with ph.load(app.spec) as harness:
            before = await harness.store.get_run(run_id)
            events_before = await harness.store.events(run_id)
    finally:
        frozen.send_signal(signal.SIGCONT)
    error = await wait_for_line(frozen_log, lambda e: e["event"] == "run_error")
    assert error["run_id"] == run_id and "stale fencing token" in error["message"]
    frozen.send_signal(signal.SIGTERM)
    assert frozen.wait(timeout=30) == 0
    async with ph.load(app.spec) as harness:
        after = await harness.store.get_run(run_id)
        assert after.status == "completed" and after.state == before.state
        assert await harness.store.events(run_id) == events_before


# -- in one process ---------------------------------------------------------------------------


async def test_a_worker_refuses_the_memory_store(app: Any) -> None:
    spec = app.write("tasks:\n  t: {prompt: p}\n")
    async with ph.load(spec) as harness:
        with pytest.raises(ph.SpecError, match="use sqlite or postgres, not memory"):
            Worker(harness)


async def test_worker_settings_are_checked(app: Any) -> None:
    spec = app.write("tasks:\n  t: {prompt: p}\nstate: {use: sqlite, path: s.db}\n")
    async with ph.load(spec) as harness:
        with pytest.raises(ValueError, match="concurrency"):
            Worker(harness, concurrency=0)
        with pytest.raises(ValueError, match="idle"):
            Worker(harness, idle=0)


async def test_stop_ends_an_idle_worker_at_once(app: Any) -> None:
    spec = app.write("tasks:\n  t: {prompt: p}\nstate: {use: sqlite, path: s.db}\n")
    lines: list[tuple[str, dict[str, Any]]] = []
    async with ph.load(spec) as harness:
        worker = Worker(harness, idle=30, log=lambda event, f: lines.append((event, dict(f))))
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0.2)
        worker.stop()
        stats = await asyncio.wait_for(task, 5)
    assert stats.claimed == 0 and worker.stopping
    assert [event for event, _ in lines] == ["worker_started", "worker_stopping", "worker_stopped"]
    assert lines[0][1]["store"] == "sqlite" and lines[0][1]["worker"] == harness.owner
