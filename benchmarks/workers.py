"""Workers on one database: throughput by number of worker processes, and a random-kill test.

    .venv/bin/python benchmarks/workers.py scale [--runs 200] [--repeat 3]
    .venv/bin/python benchmarks/workers.py kill [--store postgres] [--runs 60] [--workers 4]
                                                [--kills 10] [--seed 1]

`scale` prints one table, every row measured in the same invocation, on the bench app of
`run.py` (3 turns: `lookup_order`, `refund`, a text; a scripted model; an allow rule; an output
guard; a budget):

1. One process, sequential `await harness.run(...)`, on postgres (`synchronous_commit` as the
   server has it, `on` by default) and on sqlite (`synchronous: full`).
2. LangGraph's `PostgresSaver` on the same server, the same task shape (model node → tool node
   loop, `durability="sync"`: each checkpoint is written before the next step, as each of our
   boundaries is committed before the next), sequential `invoke`s in one process. Needs
   `pip install -e '.[bench]'` (`langgraph-checkpoint-postgres`).
3. `pytest-harness worker` processes, 1, 2 and 4 of them, each driving `--concurrency` runs at
   once, sharing one store that holds `--runs` runs nobody drives (their creator stopped before
   driving them): runs/s from the first claim to the last finished run, read from the workers'
   JSON log lines. On postgres and on sqlite.

Each row is the median of `--repeat` repeats; a fresh schema (postgres) or file (sqlite) per
repeat. The server is `$HARNESS_BENCH_POSTGRES` (default `postgresql://postgres@127.0.0.1:5432/
test`); every schema it makes is dropped at the end.

`kill` starts `--workers` worker processes on `--runs` runs of a task that calls an idempotent
tool twice (a "service" that applies each execution key's effect once and counts repeats),
SIGKILLs a random worker at random moments (`--kills` times, starting a replacement each time),
then waits until every run ended and stops the survivors with SIGTERM. It prints: runs, kills,
runs completed, lost results (a run not completed, or a tool result of a completed run the
service never produced), tools re-invoked after their result was committed (a `tool_call_start`
event after that key's `tool_result`), duplicate effects (the service applied one key twice),
stuck runs, and the clean exits of the survivors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import yaml

import pytest_harness as ph
from pytest_harness.runtime.state import RunState
from pytest_harness.store.base import EventDraft, NewRun

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import bench_peers  # noqa: E402
import run as bench  # noqa: E402

DSN = os.environ.get("HARNESS_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
DSN_ENV = "HARNESS_BENCH_DSN"


def progress(message: str) -> None:
    print(f"  … {message}", file=sys.stderr, flush=True)


@contextmanager
def schemas() -> Iterator[list[str]]:
    """Names handed out for fresh schemas; every one is dropped at the end."""
    made: list[str] = []
    try:
        yield made
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            for name in made:
                conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE".encode())


def new_schema(made: list[str]) -> str:
    name = f"bench_{uuid.uuid4().hex[:12]}"
    made.append(name)
    return name


def state_for(store: str, label: str, made: list[str]) -> dict[str, Any]:
    if store == "postgres":
        return {"use": "postgres", "dsn_env": DSN_ENV, "schema": new_schema(made), "lease": "5s"}
    return {"use": "sqlite", "path": f"db/{label}.db", "synchronous": "full", "lease": "5s"}


def write_spec(app: Path, label: str, state: dict[str, Any]) -> Path:
    path = app / f"harness-{label}.yaml"
    path.write_text(yaml.safe_dump(bench.spec_document(state), sort_keys=False))
    return path


# -- scale --------------------------------------------------------------------------------------


def in_process(app: Path, store: str, runs: int, made: list[str], label: str) -> float:
    spec = write_spec(app, label, state_for(store, label, made))
    return asyncio.run(bench.harness_loop(spec, runs))


def langgraph_postgres(runs: int, made: list[str]) -> float:
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    schema = new_schema(made)
    with psycopg.connect(DSN, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}".encode())
    with psycopg.connect(
        DSN,
        autocommit=True,
        prepare_threshold=0,
        row_factory=dict_row,
        options=f"-c search_path={schema}",
    ) as conn:
        saver = PostgresSaver(conn)  # type: ignore[arg-type]
        saver.setup()
        return bench_peers._langgraph_loop(bench_peers.build_graph(saver), runs)


async def seed(spec: Path, runs: int) -> list[str]:
    ids: list[str] = []
    async with ph.load(spec) as harness:
        for _ in range(runs):
            run_id = f"run_{uuid.uuid4().hex}"
            await harness.store.create_run(
                NewRun(
                    run_id=run_id,
                    session_id=f"ses_{uuid.uuid4().hex}",
                    task=bench.TASK,
                    tenant=None,
                    principal={"id": bench.PRINCIPAL, "roles": [], "tenant": None},
                    input=bench.INPUT,
                    labels={},
                    idempotency_key=None,
                    status="running",
                    state=RunState().to_dict(),
                    events=[EventDraft("run_started", {"task": bench.TASK})],
                )
            )
            ids.append(run_id)
    return ids


def worker_argv(spec: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest_harness", "worker", str(spec), *extra]


def read_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


def workers_throughput(
    app: Path, store: str, n: int, runs: int, made: list[str], concurrency: int
) -> float:
    label = f"{store}-w{n}-{uuid.uuid4().hex[:6]}"
    spec = write_spec(app, label, state_for(store, label, made))
    asyncio.run(seed(spec, runs))
    env = {**os.environ, "PYTHONPATH": str(app), DSN_ENV: DSN}
    logs = [app / f"{label}-{i}.log" for i in range(n)]
    procs = []
    for log in logs:
        with log.open("wb") as sink:
            procs.append(
                subprocess.Popen(
                    worker_argv(
                        spec,
                        "--idle",
                        "0.05",
                        "--exit-when-idle",
                        "--concurrency",
                        str(concurrency),
                    ),
                    stdout=subprocess.DEVNULL,
                    stderr=sink,
                    env=env,
                )
            )
    for proc, log in zip(procs, logs, strict=True):
        if proc.wait(timeout=600) != 0:
            raise RuntimeError(f"worker exited {proc.returncode}:\n{log.read_text()}")
    events = [e for log in logs for e in read_log(log)]
    claimed = [e["ts"] for e in events if e["event"] == "run_claimed"]
    done = [e for e in events if e["event"] == "run_done"]
    if len(done) != runs or any(e["status"] != "completed" for e in done):
        raise RuntimeError(f"{len(done)} of {runs} runs completed")
    return runs / (max(e["ts"] for e in done) - min(claimed))


def scale(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-workers-", dir=BENCH_DIR.parent))
    app = bench.write_app(work / "app")
    rows: list[tuple[str, list[float]]] = []
    try:
        with schemas() as made:
            os.environ[DSN_ENV] = DSN
            sys.path.insert(0, str(app))
            for store in ("postgres", "sqlite"):
                progress(f"{store}: one process, {args.repeat} x {args.runs} runs")
                rows.append(
                    (
                        f"pytest-harness, {store}, 1 process, sequential run()",
                        [
                            args.runs / in_process(app, store, args.runs, made, f"{store}-{i}")
                            for i in range(args.repeat)
                        ],
                    )
                )
            try:
                progress(f"LangGraph PostgresSaver: {args.repeat} x {args.runs} runs")
                rows.append(
                    (
                        "LangGraph PostgresSaver, 1 process, durability=sync",
                        [
                            args.runs / langgraph_postgres(args.runs, made)
                            for _ in range(args.repeat)
                        ],
                    )
                )
            except ImportError as exc:
                print(f"LangGraph PostgresSaver skipped: {exc}; pip install -e '.[bench]'")
            for store in ("postgres", "sqlite"):
                for n in (1, 2, 4):
                    progress(f"{store}: {n} worker processes, {args.repeat} x {args.runs} runs")
                    rows.append(
                        (
                            f"pytest-harness worker x {n}, {store}",
                            [
                                workers_throughput(app, store, n, args.runs, made, args.concurrency)
                                for _ in range(args.repeat)
                            ],
                        )
                    )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {name: statistics.median(samples) for name, samples in rows}
    saver = medians.get("LangGraph PostgresSaver, 1 process, durability=sync")
    base = {
        store: medians[f"pytest-harness worker x 1, {store}"] for store in ("postgres", "sqlite")
    }
    print(
        f"\nworkers benchmark: {args.runs} runs per row, median of {args.repeat}, workers "
        f"with --concurrency {args.concurrency}, {cpu_note()}\n"
    )
    print("| row | runs/s | vs PostgresSaver | vs 1 worker |")
    print("| --- | ---: | ---: | ---: |")
    for name, value in medians.items():
        vs_saver = f"{value / saver:.1f}x" if saver else "n/a"
        store = (
            "postgres"
            if "postgres" in name and "worker" in name
            else ("sqlite" if "worker" in name else None)
        )
        vs_one = f"{value / base[store]:.2f}x" if store else ""
        print(f"| {name} | {value:,.0f} | {vs_saver} | {vs_one} |")


def cpu_note() -> str:
    return f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}"


# -- kill ---------------------------------------------------------------------------------------

KILL_TOOLS = '''
import os, random, time
import pytest_harness as ph

HERE = os.path.dirname(__file__)


def _append(name, line):
    fd = os.open(os.path.join(HERE, name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\\n").encode())
    finally:
        os.close(fd)


def charge(step: int) -> dict:
    """An idempotent service call: the service applies each execution key's effect once."""
    ctx = ph.current_tool_context()
    _append("invocations.txt", f"{ctx.execution_key} {ctx.attempt} {os.getpid()}")
    time.sleep(random.uniform(0.0, 0.06))
    try:  # the service's dedup table: one marker per key, created atomically
        os.close(os.open(os.path.join(HERE, "keys", ctx.execution_key), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        _append("repeats.txt", ctx.execution_key)
    else:
        _append("effects.txt", f"{ctx.execution_key} {os.getpid()}")
    return {"step": step, "key": ctx.execution_key}
'''


def kill_spec(app: Path, state: dict[str, Any]) -> Path:
    document = {
        "version": 1,
        "name": "kill-bench",
        "models": {
            "default": {
                "use": "scripted",
                "script": [
                    {"call": "charge", "args": {"step": 1}},
                    {"call": "charge", "args": {"step": 2}},
                    {"say": "charged twice"},
                ],
            }
        },
        "tools": {"charge": {"call": "kill_tools:charge", "replay": "idempotent"}},
        "tasks": {"t": {"prompt": "p", "tools": ["charge"]}},
        "state": {**state, "lease": "1s"},
    }
    path = app / "harness.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


async def seed_kill(spec: Path, runs: int) -> list[str]:
    ids: list[str] = []
    async with ph.load(spec) as harness:
        for i in range(runs):
            run_id = f"run_{uuid.uuid4().hex}"
            await harness.store.create_run(
                NewRun(
                    run_id=run_id,
                    session_id=f"ses_{uuid.uuid4().hex}",
                    task="t",
                    tenant=None,
                    principal={"id": "ann", "roles": [], "tenant": None},
                    input=f"job {i}",
                    labels={},
                    idempotency_key=None,
                    status="running",
                    state=RunState().to_dict(),
                    events=[EventDraft("run_started", {"task": "t"})],
                )
            )
            ids.append(run_id)
    return ids


async def final_state(spec: Path, run_ids: list[str], timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    async with ph.load(spec) as harness:
        while True:
            results = {r: await harness.result(r) for r in run_ids}
            if all(res.status.ended for res in results.values()) or time.monotonic() > deadline:
                events = {r: await harness.store.events(r) for r in run_ids}
                return {"results": results, "events": events}
            await asyncio.sleep(0.2)


def wait_busy(
    live: list[subprocess.Popen[bytes]], logs: list[Path], rng: random.Random, timeout: float = 60
) -> subprocess.Popen[bytes] | None:
    """A random live worker that is driving a run now (claimed it, not finished it)."""
    deadline = time.monotonic() + timeout
    by_pid = {proc.pid: proc for proc in live}
    while time.monotonic() < deadline:
        busy = []
        for log in logs:
            entries = read_log(log) if log.exists() else []
            if not entries or int(entries[0]["worker"].split(":")[-2]) not in by_pid:
                continue
            claimed = {e["run_id"] for e in entries if e["event"] == "run_claimed"}
            ended = {e.get("run_id") for e in entries if e["event"] != "run_claimed"}
            if claimed - ended:
                busy.append(by_pid[int(entries[0]["worker"].split(":")[-2])])
        if busy:
            return rng.choice(busy)
        time.sleep(0.005)
    return None


def kill(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="bench-kill-", dir=BENCH_DIR.parent))
    app = work / "app"
    app.mkdir()
    (app / "kill_tools.py").write_text(KILL_TOOLS)
    (app / "keys").mkdir()
    env = {**os.environ, "PYTHONPATH": str(app), DSN_ENV: DSN}
    os.environ[DSN_ENV] = DSN
    sys.path.insert(0, str(app))
    started = time.monotonic()
    try:
        with schemas() as made:
            spec = kill_spec(app, state_for(args.store, "kill", made))
            run_ids = asyncio.run(seed_kill(spec, args.runs))
            live: list[subprocess.Popen[bytes]] = []
            logs: list[Path] = []
            kills = 0

            def start() -> None:
                log = app / f"worker-{len(logs)}.log"
                with log.open("wb") as sink:
                    live.append(
                        subprocess.Popen(
                            worker_argv(spec, "--idle", "0.1"),
                            stdout=subprocess.DEVNULL,
                            stderr=sink,
                            env=env,
                        )
                    )
                logs.append(log)

            for _ in range(args.workers):
                start()
            for k in range(args.kills):
                victim = wait_busy(live, logs, rng)
                if victim is None:
                    progress("no worker is driving a run any more: no more kills")
                    break
                time.sleep(rng.uniform(0.0, 0.08))  # a random moment of its run
                live.remove(victim)
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                kills += 1
                progress(f"kill {k + 1}/{args.kills}: worker {victim.pid}")
                start()
            state = asyncio.run(final_state(spec, run_ids, timeout=120))
            for proc in live:
                proc.send_signal(signal.SIGTERM)
            clean = sum(proc.wait(timeout=60) == 0 for proc in live)
    finally:
        elapsed = time.monotonic() - started
    results, events = state["results"], state["events"]
    effects = Counter(line.split()[0] for line in (app / "effects.txt").read_text().splitlines())
    invocations = [line.split() for line in (app / "invocations.txt").read_text().splitlines()]
    completed = [r for r in results.values() if r.ok]
    lost = len(results) - len(completed)
    for result in completed:
        for call in result.trace.tool_calls("charge"):
            if call.outcome != "ok" or call.result["key"] not in effects:
                lost += 1
    after_commit = 0
    for evs in events.values():
        committed: set[str] = set()
        for event in evs:
            key = event.data.get("execution_key")
            if event.kind == "tool_result":
                committed.add(key)
            elif event.kind == "tool_call_start" and key in committed:
                after_commit += 1
    again = sum(1 for _, attempt, _ in invocations if attempt != "1")
    repeats_file = app / "repeats.txt"
    repeats = len(repeats_file.read_text().splitlines()) if repeats_file.exists() else 0
    stuck = sum(1 for r in results.values() if not r.status.ended)
    interrupted = 0
    for log in logs:
        entries = read_log(log)
        claimed = {e["run_id"] for e in entries if e["event"] == "run_claimed"}
        finished = {e["run_id"] for e in entries if e["event"] in ("run_done", "run_released")}
        interrupted += len(
            claimed - finished - {e.get("run_id") for e in entries if e["event"] == "run_error"}
        )
    stale = sum(
        1
        for log in logs
        for e in read_log(log)
        if e["event"] == "run_error" and "lost the lease" in e.get("message", "")
    )
    shutil.rmtree(work, ignore_errors=True)
    print(
        f"\nkill test on {args.store}: {args.runs} runs, {args.workers} workers at a time, "
        f"{kills} SIGKILLs, {elapsed:.0f} s, seed {args.seed}\n"
    )
    print("| figure | n | |")
    print("| --- | ---: | --- |")
    print(f"| runs | {len(results)} | |")
    print(f"| kills (SIGKILL of a random busy worker at a random moment) | {kills} | |")
    print(f"| runs a kill interrupted (claimed, never finished by that worker) | {interrupted} | |")
    print(f"| runs completed | {len(completed)} | of {len(results)} |")
    print(f"| lost results | {lost} | must be 0 |")
    print(f"| tools invoked again after their result was committed | {after_commit} | must be 0 |")
    print(
        f"| idempotent calls re-invoked by recovery (same key, next attempt) | {again} | allowed |"
    )
    print(f"| repeats the service deduplicated by execution key | {repeats} | |")
    twice = sum(n > 1 for n in effects.values())
    print(f"| duplicate effects (one key applied twice) | {twice} | must be 0 |")
    print(f"| stale writes refused by fencing (lease lost) | {stale} | |")
    print(f"| stuck runs | {stuck} | must be 0 |")
    print(f"| survivors stopped cleanly by SIGTERM | {clean} | of {len(live)} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    s = commands.add_parser("scale")
    s.add_argument("--runs", type=int, default=200)
    s.add_argument("--repeat", type=int, default=3)
    s.add_argument("--concurrency", type=int, default=4, help="runs each worker drives at once")
    k = commands.add_parser("kill")
    k.add_argument("--store", choices=["postgres", "sqlite"], default="postgres")
    k.add_argument("--runs", type=int, default=60)
    k.add_argument("--workers", type=int, default=4)
    k.add_argument("--kills", type=int, default=10)
    k.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    scale(args) if args.command == "scale" else kill(args)


if __name__ == "__main__":
    main()
