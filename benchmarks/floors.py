"""Where a run's instructions go: the rows of `run.py` that miss their aims, taken apart.

    .venv/bin/python benchmarks/floors.py [--runs 100,300]

Each row runs the bench task of `run.py` (3 turns: `lookup_order`, `refund`, a text; memory
store) in a child process under `valgrind --tool=callgrind`, twice (`--runs` runs, after one
warm-up run), and prints the instructions a run takes: the difference between the two
children's totals divided by the difference in runs, so start-up and imports cancel out.
Instruction counts do not depend on what else the machine does (`PYTHONHASHSEED=0` makes them
repeat to about 0.1%), so each row is compared with row A of the same invocation.

Some rows take a part of the work away, to show what it costs. They patch the package in the
child only, and what they leave is not a harness anyone could ship: each one drops a guarantee
(named in the row). That is the point: the rest of a row is what the design costs with that
guarantee gone, the floor under the aim.

A. a run, recording off (`run.py` row 1)
B. A, its checkpoints neither encoded nor checked: the state at each of its 5 commits is kept
   as the object (the store would no longer hold the state as JSON nor refuse what JSON cannot
   hold, as the sqlite and Postgres stores do)
C. a run, recording on (row 8)
D. C without encoding its journal payloads (the journal would hold nothing it could export)
E. C without its request digests (a replay could not tell a changed prompt)
F. C without its 3 durable `model.started` commits (a crash during a model call would leave no
   trace of the attempt: `reference/flight-recorder.md` commits it before the provider call)
G. C without all three of D, E and F
H. the replay of a recorded run, from its `Recording` (row 8's replay)

Needs `valgrind` on PATH. Nothing here asserts on a count: this is a report, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROWS: dict[str, tuple[str, bool, tuple[str, ...]]] = {
    "A": ("a run, recording off (row 1)", False, ()),
    "B": ("A, checkpoints not encoded (no JSON checkpoint: not shippable)", False, ("state",)),
    "C": ("a run, recording on (row 8)", True, ()),
    "D": ("C, journal payloads not encoded", True, ("journal",)),
    "E": ("C, no request digests", True, ("digests",)),
    "F": ("C, no durable model.started commits", True, ("durable",)),
    "G": ("C without D, E and F", True, ("journal", "digests", "durable")),
    "H": ("replay of a recorded run (row 8)", True, ("replay",)),
}


# -- the child: one row's loop, under valgrind --------------------------------------------------


def _patch(parts: Sequence[str]) -> None:
    """Take the named parts of the work away (in this child process only)."""
    import pytest_harness.store.memory as memory
    from pytest_harness.store.helpers import PreparedJSON

    if "state" in parts:
        encode = memory.encode_json

        def state_kept(value: object, what: str) -> str:
            if type(value) is PreparedJSON or what.startswith("the events of run"):
                return "{}"
            return encode(value, what)

        memory.encode_json = state_kept  # type: ignore[assignment]
    if "journal" in parts:
        import pytest_harness.store.memory_rows as rows

        def unencoded(run_id: str, drafts: Sequence[Any]) -> list[Any]:
            return [
                (d.id, d.kind, d.step, d.ts, d.attempt_id, d.execution_key, "{}") for d in drafts
            ]

        rows._encode_journal = unencoded  # type: ignore[assignment]
        memory._encode_journal = unencoded  # type: ignore[assignment]
    if "digests" in parts:
        import pytest_harness.runtime.request_digests as digests

        parts_ = {"system": "sha256:s", "tools": "sha256:t", "messages": "sha256:m"}

        def no_digests(*args: Any, **kwargs: Any) -> tuple[str, dict[str, str]]:
            return "sha256:r", dict(parts_)

        digests.request_digests = no_digests  # type: ignore[assignment]
    if "durable" in parts:
        import pytest_harness.runtime.harness_base as base

        init: Callable[..., None] = base.HarnessBase.__init__

        def not_durable(self: Any, *args: Any, **kwargs: Any) -> None:
            kwargs["durable"] = False
            init(self, *args, **kwargs)

        base.HarnessBase.__init__ = not_durable  # type: ignore[method-assign]


async def _loop(spec: Path, runs: int, record: bool, replay: bool) -> None:
    import run as bench

    import pytest_harness as ph

    async with ph.load(spec, env=None, record=record) as harness:
        result = await harness.run(bench.TASK, bench.INPUT, principal=bench.PRINCIPAL)
        bench.check_result(result)
        if replay:
            recording = (await ph.Recording.from_store(harness.store, result.run_id)).redacted()
            if not (await harness.replay(recording)).same:
                raise RuntimeError("the bench replay drifted")
            for _ in range(runs):
                await harness.replay(recording)
            return
        for _ in range(runs):
            result = await harness.run(bench.TASK, bench.INPUT, principal=bench.PRINCIPAL)
        bench.check_result(result)


def child(row: str, runs: int, spec: Path) -> None:
    _, record, parts = ROWS[row]
    sys.path.insert(0, str(spec.parent))  # the bench app's tools module
    _patch([p for p in parts if p != "replay"])
    asyncio.run(_loop(spec, runs, record, "replay" in parts))


# -- the parent ---------------------------------------------------------------------------------


def instructions(row: str, runs: int, spec: Path) -> int:
    """The instructions one child of `row` took for `runs` runs (its whole process)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONHASHSEED"] = "0"
    env["PYTHONPATH"] = os.pathsep.join([str(BENCH_DIR), env.get("PYTHONPATH", "")])
    code = (
        f"import floors; floors.child({row!r}, {runs}, __import__('pathlib').Path({str(spec)!r}))"
    )
    argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    done = subprocess.run(
        [*argv, sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"row {row} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    for line in done.stderr.splitlines():
        if "Collected" in line:
            return int(line.split()[-1].replace(",", ""))
    raise RuntimeError(f"row {row}: valgrind printed no total:\n{done.stderr[-2000:]}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", default="100,300", help="the two run counts (default 100,300)")
    parser.add_argument("--only", default="", help="rows to measure, e.g. A,B (default all)")
    args = parser.parse_args(argv)
    low, high = sorted(int(n) for n in args.runs.split(","))
    if shutil.which("valgrind") is None:
        raise SystemExit("floors.py needs valgrind on PATH (Debian: apt-get install valgrind)")
    sys.path.insert(0, str(BENCH_DIR))
    import run as bench

    wanted = [r for r in ROWS if not args.only or r in args.only.split(",")]
    work = Path(tempfile.mkdtemp(prefix="harness-floors-"))
    try:
        app = bench.write_app(work / "app")
        spec = bench.write_spec(app, "floors", {"use": "memory"})
        counts: dict[str, float] = {}
        for row in wanted:
            instructions(row, 1, spec)  # warm-up: bytecode caches
            per_run = (instructions(row, high, spec) - instructions(row, low, spec)) / (high - low)
            counts[row] = per_run
            versus = ""  # every row against A; the replay also against the run it replays
            if row != "A" and "A" in counts:
                versus = f"  {per_run / counts['A']:.2f}x A"
            if row == "H" and "C" in counts:
                versus += f", {per_run / counts['C']:.2f}x C"
            print(f"{row}  {ROWS[row][0]:<62} {per_run / 1e6:7.3f}M instructions/run{versus}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
