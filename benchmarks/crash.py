"""Crash benchmark: SIGKILL workers and approvers at random moments, recover, count losses.

    .venv/bin/python benchmarks/crash.py [--kills 200] [--seed 1] [--lease 0.5] [--approvers 0.4]

A generated app on a SQLite file (`synchronous: full`, `state.lease` of `--lease` seconds)
runs a 4-turn task: the model calls `lookup` (replay: safe), then `refund` (idempotent: the
"service" deduplicates by execution key), then `charge` (manual), then answers. A run whose
input starts with `big` refunds 500, which rule R1 sends to a finance approval. Tools and model
take a few random milliseconds, so a kill lands in a model call, inside a tool, or in the run
loop and its commits. The tools write their effects to a ledger file (the outside world), which
the checks read.

Each kill is one of two kinds (`--approvers` is the share of the second):

- a **worker** kill: a worker runs tasks back to back (every third one `big`, which stops
  awaiting approval), and is SIGKILLed after a random 0-250 ms;
- an **approver** kill: a process approves a waiting run and is SIGKILLed, half the time at a
  random 0-250 ms (before its decision, between the decision and the resume, or during the
  resumed run), half the time exactly between the saved decision and the resume (the window in
  which a run used to be stuck for good).

After each kill: `PRAGMA integrity_check`; a snapshot of what the store committed; `recover()`
in a fresh process until every run left behind was resumed (runs left `running`, once their
lease expires, and runs whose approvals were all answered but never resumed, once their last
answer is a lease old), which settles each uncertain `charge` the way an operator would (the
ledger shows the effect: `resolve(result=...)`; it does not: `resolve(retry=True)`); then:

- runs completed: runs left behind that ended `completed` after recovery;
- lost results: a tool result committed before the kill that is missing or different after
  recovery (must be 0);
- re-invoked after commit: a tool invoked again although its result was committed (must be 0);
- duplicate effects: idempotent `refund` effects beyond one per execution key (must be 0);
- uncertain surfaced: interrupted `charge` calls (dispatch committed, result not) that
  recovery surfaced as `uncertain`, out of how many there were (must be all);
- stuck runs: runs, after recovery, that are not ended and wait for nobody: `running`, or
  `awaiting_approval` with every approval answered, or `awaiting_resolution` with no uncertain
  call (must be 0);
- integrity failures: `PRAGMA integrity_check` not `ok` (must be 0).

At the end an operator approves the runs still waiting for an answer (their approver died
before deciding) and every run must be `completed`. Exits 1 when a must-be figure is off.
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
        amount = 500 if PLAN[done] == "refund" and request.input.startswith("big") else done + 1
        call = ProposedCall(f"c{done}", PLAN[done], {"amount": amount})
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
            kind = "big" if n % 3 == 2 else "run"
            await harness.run("t", f"{kind} {n}", principal="ann")
            n += 1
            if n == 1:
                print("ready", flush=True)


    FIONA = ph.Principal("fiona", ("finance",))


    async def approve(harness, run_id, pause):
        waiting = await harness.result(run_id)
        if pause:  # stop right after the decision is saved, before the run is resumed
            decide = harness.store.decide_approval

            async def decided(*args, **kwargs):
                row = await decide(*args, **kwargs)
                with open(os.path.join(HERE, "decided"), "w") as f:
                    f.write(run_id)
                await asyncio.sleep(120)
                return row

            harness.store.decide_approval = decided
        print("ready", flush=True)
        approval_id = waiting.approval.approval_id
        result = await harness.approve(run_id, approval_id, "approve", approver=FIONA)
        print(json.dumps({"run_id": run_id, "final": result.status.value}), flush=True)


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
            elif sys.argv[1] == "approve":
                await approve(harness, sys.argv[2], sys.argv[3] == "pause")
            elif sys.argv[1] == "wait":  # one run that stops for an approval
                result = await harness.run("t", "big wait", principal="ann")
                print(result.run_id, flush=True)
            elif sys.argv[1] == "operator":  # answer every approval still open
                for run_id in sys.argv[2:]:
                    await approve(harness, run_id, False)
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
rules:
  - {{id: R1, when: 'tool == "refund" && args.amount > 100', then: approve, approvers: [finance]}}
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
    approver_kills: int = 0
    between_decision_and_resume: int = 0
    answered_left_behind: int = 0
    stuck: int = 0
    nothing_left: int = 0
    undecided: int = 0
    operator: int = 0
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

    def open_approvals(self) -> dict[str, int]:
        """`run_id -> pending approvals` for every run awaiting approval."""
        if not self.db.exists():
            return {}
        with closing(sqlite3.connect(self.db)) as conn:
            rows = conn.execute(
                "SELECT r.run_id, (SELECT count(*) FROM approvals a WHERE a.run_id = r.run_id "
                "AND a.status = 'pending') FROM runs r WHERE r.status = 'awaiting_approval'"
            ).fetchall()
        return {run_id: pending for run_id, pending in rows}

    def left_behind(self) -> list[str]:
        """Runs nobody will move unless recovered: `running`, or answered and not resumed."""
        answered = [r for r, pending in self.open_approvals().items() if pending == 0]
        running = [r for r, (status, _) in self.rows().items() if status == "running"]
        return running + answered

    def stuck(self) -> list[str]:
        """Runs that are not ended and wait for nobody (must be none after recovery)."""
        rows = self.rows()
        found = self.left_behind()
        for run_id, (status, state) in rows.items():
            calls = state.get("calls") or ()
            if status == "awaiting_resolution" and not any(
                c["status"] == "uncertain" for c in calls
            ):
                found.append(run_id)
        return found


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


def kill_worker(bench: Bench, rng: random.Random, tally: Tally) -> None:
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
    tally.where[where(bench.last_phase())] += 1


def kill_approver(bench: Bench, rng: random.Random, tally: Tally) -> None:
    waiting = [r for r, pending in bench.open_approvals().items() if pending]
    if not waiting:
        proc = bench.start("wait")
        out, err = proc.communicate(timeout=60)
        if proc.returncode != 0:
            raise SystemExit(f"could not start a waiting run:\n{err}")
        waiting = [out.strip()]
    run_id = rng.choice(waiting)
    pause = rng.random() < 0.5
    decided = bench.root / "decided"
    decided.unlink(missing_ok=True)
    approver = bench.start("approve", run_id, "pause" if pause else "go")
    try:
        assert approver.stdout is not None
        if approver.stdout.readline().strip() != "ready":
            _, err = approver.communicate()
            raise SystemExit(f"the approver did not start:\n{err}")
        if pause:
            deadline = time.monotonic() + 30
            while not decided.exists() and time.monotonic() < deadline:
                time.sleep(0.002)
            tally.between_decision_and_resume += 1
        else:
            time.sleep(rng.uniform(0, 0.25))
        approver.send_signal(signal.SIGKILL)
        approver.wait(30)
    finally:
        if approver.poll() is None:
            approver.kill()
        approver.communicate()
    tally.approver_kills += 1
    tally.where["an approver" + (" between decision and resume" if pause else "")] += 1


def one_kill(bench: Bench, rng: random.Random, tally: Tally, approvers: float) -> None:
    approver = rng.random() < approvers
    if approver:
        kill_approver(bench, rng, tally)
    else:
        kill_worker(bench, rng, tally)
    tally.kills += 1
    if bench.integrity() != "ok":
        tally.integrity_failures += 1
    before = bench.rows()
    seen = len(bench.ledger())
    interrupted = bench.left_behind()
    tally.answered_left_behind += sum(1 for r in interrupted if before[r][0] != "running")
    tally.interrupted += len(interrupted)
    if not interrupted:
        if approver:
            tally.undecided += 1
        else:
            tally.nothing_left += 1
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
        out, err = proc.communicate(timeout=90)
        if proc.returncode != 0:
            raise SystemExit(f"recovery failed:\n{err}")
        recovered = [json.loads(line) for line in out.splitlines()]
    if sorted(r["run_id"] for r in recovered) != sorted(interrupted):
        tally.problems.append(f"kill {tally.kills}: recovered {recovered}, not {interrupted}")
    for line in recovered:
        if line["final"] in ("completed", "awaiting_approval"):  # a big run may stop again
            tally.completed += 1
        if line["uncertain"] and line["run_id"] in in_flight:
            tally.uncertain += 1
    stuck = bench.stuck()
    tally.stuck += len(stuck)
    if stuck:
        tally.problems.append(f"kill {tally.kills}: stuck after recovery: {stuck}")
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
    parser.add_argument("--kills", type=int, default=200, help="how many kills (default 200)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--lease", type=float, default=0.5, help="state.lease in seconds")
    parser.add_argument(
        "--approvers", type=float, default=0.4, help="share of kills of an approver (0.4)"
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    tally = Tally()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="harness-crash-") as folder:
        bench = Bench(Path(folder), args.lease)
        for n in range(args.kills):
            one_kill(bench, rng, tally, args.approvers)
            print(f"\rkill {n + 1}/{args.kills}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        open_now = [r for r, pending in bench.open_approvals().items() if pending]
        tally.operator = len(open_now)
        if open_now:  # their approver died before deciding: an operator answers them
            proc = bench.start("operator", *open_now)
            _, err = proc.communicate(timeout=300)
            if proc.returncode != 0:
                raise SystemExit(f"the operator failed:\n{err}")
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
        (
            "  of them approvers",
            str(tally.approver_kills),
            f"{tally.between_decision_and_resume} between the saved decision and the resume",
        ),
        ("runs left behind (interrupted)", str(tally.interrupted), ""),
        (
            "  of them answered but never resumed",
            str(tally.answered_left_behind),
            "their approver died after deciding",
        ),
        (
            "runs resumed to an end or the next approval",
            str(tally.completed),
            f"of {tally.interrupted}",
        ),
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
        ("stuck runs after recovery", str(tally.stuck), "must be 0"),
        ("PRAGMA integrity_check failures", str(tally.integrity_failures), "must be 0"),
        ("runs not completed at the end", str(len(unfinished)), "must be 0"),
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
    if tally.nothing_left:
        print(
            f"{tally.nothing_left} worker {'kill' if tally.nothing_left == 1 else 'kills'} "
            "came before the next run's creation was committed, or while the run waited for "
            "an approval: no run was left behind."
        )
    if tally.undecided:
        print(
            f"{tally.undecided} approver {'kill' if tally.undecided == 1 else 'kills'} left "
            "nothing behind: before the decision was saved (the run still waited for its "
            "answer), or after the resumed run had ended or stopped again; "
            f"at the end an operator answered the {tally.operator} runs still waiting."
        )
    failed = (
        tally.lost
        or tally.reinvoked
        or tally.duplicates
        or tally.integrity_failures
        or tally.stuck
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
