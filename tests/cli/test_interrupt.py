"""The console script as a real process: Ctrl-C (SIGINT) and a tool that blocks for good.

A synchronous tool runs in a thread nobody can stop. The command must still exit promptly,
once its run let go of the call (Ctrl-C, or the call's timeout), and leave the run resumable.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import pytest_harness as ph

TOOLS = '''
import os, time


def stuck(order_id: str) -> str:
    """Blocks for an hour (a call to a service that never answers)."""
    with open(os.path.join(os.path.dirname(__file__), "started"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(3600)
    return "never"
'''

SPEC = """
version: 1
name: interrupt
models:
  default:
    use: scripted
    script: [{{call: stuck, args: {{order_id: A-1}}}}, {{say: done}}]
tools:
  stuck: {{call: "{module}:stuck"{timeout}}}
tasks:
  t: {{prompt: p, tools: [stuck]}}
state: {{use: sqlite, path: state.db}}
"""


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    module = f"stuck_{uuid.uuid4().hex[:12]}"
    (tmp_path / f"{module}.py").write_text(TOOLS, encoding="utf-8")
    yield tmp_path, module
    sys.modules.pop(module, None)
    while str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def start(folder: Path, *argv: str) -> subprocess.Popen[str]:
    exe = Path(sys.executable).with_name("pytest-harness")
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    # A shell starts a background job with SIGINT ignored, and a child inherits that (Python
    # then keeps it ignored): the command would never see the test's Ctrl-C. A handler is
    # reset to the default at exec, so the child gets Ctrl-C whatever ran this test.
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(
            [str(exe), *argv],
            cwd=folder,
            env={**env, "PYTHONPATH": str(folder)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def wait_for_file(path: Path, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} first: {proc.communicate()}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def finish(proc: subprocess.Popen[str], within: float) -> tuple[int, str, str, float]:
    """Wait up to `within` seconds; the exit code, output and how long it took (killed: -9)."""
    since = time.monotonic()
    try:
        out, err = proc.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return proc.returncode, out, err, time.monotonic() - since


@pytest.mark.slow
@pytest.mark.asyncio
async def test_ctrl_c_during_a_blocked_tool_exits_at_once_and_the_run_resumes(
    folder: tuple[Path, str],
) -> None:
    root, module = folder
    spec = root / "harness.yaml"
    spec.write_text(SPEC.format(module=module, timeout=""), encoding="utf-8")
    proc = start(root, "run", "t", "refund A-1", "harness.yaml")
    wait_for_file(root / "started", proc)
    proc.send_signal(signal.SIGINT)
    code, out, err, took = finish(proc, within=20)
    assert code == 130, (code, out, err)  # before: it waited for the tool's hour, forever
    assert took < 10
    assert err.startswith("pytest-harness: error: interrupted;") and "Traceback" not in err
    assert err.count("\n") == 1
    async with ph.load(spec) as harness:
        [summary] = await harness.runs()
        record = await harness.store.get_run(summary.run_id)
        assert (record.status, record.lease_owner) == ("running", None)  # lease released
        resumed = await harness.resume(summary.run_id)  # no RunBusy: taken at once
    # the manual call was in flight: its outcome is unknown, surfaced, never guessed
    assert resumed.status is ph.RunStatus.AWAITING_RESOLUTION
    assert [p.call.name for p in resumed.pending] == ["stuck"]


@pytest.mark.slow
def test_a_tool_cut_off_by_its_timeout_does_not_hold_the_command_open(
    folder: tuple[Path, str],
) -> None:
    root, module = folder
    (root / "harness.yaml").write_text(
        SPEC.format(module=module, timeout=", timeout: 0.5s"), encoding="utf-8"
    )
    proc = start(root, "run", "t", "refund A-1", "harness.yaml")
    code, out, err, took = finish(proc, within=30)
    assert code == 0, (code, out, err)  # before: printed, then waited an hour for the thread
    assert "status: completed" in out and "output: done" in out
    assert (root / "started").exists()
    assert took < 15


@pytest.mark.slow
@pytest.mark.asyncio
async def test_sigterm_during_a_blocked_tool_releases_the_lease_and_says_so(
    folder: tuple[Path, str],
) -> None:
    root, module = folder
    spec = root / "harness.yaml"
    spec.write_text(SPEC.format(module=module, timeout=""), encoding="utf-8")
    proc = start(root, "run", "t", "refund A-1", "harness.yaml")
    wait_for_file(root / "started", proc)
    proc.send_signal(signal.SIGTERM)
    code, out, err, took = finish(proc, within=20)
    # before: killed where it stood (-15), nothing on stderr, the lease held for 30 s
    assert code == 143, (code, out, err)
    assert took < 10
    assert err.startswith("pytest-harness: error: terminated (SIGTERM);"), err
    assert "Traceback" not in err and err.count("\n") == 1
    async with ph.load(spec) as harness:
        [summary] = await harness.runs()
        record = await harness.store.get_run(summary.run_id)
        assert (record.status, record.lease_owner) == ("running", None)  # lease released
        resumed = await harness.resume(summary.run_id)  # no RunBusy: taken at once
    assert resumed.status is ph.RunStatus.AWAITING_RESOLUTION
    assert [p.call.name for p in resumed.pending] == ["stuck"]
