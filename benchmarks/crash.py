"""Crash benchmark: SIGKILL a worker at random moments, recover in a fresh process, count losses.

    .venv/bin/python benchmarks/crash.py [--kills 50] [--seed 1] [--lease 0.5]

A generated app on a SQLite file (`synchronous: full`, `state.lease` of `--lease` seconds)
runs a 4-turn task back to back in a worker process: the model calls `lookup` (replay: safe),
then `refund` (idempotent: the "service" deduplicates by execution key), then `charge`
(manual), then answers. Tools and model take a few random milliseconds, so a kill lands in a
model call, inside a tool, or in the run loop and its commits. The tools write their effects
to a ledger file (the outside world), which the checks read.

Each kill: start a worker, let it run for a random 0-250 ms, SIGKILL it; run `PRAGMA
integrity_check`; snapshot what the store committed; run `recover()` in a fresh process (after
the lease expires), which settles each uncertain `charge` the way an operator would (the
ledger shows the effect: `resolve(result=...)`; it does not: `resolve(retry=True)`); then check:

- runs completed: interrupted runs that ended `completed` after recovery;
- lost results: a tool result committed before the kill that is missing or different after
  recovery (must be 0);
- re-invoked after commit: a tool invoked again although its result was committed (must be 0);
- duplicate effects: idempotent `refund` effects beyond one per execution key (must be 0);
- uncertain surfaced: interrupted `charge` calls (dispatch committed, result not) that
  recovery surfaced as `uncertain`, out of how many there were (must be all);
- integrity failures: `PRAGMA integrity_check` not `ok` (must be 0).

Exits 1 when a must-be figure is off.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

APP = textwrap.dedent(
    '''
    import asyncio, json, os, random, uuid
    import pytest_harness as ph
    from pytest_harness.models.base import ModelResponse, ProposedCall, TokenUsage

    HERE = os.path.dirname(os.path.abspath(__file__))
    LEDGER = os.path.join(HERE, "ledger.jsonl")
    PHASE = os.path.join(HERE, "phase.log")
    PLAN = ["lookup", "refund", "charge"]


    def append(path, line):
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\\n")


    def ledger():
        try:
            with open(LEDGER, encoding="utf-8") as f:
                return [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []


    async def act(tool, amount, dedupe):
        ctx = ph.current_tool_context()
        entry = {"tool": tool, "run": ctx.run_id, "key": ctx.execution_key, "attempt": ctx.attempt}
        append(PHASE, "tool+ " + tool)
        await asyncio.sleep(random.uniform(0, 0.006))
        if dedupe:
            done = [e for e in ledger() if e["key"] == ctx.execution_key and e["effect"]]
            if done:
                append(LEDGER, json.dumps({**entry, "effect": False}))
                append(PHASE, "tool- " + tool)
                return done[0]["result"]
        result = {"amount": amount, "receipt": uuid.uuid4().hex[:8]}
        append(LEDGER, json.dumps({**entry, "effect": True, "result": result}))
        await asyncio.sleep(random.uniform(0, 0.006))
        append(PHASE, "tool- " + tool)
        return result


    async def lookup(amount: int) -> dict:
        """Look a price up (safe)."""
        return await act("lookup", amount, dedupe=False)


    async def refund(amount: int) -> dict:
        """Refund (idempotent)."""
        return await act("refund", amount, dedupe=True)


    async def charge(amount: int) -> dict:
        """Charge a card (manual)."""
        return await act("charge", amount, dedupe=False)


    async def model(request):
        append(PHASE, "model+")
        await asyncio.sleep(random.uniform(0, 0.004))
        done = sum(1 for m in request.messages if m["role"] == "tool")
        append(PHASE, "model-")
        if done == len(PLAN):
            return ModelResponse(text=f"done after {done} tools", usage=TokenUsage(5, 1))
        call = ProposedCall(f"c{done}", PLAN[done], {"amount": done + 1})
        return ModelResponse(calls=(call,), usage=TokenUsage(5, 1))
    '''
)

WORKER = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    import pytest_harness as ph

    HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, HERE)
    import crashapp


    async def churn(harness):
        n = 0
        while True:
            await harness.run("t", f"run {n}", principal="ann")
            n += 1
            if n == 1:
                print("ready", flush=True)


    async def recover(harness, want):
        # Recover until every interrupted run was resumed; settle uncertain calls as an
        # operator would, by looking at the outside world (the ledger).
        got = []
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            got.extend(await harness.recover())
            if len(got) < want:
                await asyncio.sleep(0.02)
        for result in got:
            line = {"run_id": result.run_id, "recovered": result.status.value, "uncertain": []}
            while result.status is ph.RunStatus.AWAITING_RESOLUTION:
                [pending] = result.pending
                key = pending.execution_key
                line["uncertain"].append(pending.call.name)
                effects = [e for e in crashapp.ledger() if e["key"] == key and e["effect"]]
                if effects:
                    result = await harness.resolve(
                        result.run_id, key, result=effects[-1]["result"], resolver="ops"
                    )
                else:
                    result = await harness.resolve(result.run_id, key, retry=True, resolver="ops")
            line["final"] = result.status.value
            print(json.dumps(line), flush=True)


    async def main():
        async with ph.load(os.path.join(HERE, "harness.yaml")) as harness:
            if sys.argv[1] == "churn":
                await churn(harness)
            else:
                await recover(harness, int(sys.argv[2]))


    asyncio.run(main())
    """
)

SPEC = """
version: 1
name: crash-bench
models:
  default: {{use: function, call: "crashapp:model", retries: 0}}
tools:
  lookup: {{call: "crashapp:lookup", replay: safe}}
  refund: {{call: "crashapp:refund", replay: idempotent}}
  charge: {{call: "crashapp:charge"}}
tasks:
  t: {{prompt: p, tools: [lookup, refund, charge]}}
state: {{use: sqlite, path: state.db, lease: {lease}s, synchronous: full}}
"""


@dataclass
class Tally:
    """What the kills came to."""

    kills: int = 0
    interrupted: int = 0
    completed: int = 0
    lost: int = 0
    reinvoked: int = 0
    duplicates: int = 0
    manual_in_flight: int = 0
    uncertain: int = 0
    integrity_failures: int = 0
    where: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)


class Bench:
    """The app folder and its processes."""

    def __init__(self, root: Path, lease: float) -> None:
        self.root = root
        (root / "crashapp.py").write_text(APP, encoding="utf-8")
        (root / "worker.py").write_text(WORKER, encoding="utf-8")
        (root / "harness.yaml").write_text(SPEC.format(lease=lease), encoding="utf-8")
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

    def ledger(self) -> list[dict[str, Any]]:
        path = self.root / "ledger.jsonl"
        if not path.exists():
            return []
        lines = path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def last_phase(self) -> str:
        path = self.root / "phase.log"
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        return lines[-1] if lines else ""

    def rows(self) -> dict[str, tuple[str, dict[str, Any]]]:
        with closing(sqlite3.connect(self.db)) as conn:
            rows = conn.execute("SELECT run_id, status, state FROM runs").fetchall()
        return {run_id: (status, json.loads(state)) for run_id, status, state in rows}

    def integrity(self) -> str:
        with closing(sqlite3.connect(self.db)) as conn:
            return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def tools_of(state: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The committed tool outcomes of a run: (tool, outcome, result) in order."""
    return [
        (d["key"], d["detail"]["outcome"], json.dumps(d["detail"].get("result"), sort_keys=True))
        for d in state.get("trace") or ()
        if d["kind"] == "tool"
    ]


def where(phase: str) -> str:
    """Where the worker was when it died, from the last line of its phase log."""
    if phase.startswith("model+"):
        return "in a model call"
    if phase.startswith("tool+"):
        return "inside a tool"
    return "in the run loop or a commit"


def one_kill(bench: Bench, rng: random.Random, tally: Tally) -> None:
    worker = bench.start("churn")
    try:
        assert worker.stdout is not None
        if worker.stdout.readline().strip() != "ready":
            _, err = worker.communicate()
            raise SystemExit(f"the worker did not start:\n{err}")
        time.sleep(rng.uniform(0, 0.25))
        worker.send_signal(signal.SIGKILL)
        worker.wait(30)
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.communicate()
    tally.kills += 1
    tally.where[where(bench.last_phase())] += 1
    if bench.integrity() != "ok":
        tally.integrity_failures += 1
    before = bench.rows()
    seen = len(bench.ledger())
    interrupted = [run_id for run_id, (status, _) in before.items() if status == "running"]
    tally.interrupted += len(interrupted)
    in_flight = {
        run_id
        for run_id in interrupted
        for call in before[run_id][1].get("calls") or ()
        if call["name"] == "charge" and call["status"] == "dispatched"
    }
    tally.manual_in_flight += len(in_flight)
    recovered: list[dict[str, Any]] = []
    if interrupted:
        proc = bench.start("recover", str(len(interrupted)))
        out, err = proc.communicate(timeout=60)
        if proc.returncode != 0:
            raise SystemExit(f"recovery failed:\n{err}")
        recovered = [json.loads(line) for line in out.splitlines()]
    if sorted(r["run_id"] for r in recovered) != sorted(interrupted):
        tally.problems.append(f"kill {tally.kills}: recovered {recovered}, not {interrupted}")
    for line in recovered:
        if line["final"] == "completed":
            tally.completed += 1
        if line["uncertain"] and line["run_id"] in in_flight:
            tally.uncertain += 1
    after = bench.rows()
    for run_id, (_, state) in before.items():
        committed = tools_of(state)
        if tools_of(after[run_id][1])[: len(committed)] != committed:
            tally.lost += 1
            tally.problems.append(f"kill {tally.kills}: run {run_id} lost a committed result")
    for entry in bench.ledger()[seen:]:
        _, state = before[entry["run"]]
        done_keys = {c["key"] for c in state.get("calls") or () if c["status"] == "done"}
        steps_done = len(tools_of(state))
        # A key is committed if its call is done, or belongs to a step the run moved past.
        index = ["lookup", "refund", "charge"].index(entry["tool"])
        if entry["key"] in done_keys or index < steps_done:
            tally.reinvoked += 1
            tally.problems.append(f"kill {tally.kills}: {entry} re-invoked after its commit")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=50, help="how many kills (default 50)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--lease", type=float, default=0.5, help="state.lease in seconds")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    tally = Tally()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="harness-crash-") as folder:
        bench = Bench(Path(folder), args.lease)
        for n in range(args.kills):
            one_kill(bench, rng, tally)
            print(f"\rkill {n + 1}/{args.kills}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        ledger = bench.ledger()
        refunds = Counter(e["key"] for e in ledger if e["tool"] == "refund" and e["effect"])
        tally.duplicates = sum(count - 1 for count in refunds.values())
        calls = Counter((e["tool"], e["key"]) for e in ledger)
        repeated = Counter(tool for (tool, _), count in calls.items() for _ in range(count - 1))
        runs = len(bench.rows())
        unfinished = [r for r, (status, _) in bench.rows().items() if status != "completed"]
    elapsed = time.monotonic() - started
    rows = [
        ("kills (SIGKILL at a random moment)", str(tally.kills), ""),
        ("runs interrupted", str(tally.interrupted), ""),
        ("runs completed after recovery", str(tally.completed), f"of {tally.interrupted}"),
        ("lost results", str(tally.lost), "must be 0"),
        ("tools re-invoked after their result was committed", str(tally.reinvoked), "must be 0"),
        (
            "safe tool invoked again by recovery",
            str(repeated["lookup"]),
            "allowed: it is safe to repeat",
        ),
        (
            "idempotent tool invoked again by recovery",
            str(repeated["refund"]),
            "same execution key, deduplicated by the service",
        ),
        ("duplicate effects of the idempotent tool", str(tally.duplicates), "must be 0"),
        (
            "uncertain calls surfaced for the manual tool",
            str(tally.uncertain),
            f"of {tally.manual_in_flight} killed inside it (dispatched, no result): must be all",
        ),
        ("PRAGMA integrity_check failures", str(tally.integrity_failures), "must be 0"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"crash benchmark: {runs} runs in all, {elapsed:.0f} s, seed {args.seed}")
    print()
    print(f"| {'figure':<{width}} | {'n':>4} | |")
    print(f"| {'-' * width} | {'-' * 4}:| --- |")
    for label, value, note in rows:
        print(f"| {label:<{width}} | {value:>4} | {note} |")
    print()
    landed = ", ".join(f"{place} {n}" for place, n in sorted(tally.where.items()))
    print(f"The kills landed: {landed}.")
    early = tally.kills - tally.interrupted
    if early:
        print(
            f"{early} {'kill' if early == 1 else 'kills'} came before the next run's creation "
            "was committed: no run was left behind (its caller never got a run id)."
        )
    failed = (
        tally.lost
        or tally.reinvoked
        or tally.duplicates
        or tally.integrity_failures
        or tally.uncertain != tally.manual_in_flight
        or tally.completed != tally.interrupted
        or unfinished
        or tally.problems
    )
    for problem in tally.problems:
        print("problem:", problem)
    if unfinished:
        print(f"problem: {len(unfinished)} runs did not complete: {unfinished[:5]}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
