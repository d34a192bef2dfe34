"""A small spec on Temporal, its tools, and worker processes for the tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest_harness as ph

TOOLS = '''
import os
import time
from pathlib import Path

from pytest_harness.tools.context import current_tool_context


def _effect(name: str) -> str:
    ctx = current_tool_context()
    folder = Path(os.environ["EFFECTS"])
    with (folder / "calls.log").open("a") as log:
        log.write(f"{name} {ctx.execution_key} {ctx.attempt} {os.getpid()}\\n")
    if os.environ.get("HANG_FIRST") and ctx.attempt == 1:
        (folder / f"hanging-{ctx.execution_key}").write_text(str(os.getpid()))
        time.sleep(60)
    applied = folder / "applied.log"
    done = applied.read_text().split() if applied.exists() else []
    if ctx.execution_key not in done:  # idempotent: one effect per execution key
        with applied.open("a") as log:
            log.write(ctx.execution_key + "\\n")
    return f"{name} done"


def refund(order_id: str, amount: int) -> str:
    """Refund an order."""
    return _effect("refund")


def charge(order_id: str, amount: int) -> str:
    """Charge a card."""
    return _effect("charge")
'''


def temporal_execution(address: str) -> str:
    """A spec's `execution:` line: runs on Temporal at `address`, on a task queue of their own."""
    return (
        f'execution: {{use: temporal, address: "{address}", task_queue: q-{uuid.uuid4().hex[:8]}}}'
    )


def write_app(folder: Path, spec: str, **modules: str) -> Path:
    """A test app in `folder`: an `effects` folder, the `ttools` module, `modules` (name: source)
    and `spec` (dedented) as its `harness.yaml`; the spec's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "effects").mkdir(exist_ok=True)
    (folder / "ttools.py").write_text(TOOLS)
    for name, source in modules.items():
        (folder / f"{name}.py").write_text(source)
    path = folder / "harness.yaml"
    path.write_text(textwrap.dedent(spec))
    return path


def make_spec(
    folder: Path, address: str, *, queue: str | None = None, prompt: str = "Desk."
) -> Path:
    """A spec with a refund task (idempotent tool, approval over 100) and a charge task (manual)."""
    queue = queue or f"q-{uuid.uuid4().hex[:8]}"
    return write_app(
        folder,
        f"""\
            version: 1
            name: tdesk
            models:
              refunder:
                use: scripted
                script:
                  - call: refund
                    args: {{order_id: A-1, amount: 250}}
                  - say: "Refunded."
              charger:
                use: scripted
                script:
                  - call: charge
                    args: {{order_id: A-1, amount: 5}}
                  - say: "Charged."
            tools:
              refund: {{call: "ttools:refund", replay: idempotent}}
              charge: {{call: "ttools:charge"}}
            rules:
              - id: big-refund
                when: tool == "refund" && args.amount > 100
                then: approve
                approvers: [finance]
            tasks:
              refunds: {{model: refunder, prompt: {prompt!r}, tools: [refund]}}
              small_refunds: {{model: refunder, prompt: {prompt!r}, tools: [refund], rules: []}}
              charges: {{model: charger, prompt: {prompt!r}, tools: [charge]}}
            state: {{use: memory, record: true, lease: 2s}}
            execution: {{use: temporal, address: "{address}", task_queue: {queue}}}
            """,
    )


def cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_harness", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


class WorkerProcess:
    """`pytest-harness worker SPEC` in a process of its own, ready when it says so."""

    def __init__(self, spec: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        effects = str(spec.parent / "effects")
        self.log = (spec.parent / f"worker-{uuid.uuid4().hex[:6]}.log").open("w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pytest_harness", "worker", str(spec), *extra],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "EFFECTS": effects, **(env or {})},
            text=True,
        )
        deadline = time.monotonic() + 60  # a loaded 2-core machine takes its time to import
        while "ready on" not in (said := self.output()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()  # closes the log: what it said was read before
                raise AssertionError(f"the worker did not start: {said}")
            time.sleep(0.1)

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        """Stop the worker (SIGINT, else SIGKILL after 10 s) and print what it said.

        Pytest shows the print with a failing test only: what went wrong inside a worker (a
        workflow task's traceback, a panic, a nondeterminism error) is in its log, not in the
        test's traceback.
        """
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.log.closed:
            print(f"--- worker pid {self.proc.pid} (exit {self.proc.returncode}) said:")
            print(self.output())
            self.log.close()


def wait_for(folder: Path, pattern: str, count: int = 1, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while len(list(folder.glob(pattern))) < count:
        assert time.monotonic() < deadline, f"{count} {pattern} never appeared in {folder}"
        time.sleep(0.05)


async def taken_over(
    harness: ph.Harness,
    spec: Path,
    task: str,
    input: str,
    env: dict[str, str] | None = None,
    ready: Callable[[str], bool] | None = None,
) -> ph.RunResult:
    """The result of a run whose first worker is SIGKILLed in its first tool attempt.

    A second worker takes the run over. `ready(run_id)`, when given, must hold before the kill.
    """
    first = WorkerProcess(spec, env={**(env or {}), "HANG_FIRST": "1"})
    second = None
    try:
        handle = await harness.submit(task, input, principal="ann")
        wait_for(spec.parent / "effects", "hanging-*")
        deadline = time.monotonic() + 30
        while ready is not None and not ready(handle.run_id):
            assert time.monotonic() < deadline, "the first worker never got ready to be killed"
            time.sleep(0.02)
        first.kill()
        second = WorkerProcess(spec, env=env)
        return await handle.result()
    finally:
        first.stop()
        if second is not None:
            second.stop()
