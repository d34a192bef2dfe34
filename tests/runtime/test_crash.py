"""Crash recovery with real processes: SIGKILL a worker at each boundary, resume in a fresh one.

The app (written into `tmp_path`) runs on a SQLite file with `state.lease: 0.5s`, at
`synchronous: full` and at `normal` (each test runs at both). Its tools act on an "external
system", a JSON-lines ledger file, and its function model answers from the conversation; both
hang at a named point (`KILL_AT`) after writing a marker file, where the test SIGKILLs the
worker. One tool per replay policy: `charge` (manual), `lookup` (safe) and
`refund` (idempotent, it deduplicates by execution key as a real service must). Every kill is
followed by `recover()` in a fresh process, and checked against the ledger: no committed result
lost, no tool with a committed result invoked again, the output the model gives at the end.
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
from typing import Any

import pytest

import pytest_harness as ph

APP = textwrap.dedent(
    '''
    import asyncio, json, os, time, uuid
    import pytest_harness as ph
    from pytest_harness.models.base import ModelResponse, ProposedCall, TokenUsage

    HERE = os.path.dirname(os.path.abspath(__file__))
    LEDGER = os.path.join(HERE, "ledger.jsonl")
    MARKER = os.path.join(HERE, "marker")
    KILL_AT = os.environ.get("KILL_AT", "")


    def ledger():
        try:
            with open(LEDGER, encoding="utf-8") as f:
                return [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []


    def note(entry):
        with open(LEDGER, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\\n")


    def mark(text):
        with open(MARKER + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(MARKER + ".tmp", MARKER)


    async def hang(where, run_id):
        """Stop here (to be killed) when KILL_AT names this point."""
        if KILL_AT == where:
            mark(run_id)
            await asyncio.sleep(120)
        if os.environ.get("FREEZE_AT") == where:  # block the event loop: no lease renewal
            mark(run_id)
            while not os.path.exists(MARKER + ".thaw"):
                time.sleep(0.01)


    async def act(tool, amount, dedupe):
        ctx = ph.current_tool_context()
        entry = {"tool": tool, "run": ctx.run_id, "key": ctx.execution_key, "attempt": ctx.attempt}
        if dedupe:  # an idempotent service: one effect per execution key
            done = [e for e in ledger() if e["key"] == ctx.execution_key and e["effect"]]
            if done:
                note({**entry, "effect": False})
                return done[0]["result"]
        result = {"amount": amount, "receipt": uuid.uuid4().hex[:8]}
        note({**entry, "effect": True, "result": result})
        await hang("tool", ctx.run_id)
        return result


    async def charge(amount: int) -> dict:
        """Charge a card (replay: manual)."""
        return await act("charge", amount, dedupe=False)


    async def lookup(amount: int) -> dict:
        """Look a price up (replay: safe)."""
        return await act("lookup", amount, dedupe=False)


    async def refund(amount: int) -> dict:
        """Refund (replay: idempotent)."""
        return await act("refund", amount, dedupe=True)


    async def model(request):
        slow = float(os.environ.get("SLOW_MODEL", "0"))
        if slow:
            await asyncio.sleep(slow)
        last = request.messages[-1]
        if last["role"] == "tool":
            await hang("model1", request.run_id)
            text = f"done: {last['content']} (pid {os.getpid()})"
            return ModelResponse(text=text, usage=TokenUsage(5, 1))
        await hang("model0", request.run_id)
        tool, amount = request.input.split()
        call = ProposedCall("c1", tool, {"amount": int(amount)})
        return ModelResponse(calls=(call,), usage=TokenUsage(5, 1))
    '''
)

WORKER = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    import pytest_harness as ph
    from crashapp import hang

    HERE = os.path.dirname(os.path.abspath(__file__))


    def summary(result):
        return {
            "run_id": result.run_id,
            "status": result.status.value,
            "output": result.output,
            "pending": [[p.status, p.execution_key, p.call.name] for p in result.pending],
            "tools": [[c.name, c.outcome, c.result] for c in result.trace.tool_calls()],
        }


    async def main(command, args):
        async with ph.load(os.path.join(HERE, "harness.yaml")) as harness:
            if command == "run":
                result = await harness.run("t", args[0], principal="ann")
                print(json.dumps(summary(result)), flush=True)
                await hang("idle", result.run_id)
            elif command == "recover":  # until `want` runs were recovered
                want, got = int(args[0]), []
                deadline = time.monotonic() + 30
                while len(got) < want and time.monotonic() < deadline:
                    got.extend(await harness.recover())
                    if len(got) < want:
                        await asyncio.sleep(0.02)
                for result in got:
                    print(json.dumps(summary(result)), flush=True)
            elif command == "resume":  # a racer: resume when the go file appears
                run_id, go = args
                await harness.result(run_id)
                print("ready", flush=True)
                while not os.path.exists(go):
                    await asyncio.sleep(0.001)
                try:
                    print("won", json.dumps(summary(await harness.resume(run_id))), flush=True)
                except ph.RunBusy as exc:
                    print("busy", exc.owner, flush=True)
            elif command == "approve":
                run_id = args[0]
                waiting = await harness.result(run_id)
                fiona = ph.Principal("fiona", ("finance",))
                result = await harness.approve(
                    run_id, waiting.approval.approval_id, "approve", approver=fiona
                )
                print(json.dumps(summary(result)), flush=True)
            elif command == "churn":  # runs back to back until killed
                n = 0
                while True:
                    await harness.run("t", f"{args[0]} {n % 50 + 1}", principal="ann")
                    n += 1
                    if n == 3:
                        print("ready", flush=True)


    try:
        asyncio.run(main(sys.argv[1], sys.argv[2:]))
    except ph.StoreError as exc:
        print("stale:", exc, flush=True)
    """
)

SPEC = """
version: 1
name: crash
models:
  default: {use: function, call: "crashapp:model", retries: 0}
tools:
  charge: {call: "crashapp:charge"}
  lookup: {call: "crashapp:lookup", replay: safe}
  refund: {call: "crashapp:refund", replay: idempotent}
rules:
  - {id: R1, when: 'args.amount > 100', then: approve, approvers: [finance]}
tasks:
  t: {prompt: p, tools: [charge, lookup, refund]}
state: {use: sqlite, path: state.db, lease: 0.5s, synchronous: full}
"""

POLICY_TOOL = {"manual": "charge", "safe": "lookup", "idempotent": "refund"}
TIMEOUT = 30.0


class CrashApp:
    """The app folder, its worker processes and the ledger of its external effects."""

    def __init__(self, root: Path, synchronous: str = "full") -> None:
        self.root = root
        spec = SPEC.replace("synchronous: full", f"synchronous: {synchronous}")
        (root / "crashapp.py").write_text(APP, encoding="utf-8")
        (root / "worker.py").write_text(WORKER, encoding="utf-8")
        (root / "harness.yaml").write_text(spec, encoding="utf-8")
        self.spec = root / "harness.yaml"
        self.db = root / "state.db"
        self.marker = root / "marker"
        self.env = {**os.environ, "PYTHONPATH": str(root)}
        self.env.pop("KILL_AT", None)

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
        """Run a worker to its end; its stdout lines."""
        proc = self.start(*args, **env)
        out, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, err
        return out.splitlines()

    def kill_at(self, point: str, *args: str) -> str:
        """Start a worker, SIGKILL it once it reaches `point`; the run id it was driving."""
        self.marker.unlink(missing_ok=True)
        proc = self.start(*args, KILL_AT=point)
        try:
            wait_for(self.marker.exists, f"the worker to reach {point}", proc)
            proc.send_signal(signal.SIGKILL)
            proc.wait(TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
        assert proc.returncode == -signal.SIGKILL
        return self.marker.read_text(encoding="utf-8")

    def recover(self, want: int = 1) -> list[dict[str, Any]]:
        """`recover()` in a fresh process, until `want` interrupted runs were resumed."""
        return [json.loads(line) for line in self.call("recover", str(want))]

    def ledger(self) -> list[dict[str, Any]]:
        path = self.root / "ledger.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]

    def effects(self, run_id: str) -> list[dict[str, Any]]:
        return [e for e in self.ledger() if e["run"] == run_id and e["effect"]]

    def invocations(self, run_id: str) -> list[dict[str, Any]]:
        return [e for e in self.ledger() if e["run"] == run_id]

    def integrity(self) -> str:
        with closing(sqlite3.connect(self.db)) as conn:
            return str(conn.execute("PRAGMA integrity_check").fetchone()[0])

    def rows(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """Every run as committed: `run_id -> (status, state)`."""
        with closing(sqlite3.connect(self.db)) as conn:
            rows = conn.execute("SELECT run_id, status, state FROM runs").fetchall()
        return {run_id: (status, json.loads(state)) for run_id, status, state in rows}

    def events(self, run_id: str) -> list[str]:
        with closing(sqlite3.connect(self.db)) as conn:
            rows = conn.execute(
                "SELECT kind FROM events WHERE run_id = ? ORDER BY id", (run_id,)
            ).fetchall()
        return [kind for (kind,) in rows]


def wait_for(
    condition: Any, what: str, proc: subprocess.Popen[str] | None = None, timeout: float = TIMEOUT
) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.002
    while not condition():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the worker exited ({proc.returncode}) before {what}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


@pytest.fixture(params=["full", "normal"])
def crash(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[CrashApp]:
    """The crash app on a file at each `synchronous` level (a kill loses nothing at either)."""
    yield CrashApp(tmp_path, request.param)


def compact(value: Any) -> str:
    """JSON as the model reads a tool result."""
    return json.dumps(value, separators=(",", ":"))


def committed_tools(state: dict[str, Any]) -> list[list[Any]]:
    """The tool outcomes a run's committed state holds, as `[name, outcome, result]`."""
    return [
        [d["key"], d["detail"]["outcome"], d["detail"].get("result")]
        for d in state.get("trace") or []
        if d["kind"] == "tool"
    ]


# -- a kill at each boundary, for each replay policy ------------------------------------------


@pytest.mark.parametrize("policy", ["manual", "safe", "idempotent"])
def test_kill_during_the_model_call_before_any_dispatch(crash: CrashApp, policy: str) -> None:
    tool = POLICY_TOOL[policy]
    run_id = crash.kill_at("model0", "run", f"{tool} 5")
    status, state = crash.rows()[run_id]
    assert status == "running" and state["calls"] == [] and crash.ledger() == []
    [done] = crash.recover()
    assert done["run_id"] == run_id and done["status"] == "completed"
    [effect] = crash.effects(run_id)
    assert len(crash.invocations(run_id)) == 1
    assert done["tools"] == [[tool, "ok", effect["result"]]]
    assert compact(effect["result"]) in done["output"]
    assert crash.events(run_id)[:2] == ["run_started", "attempt_reset"]


@pytest.mark.parametrize("policy", ["manual", "safe", "idempotent"])
def test_kill_inside_the_tool(crash: CrashApp, policy: str) -> None:
    tool = POLICY_TOOL[policy]
    run_id = crash.kill_at("tool", "run", f"{tool} 5")
    status, state = crash.rows()[run_id]
    [call] = state["calls"]
    assert (status, call["status"], call["attempt"]) == ("running", "dispatched", 1)
    [first] = crash.invocations(run_id)
    [recovered] = crash.recover()
    assert recovered["run_id"] == run_id
    if policy == "manual":
        # Not invoked again on a guess: the outcome is surfaced for a person to settle.
        assert recovered["status"] == "awaiting_resolution"
        assert recovered["pending"] == [["uncertain", first["key"], "charge"]]
        assert crash.invocations(run_id) == [first]
        assert "recovery_required" in crash.events(run_id)
        with _harness(crash) as (harness, loop):
            done = loop(harness.resolve(run_id, first["key"], result=first["result"]))
        assert done.ok and done.pending == ()
        assert [(c.outcome, c.result) for c in done.trace.tool_calls()] == [
            ("resolved", first["result"])
        ]
        assert compact(first["result"]) in (done.output or "")
        assert crash.invocations(run_id) == [first]
        return
    assert recovered["status"] == "completed"
    again = crash.invocations(run_id)
    assert len(again) == 2
    assert again[0]["key"] == again[1]["key"]  # the same execution key
    assert [e["attempt"] for e in again] == [1, 2]
    effects = crash.effects(run_id)
    if policy == "safe":
        assert len(effects) == 2  # safe to repeat: it was repeated
        used = effects[1]["result"]
    else:
        assert len(effects) == 1  # idempotent: the service saw the key, one effect
        used = effects[0]["result"]
    assert recovered["tools"] == [[tool, "ok", used]]
    assert compact(used) in recovered["output"]


@pytest.mark.parametrize("policy", ["manual", "safe", "idempotent"])
def test_kill_after_the_raw_result_is_committed(crash: CrashApp, policy: str) -> None:
    tool = POLICY_TOOL[policy]
    run_id = crash.kill_at("model1", "run", f"{tool} 5")
    status, state = crash.rows()[run_id]
    assert status == "running"
    [effect] = crash.effects(run_id)
    committed = committed_tools(state)
    assert committed == [[tool, "ok", effect["result"]]]
    [done] = crash.recover()
    assert done["status"] == "completed"
    assert done["tools"] == committed  # the committed result, reused
    assert crash.invocations(run_id) == [effect]  # never invoked again
    assert compact(effect["result"]) in done["output"]
    assert f"pid {os.getpid()}" not in done["output"]
    assert "attempt_reset" in crash.events(run_id)


def test_kill_while_awaiting_approval(crash: CrashApp) -> None:
    run_id = crash.kill_at("idle", "run", "refund 500")
    status, state = crash.rows()[run_id]
    assert status == "awaiting_approval" and crash.ledger() == []
    assert [c["status"] for c in state["calls"]] == ["planned"]
    [line] = crash.call("approve", run_id)
    done = json.loads(line)
    [effect] = crash.effects(run_id)
    assert done["status"] == "completed"
    assert done["tools"] == [["refund", "ok", effect["result"]]]


def test_a_worker_whose_lease_was_taken_over_cannot_write(crash: CrashApp) -> None:
    """A frozen worker (its lease expired) wakes after another one finished its run."""
    frozen = crash.start("run", "lookup 5", FREEZE_AT="model1")
    try:
        wait_for(crash.marker.exists, "the worker to freeze", frozen)
        run_id = crash.marker.read_text(encoding="utf-8")
        [done] = crash.recover()  # waits for the frozen worker's lease to expire
        assert done["run_id"] == run_id and done["status"] == "completed"
        (crash.root / "marker.thaw").touch()
        out, err = frozen.communicate(timeout=TIMEOUT)
    finally:
        if frozen.poll() is None:
            frozen.kill()
            frozen.communicate()
    assert out.startswith("stale: ") and "stale fencing token" in out, (out, err)
    status, state = crash.rows()[run_id]
    assert status == "completed" and state["output"] == done["output"]
    assert str(frozen.pid) not in state["output"]  # the stale worker wrote nothing
    assert len(crash.invocations(run_id)) == 1


def test_two_processes_racing_resume_exactly_one_drives(crash: CrashApp) -> None:
    run_id = crash.kill_at("model0", "run", "refund 5")
    go = crash.root / "go"
    racers = [crash.start("resume", run_id, str(go), SLOW_MODEL="0.3") for _ in range(2)]
    try:
        for racer in racers:
            assert racer.stdout is not None
            assert racer.stdout.readline().strip() == "ready"

        def expired() -> bool:
            with closing(sqlite3.connect(crash.db)) as conn:
                (expires,) = conn.execute(
                    "SELECT lease_expires FROM runs WHERE run_id = ?", (run_id,)
                ).fetchone()
            return expires is None or expires <= time.time()

        wait_for(expired, "the killed worker's lease to expire")
        go.touch()
        outputs = [racer.communicate(timeout=TIMEOUT) for racer in racers]
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
                racer.communicate()
    lines = [out.strip() for out, _ in outputs]
    assert all(r.returncode == 0 for r in racers), [err for _, err in outputs]
    winners = [line for line in lines if line.startswith("won ")]
    assert len(winners) == 1, lines
    assert sum(line.startswith("busy ") for line in lines) == 1, lines
    assert json.loads(winners[0].removeprefix("won "))["status"] == "completed"
    assert len(crash.effects(run_id)) == 1


# -- mid-commit ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_kills_at_random_moments_of_a_commit_loop(crash: CrashApp) -> None:
    """Best effort: kill a worker at random microseconds while it commits as fast as it can."""
    rng = random.Random(5)
    for _ in range(3):
        proc = crash.start("churn", "refund")
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0, 0.05))
            proc.send_signal(signal.SIGKILL)
            proc.wait(TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
        assert crash.integrity() == "ok"
        before = crash.rows()
        seen = len(crash.ledger())
        interrupted = [run_id for run_id, (status, _) in before.items() if status == "running"]
        assert len(interrupted) <= 1
        recovered = crash.recover(len(interrupted)) if interrupted else []
        assert sorted(r["run_id"] for r in recovered) == sorted(interrupted)
        assert all(r["status"] == "completed" for r in recovered)
        after = crash.rows()
        for run_id, (_, state) in before.items():
            committed = committed_tools(state)
            assert committed_tools(after[run_id][1])[: len(committed)] == committed
        # Only the interrupted run's tool may have been invoked again, and only if its result
        # was not committed; the service saw one effect per key.
        for entry in crash.ledger()[seen:]:
            assert entry["run"] in interrupted
            assert committed_tools(before[entry["run"]][1]) == []
        keys = [e["key"] for e in crash.ledger() if e["effect"]]
        assert len(keys) == len(set(keys))
        assert all(status == "completed" for status, _ in after.values())


# -- helpers ------------------------------------------------------------------------------------


class _harness:
    """`with _harness(crash) as (harness, run):` a harness in the test's process (a fresh one)."""

    def __init__(self, crash: CrashApp) -> None:
        import asyncio

        self.loop = asyncio.new_event_loop()
        self.harness = ph.load(crash.spec)
        self.root = crash.root

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def __enter__(self) -> tuple[ph.Harness, Any]:
        return self.harness, self.run

    def __exit__(self, *exc: object) -> None:
        try:
            self.run(self.harness.aclose())
        finally:
            self.loop.close()
            sys.modules.pop("crashapp", None)
            while str(self.root) in sys.path:
                sys.path.remove(str(self.root))
