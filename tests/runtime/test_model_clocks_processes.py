"""A resumed run keeps its retry budget and first-event deadline, with real processes.

A worker drives a run against a SQLite file (`state.lease: 0.5s`); the test reads the committed
state from the file, SIGKILLs the worker part-way, and a fresh process `recover()`s the run. The
model is rate limited on every turn (scripted `error: rate_limit` with `retry_after`), or never
starts replying (a function model that hangs). The resumed run must fail after what was left of
the budget, not after a fresh one. Each test prints its figures (`pytest -s` shows them).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

WAIT = 0.25
"""The `retry_after` of every scripted 429."""
BUDGET = 2.0
"""The model's `retry_budget`: eight waits."""
FIRST_EVENT = 2.0
"""The hanging model's `first_event_timeout`."""
TIMEOUT = 30.0

SPEC = f"""
version: 1
name: clocks
models:
  limited:
    use: scripted
    retries: 20
    retry_budget: {BUDGET}s
    script: {json.dumps([{"error": "rate_limit", "retry_after": f"{WAIT}s"}] * 40)}
  silent:
    use: function
    call: "clockapp:silent"
    retries: 0
    first_event_timeout: {FIRST_EVENT}s
tasks:
  limited: {{prompt: p, model: limited}}
  silent: {{prompt: p, model: silent}}
state: {{use: sqlite, path: state.db, lease: 0.5s}}
"""

APP = textwrap.dedent(
    """
    import asyncio

    async def silent(request):
        await asyncio.sleep(600)  # a server that accepted the request and never replies
    """
)

WORKER = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    import pytest_harness as ph

    HERE = os.path.dirname(os.path.abspath(__file__))


    async def main(command, arg):
        async with ph.load(os.path.join(HERE, "harness.yaml")) as harness:
            started = time.monotonic()
            if command == "run":
                results = [await harness.run(arg, "go", principal="ann")]
            else:
                results = []
                while not results and time.monotonic() - started < 30:
                    started = time.monotonic()  # the call that finds the run drives it
                    results = await harness.recover()
                    if not results:
                        await asyncio.sleep(0.02)
            took = time.monotonic() - started
            for r in results:
                print(json.dumps({"run_id": r.run_id, "status": r.status.value,
                                  "error": r.error, "took": took}), flush=True)


    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""))
    """
)


class ClockApp:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "harness.yaml").write_text(SPEC, encoding="utf-8")
        (root / "clockapp.py").write_text(APP, encoding="utf-8")
        (root / "worker.py").write_text(WORKER, encoding="utf-8")
        self.db = root / "state.db"
        self.env = {**os.environ, "PYTHONPATH": str(root)}

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(self.root / "worker.py"), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=self.root,
        )

    def finish(self, *args: str) -> dict[str, Any]:
        proc = self.start(*args)
        out, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, err
        return dict(json.loads(out.splitlines()[-1]))

    def state(self) -> dict[str, Any] | None:
        """The committed state of the only run, if there is one yet."""
        if not self.db.exists():
            return None
        with closing(sqlite3.connect(self.db)) as conn:
            try:
                row = conn.execute("SELECT state FROM runs").fetchone()
            except sqlite3.OperationalError:  # the schema is not there yet
                return None
        return None if row is None else dict(json.loads(row[0]))

    def kill_when(self, condition: Callable[[dict[str, Any]], bool], *args: str) -> dict[str, Any]:
        """Start a worker and SIGKILL it once its committed state meets `condition`."""
        proc = self.start(*args)
        try:
            deadline = time.monotonic() + TIMEOUT
            while True:
                state = self.state()
                if state is not None and condition(state):
                    break
                if proc.poll() is not None:
                    pytest.fail(f"the worker ended before it was killed: {proc.communicate()}")
                assert time.monotonic() < deadline, "the worker never got there"
                time.sleep(0.01)
            proc.send_signal(signal.SIGKILL)
            proc.wait(TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
        assert proc.returncode == -signal.SIGKILL
        committed = self.state()
        assert committed is not None
        return committed


def waited(state: dict[str, Any]) -> float:
    return float(state.get("clocks", {}).get("limited", {}).get("retry_waited", 0.0))


def attempts(state: dict[str, Any]) -> int:
    return sum(1 for d in state["trace"] if d["kind"] == "model" and "error" in d["detail"])


def test_a_resumed_run_fails_after_what_was_left_of_its_retry_budget(tmp_path: Path) -> None:
    fresh = ClockApp(tmp_path / "fresh")
    whole = fresh.finish("run", "limited")
    whole_state = fresh.state()
    assert whole_state is not None
    assert whole["status"] == "failed"
    assert "retry budget of model 'limited' spent: 2s of its 2s" in whole["error"]["message"]
    assert waited(whole_state) == pytest.approx(BUDGET)
    assert attempts(whole_state) == int(BUDGET / WAIT) + 1  # 8 waits between 9 attempts

    app = ClockApp(tmp_path / "killed")
    at_kill = app.kill_when(lambda s: waited(s) >= 1.5, "run", "limited")
    spent_before = waited(at_kill)
    assert 1.5 <= spent_before < BUDGET
    resumed = app.finish("recover")
    final = app.state()
    assert final is not None
    assert resumed["status"] == "failed"
    assert "retry budget of model 'limited' spent: 2s of its 2s" in resumed["error"]["message"]
    # The budget is the run's, across processes: the resumed worker waited only what was left.
    assert waited(final) == pytest.approx(BUDGET)
    left = BUDGET - spent_before
    assert resumed["took"] < left + 1.0 < BUDGET
    assert attempts(final) == attempts(whole_state)
    print(
        f"\nretry budget {BUDGET:g}s, Retry-After {WAIT:g}s: uninterrupted run failed after "
        f"{whole['took']:.2f}s ({attempts(whole_state)} attempts); killed after "
        f"{spent_before:g}s charged ({attempts(at_kill)} attempts committed), resumed in a "
        f"new process: failed after {resumed['took']:.2f}s more ({left:g}s left), "
        f"{attempts(final) - attempts(at_kill)} attempts; {waited(final):g}s charged in all"
    )


def test_a_resumed_attempt_waits_only_what_was_left_of_its_first_event_deadline(
    tmp_path: Path,
) -> None:
    app = ClockApp(tmp_path)
    since: list[float] = []

    def silent_for_a_while(state: dict[str, Any]) -> bool:
        waiting = state.get("waiting")
        if waiting is None:
            return False
        since.append(float(waiting["since"]))
        return time.time() - since[0] >= 1.0

    at_kill = app.kill_when(silent_for_a_while, "run", "silent")
    assert at_kill["waiting"]["model"] == "silent"
    resumed = app.finish("recover")
    final = app.state()
    assert final is not None
    assert resumed["status"] == "failed"
    message = resumed["error"]["message"]
    assert f"first_event_timeout of {FIRST_EVENT:g}s" in message
    assert "waited by an attempt a stopped worker left unanswered" in message
    # The killed worker renewed its lease (0.5s) about every 0.17s while it waited 1s: about
    # 0.8s of the deadline was gone, and the new attempt got only the rest of it.
    assert resumed["took"] < FIRST_EVENT - 0.5
    assert final["waiting"] is None
    print(
        f"\nfirst_event_timeout {FIRST_EVENT:g}s: killed after the server was silent for 1s; "
        f"the resumed attempt timed out after {resumed['took']:.2f}s: {message}"
    )
