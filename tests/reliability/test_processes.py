"""Real processes, real signals: a random SIGKILL sweep, racing approvers, two writers on one
file, and a writer whose lease was taken over while the OS had it stopped.

Every test here starts several Python processes, so all are marked `slow`.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120.0

APP = textwrap.dedent(
    '''
    import asyncio, json, os, sys, time
    import pytest_harness as ph
    from pytest_harness.models.base import ModelResponse, ProposedCall, TokenUsage

    HERE = os.path.dirname(os.path.abspath(__file__))
    LEDGER = os.path.join(HERE, "ledger.jsonl")


    def note(entry):
        with open(LEDGER, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\\n")


    def mark(path, text):
        """Write `text` to `path` at once (a reader never sees the file empty)."""
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(path + ".tmp", path)


    async def refund(amount: int) -> dict:
        """Refunds (idempotent)."""
        ctx = ph.current_tool_context()
        note({"run": ctx.run_id, "key": ctx.execution_key, "pid": os.getpid()})
        if os.environ.get("MARK_IN_TOOL"):
            mark(os.environ["MARK_IN_TOOL"], ctx.run_id)
            await asyncio.sleep(float(os.environ.get("TOOL_SLEEP", "0")))
        return {"amount": amount, "by": os.getpid()}


    async def charge(amount: int) -> dict:
        """Charges a card (manual: never repeated on a guess)."""
        return await refund(amount)


    def model(request):
        if request.messages[-1]["role"] == "tool":
            return f"done by {os.getpid()}: {request.messages[-1]['content']}"
        tool, amount = request.input.split()
        return ModelResponse(
            calls=(ProposedCall("c1", tool, {"amount": int(amount)}),), usage=TokenUsage(3, 1)
        )
    '''
)

SPEC = """
version: 1
name: procs
models:
  default: {use: function, call: "procapp:model", retries: 0}
tools:
  refund: {call: "procapp:refund", replay: idempotent}
  charge: {call: "procapp:charge"}
rules:
  - {id: R1, when: 'args.amount > 100', then: approve, approvers: [finance]}
tasks:
  t: {prompt: p, tools: [refund, charge]}
state: {use: sqlite, path: state.db, lease: 300ms, busy_timeout: 20s}
"""

WORKER = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    import pytest_harness as ph
    from procapp import mark

    HERE = os.path.dirname(os.path.abspath(__file__))
    SPEC = os.path.join(HERE, "harness.yaml")
    FIONA = ph.Principal("fiona", ("finance",))


    async def wait_for(path):
        while not os.path.exists(path):
            await asyncio.sleep(0.001)


    async def main(command, args):
        async with ph.load(SPEC) as harness:
            if command == "wait":  # runs that stop for an approval; print their ids
                for n in range(int(args[0])):
                    result = await harness.run("t", f"refund 500", principal="ann")
                    print(result.run_id, result.approval.approval_id, flush=True)
            elif command == "race":  # approve each run when its go file appears
                pairs = [a.split(":") for a in args[1:]]
                for run_id, _ in pairs:
                    await harness.result(run_id)  # the store is open before the race
                print("ready", flush=True)
                for n, (run_id, approval_id) in enumerate(pairs):
                    await wait_for(os.path.join(HERE, f"go{n}"))
                    try:
                        result = await harness.approve(
                            run_id, approval_id, "approve",
                            approver=ph.Principal(args[0], ("finance",)),
                        )
                    except ph.ResolutionError as exc:
                        print(json.dumps({"trial": n, "lost": str(exc)}), flush=True)
                    else:
                        print(json.dumps({"trial": n, "won": result.status.value}), flush=True)
            elif command == "runs":  # small runs back to back
                for n in range(int(args[0])):
                    result = await harness.run("t", f"refund {n % 50 + 1}", principal="ann")
                    assert result.ok, result
                    print(result.run_id, flush=True)
            elif command == "resolve":  # settle an uncertain call; stop right after it commits
                run_id, key, marker = args
                commit = harness.store.commit

                async def committed(*a, **kw):
                    control = await commit(*a, **kw)
                    if any(e.kind == "tool_resolved" for e in kw.get("events") or ()):
                        mark(marker, run_id)
                        await asyncio.sleep(120)
                    return control

                harness.store.commit = committed
                await harness.resolve(run_id, key, result={"settled": "by hand"}, resolver="ops")
            elif command == "one":
                text = args[0] if args else "refund 7"
                try:
                    result = await harness.run("t", text, principal="ann")
                    print("done", result.status.value, flush=True)
                except ph.StoreError as exc:
                    print("stale", exc, flush=True)
            elif command == "recover":
                got = []
                deadline = time.monotonic() + 60
                while not got and time.monotonic() < deadline:
                    got = await harness.recover()
                    await asyncio.sleep(0.02)
                for result in got:
                    print(json.dumps({"run_id": result.run_id, "status": result.status.value,
                                      "output": result.output}), flush=True)


    asyncio.run(main(sys.argv[1], sys.argv[2:]))
    """
)


class Procs:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "procapp.py").write_text(APP, encoding="utf-8")
        (root / "worker.py").write_text(WORKER, encoding="utf-8")
        (root / "harness.yaml").write_text(SPEC, encoding="utf-8")
        self.db = root / "state.db"
        self.env = {**os.environ, "PYTHONPATH": str(root)}

    def start(self, *args: str, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(self.root / "worker.py"), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**self.env, **env},
            cwd=self.root,
        )

    def call(self, *args: str, **env: str) -> list[str]:
        proc = self.start(*args, **env)
        out, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, err
        return out.splitlines()

    def rows(self) -> dict[str, tuple[str, dict[str, object]]]:
        with closing(sqlite3.connect(self.db)) as conn:
            rows = conn.execute("SELECT run_id, status, state FROM runs").fetchall()
        return {run_id: (status, json.loads(state)) for run_id, status, state in rows}

    def ledger(self) -> list[dict[str, object]]:
        path = self.root / "ledger.jsonl"
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    yield Procs(tmp_path)


def finish(procs: list[subprocess.Popen[str]]) -> list[tuple[str, str]]:
    try:
        return [p.communicate(timeout=TIMEOUT) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()


# -- a random SIGKILL sweep --------------------------------------------------------------------


def test_a_random_kill_sweep_loses_nothing_and_leaves_no_run_stuck() -> None:
    """`benchmarks/crash.py` with a few kills: workers and approvers (also between the saved
    decision and the resume) SIGKILLed at random; it exits 1 on any lost result, duplicate
    effect, unsurfaced uncertain call or stuck run."""
    seed = int(os.environ.get("HARNESS_CRASH_SEED", random.randrange(1_000_000)))
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "crash.py"),
            "--kills",
            os.environ.get("HARNESS_CRASH_KILLS", "8"),
            "--seed",
            str(seed),
            "--approvers",
            "0.5",
            "--lease",
            "0.3",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    print(done.stdout)
    assert done.returncode == 0, (
        f"seed {seed} (HARNESS_CRASH_SEED={seed} repeats it):\n{done.stdout}\n{done.stderr}"
    )
    figures = {
        line.split("|")[1].strip(): line.split("|")[2].strip()
        for line in done.stdout.splitlines()
        if line.startswith("| ") and not line.startswith("| -")
    }
    for must_be_zero in (
        "lost results",
        "duplicate effects of the idempotent tool",
        "stuck runs after recovery",
        "runs not completed at the end",
    ):
        assert figures[must_be_zero] == "0", (must_be_zero, seed)


# -- racing approvers --------------------------------------------------------------------------


RACERS = int(os.environ.get("HARNESS_RACERS", "20"))
TRIALS = int(os.environ.get("HARNESS_RACE_TRIALS", "3"))


def test_racing_approvers_exactly_one_wins_each_trial(procs: Procs) -> None:
    waiting = [line.split() for line in procs.call("wait", str(TRIALS))]
    pairs = [f"{run_id}:{approval_id}" for run_id, approval_id in waiting]
    racers = [procs.start("race", f"approver{n}", *pairs) for n in range(RACERS)]
    try:
        for racer in racers:
            assert racer.stdout is not None
            line = racer.stdout.readline().strip()
            assert line == "ready", (line, racer.stderr.read() if racer.stderr else "")
        for trial in range(TRIALS):
            (procs.root / f"go{trial}").touch()
            time.sleep(0.05)
    finally:
        outputs = finish(racers)
    assert all(r.returncode == 0 for r in racers), [err for _, err in outputs]
    results = [json.loads(line) for out, _ in outputs for line in out.splitlines()]
    rows = procs.rows()
    for trial, (run_id, _) in enumerate(waiting):
        answers = [r for r in results if r["trial"] == trial]
        won = [r for r in answers if "won" in r]
        assert len(answers) == RACERS
        assert len(won) == 1, answers
        assert won[0]["won"] == "completed"
        assert all(
            "already answered: approve by approver" in r["lost"] for r in answers if "lost" in r
        )
        assert rows[run_id][0] == "completed"
        assert sum(1 for e in procs.ledger() if e["run"] == run_id) == 1  # refunded once
    print(f"\nracing approvers: {TRIALS} trials of {RACERS} processes, {TRIALS} winners")


# -- two processes on one file -----------------------------------------------------------------


def test_two_processes_on_one_sqlite_file(procs: Procs) -> None:
    each = 25
    writers = [procs.start("runs", str(each)) for _ in range(2)]
    outputs = finish(writers)
    assert all(w.returncode == 0 for w in writers), [err for _, err in outputs]
    assert not any("locked" in err for _, err in outputs)
    made = [line for out, _ in outputs for line in out.splitlines()]
    assert len(made) == len(set(made)) == 2 * each
    rows = procs.rows()
    assert {status for status, _ in rows.values()} == {"completed"}
    with closing(sqlite3.connect(procs.db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        ids = [row[0] for row in conn.execute("SELECT id FROM events ORDER BY id")]
        per_run = conn.execute(
            "SELECT run_id, group_concat(kind) FROM events GROUP BY run_id"
        ).fetchall()
    assert len(ids) == len(set(ids))
    for _, kinds in per_run:
        assert kinds.split(",")[0] == "run_started" and kinds.endswith("run_result")


# -- a stale-lease writer ----------------------------------------------------------------------


def test_a_writer_stopped_past_its_lease_cannot_write_when_it_wakes(procs: Procs) -> None:
    """SIGSTOP a worker inside its tool; another process recovers the run once the lease
    expires; SIGCONT the first: its next commit is refused by its stale fencing token."""
    marker = procs.root / "in-tool"
    stopped = procs.start("one", MARK_IN_TOOL=str(marker), TOOL_SLEEP="0.5")
    try:
        deadline = time.monotonic() + TIMEOUT
        while not marker.exists():
            assert stopped.poll() is None and time.monotonic() < deadline
            time.sleep(0.005)
        os.kill(stopped.pid, signal.SIGSTOP)
        run_id = marker.read_text(encoding="utf-8")
        [line] = procs.call("recover")
        recovered = json.loads(line)
        assert recovered["run_id"] == run_id and recovered["status"] == "completed"
        before = procs.rows()[run_id]
        os.kill(stopped.pid, signal.SIGCONT)
        out, err = stopped.communicate(timeout=TIMEOUT)
    finally:
        if stopped.poll() is None:
            os.kill(stopped.pid, signal.SIGCONT)
            stopped.kill()
            stopped.communicate()
    assert out.startswith("stale ") and "stale fencing token" in out, (out, err)
    assert procs.rows()[run_id] == before  # the stale writer changed nothing
    status, state = before
    assert status == "completed" and str(stopped.pid) not in str(state["output"])
    # The idempotent tool ran in both processes, with the same execution key.
    calls = [e for e in procs.ledger() if e["run"] == run_id]
    assert len(calls) == 2 and calls[0]["key"] == calls[1]["key"]


# -- an uncertain call resolved, and the resolver killed before the run moves ------------------


def kill_when(proc: subprocess.Popen[str], marker: Path) -> None:
    try:
        deadline = time.monotonic() + TIMEOUT
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait(TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_a_resolved_call_whose_resolver_died_is_recovered(procs: Procs) -> None:
    in_tool = procs.root / "in-tool"
    kill_when(procs.start("one", "charge 7", MARK_IN_TOOL=str(in_tool), TOOL_SLEEP="120"), in_tool)
    run_id = in_tool.read_text(encoding="utf-8")
    [line] = procs.call("recover")
    assert json.loads(line)["status"] == "awaiting_resolution"  # surfaced, not guessed
    [[key, _]] = [
        [c["key"], c["status"]]
        for c in procs.rows()[run_id][1]["calls"]  # type: ignore[union-attr]
    ]
    resolved = procs.root / "resolved"
    kill_when(procs.start("resolve", run_id, key, str(resolved)), resolved)
    status, _ = procs.rows()[run_id]
    assert status == "running"  # the resolution is committed; nobody drives the run
    [line] = procs.call("recover")
    done = json.loads(line)
    assert done["run_id"] == run_id and done["status"] == "completed"
    assert "by hand" in done["output"]
    assert len([e for e in procs.ledger() if e["run"] == run_id]) == 1  # charged once
