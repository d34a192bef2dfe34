"""A sync tool or model cut off by its timeout does not keep the program from ending.

Such a call runs in a thread nobody can stop. It ran in the event loop's default executor,
whose threads are joined when the loop closes and again at interpreter exit: after the run
had ended (`timeout` outcome, run completed), `asyncio.run(main())` never returned, and a
pytest session whose test used the `harness` fixture hung at teardown, for as long as the
call blocked (forever, for a call to a service that never answers). Each test is a real
process, so a hang is a timeout of `subprocess.run`, not of this session.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

CODE = '''
import time

from pytest_harness.models.base import ModelResponse, ProposedCall, TokenUsage


def stuck(order_id: str) -> str:
    """Blocks for an hour (a service that never answers)."""
    time.sleep(3600)
    return "never"


def model(request):
    """Calls `stuck` once, then answers; the first answer blocks for an hour."""
    if request.messages[-1]["role"] == "tool":
        return "done"
    if len([m for m in request.messages if m["role"] == "user"]) == 1 and request.turn == 0:
        time.sleep(3600)
    return ModelResponse(calls=(ProposedCall("c1", "stuck", {"order_id": "A"}),),
                         usage=TokenUsage(1, 1))
'''

SPEC = """
version: 1
name: abandoned
models:
  scripted:
    use: scripted
    script: [{{call: stuck, args: {{order_id: A-1}}}}, {{say: done}}]
  slow: {{use: function, call: "{module}:model", timeout: 0.3s, retries: 1}}
tools:
  stuck: {{call: "{module}:stuck", timeout: 0.3s}}
tasks:
  tool: {{prompt: p, tools: [stuck], model: scripted}}
  model: {{prompt: p, tools: [stuck], model: slow}}
"""

SCRIPT = """
import asyncio, sys
import pytest_harness as ph


async def main(task):
    async with ph.load("harness.yaml") as harness:
        result = await harness.run(task, "x", principal="ann")
    print(task, result.status.value, result.output, flush=True)


asyncio.run(main(sys.argv[1]))
print("returned", flush=True)
"""

TEST = """
def test_a_tool_times_out(harness):
    result = harness.run("tool", "x", principal="ann")
    assert result.ok and result.output == "done"
"""


@pytest.fixture
def app(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    module = f"abandoned_{uuid.uuid4().hex[:12]}"
    (tmp_path / f"{module}.py").write_text(CODE, encoding="utf-8")
    (tmp_path / "harness.yaml").write_text(SPEC.format(module=module), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    env["PYTHONPATH"] = str(tmp_path)
    return tmp_path, env


@pytest.mark.parametrize("task", ["tool", "model"])
def test_asyncio_run_returns_after_a_call_its_timeout_cut_off(
    app: tuple[Path, dict[str, str]], task: str
) -> None:
    root, env = app
    (root / "main.py").write_text(SCRIPT, encoding="utf-8")
    started = time.monotonic()
    # before: asyncio.run waited for the blocked thread (an hour): TimeoutExpired
    done = subprocess.run(
        [sys.executable, "main.py", task],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{task} completed done", "returned"]
    assert time.monotonic() - started < 20


def test_a_pytest_session_with_the_harness_fixture_ends(app: tuple[Path, dict[str, str]]) -> None:
    root, env = app
    (root / "test_app.py").write_text(textwrap.dedent(TEST), encoding="utf-8")
    (root / "pytest.ini").write_text(
        "[pytest]\nharness_spec = harness.yaml\nharness_env = none\n"
        "asyncio_default_fixture_loop_scope = function\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in env.items() if k != "CI"}  # not strict: no golden files here
    # before: the test passed, then the session hung at the fixture's teardown
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_app.py"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
