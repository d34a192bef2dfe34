"""A guard or a grader function that calls sys.exit() does not end the process.

Before: a guard's `SystemExit` went through the run loop, so `pytest-harness run` exited with
the guard's code and nothing on stderr, and the run was left `running` for a worker to claim
and die on in turn. A `callable` grader's `SystemExit` stopped the event loop from inside the
background grading task: the process ended with its code, the store was never closed ("Task
was destroyed but it is pending", "cannot schedule new futures after shutdown"), and the grade
was never stored. Now the run fails with a `HarnessError` naming the guard, and the grade is a
sample whose `error` says `SystemExit: 7`, as for any other exception.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import pytest_harness as ph

CODE = """
import sys


def guard(text, context):
    sys.exit(9)


def grader(result):
    sys.exit(7)


async def async_grader(result):
    raise SystemExit(8)
"""

GUARDED = """
version: 1
name: exits
models:
  default: {{use: scripted, script: [{{say: hello}}]}}
guards:
  - {{id: G9, on: output, check: "{module}:guard", action: block}}
tasks:
  t: {{prompt: p}}
state: {{use: sqlite, path: state.db}}
"""

GRADED = """
version: 1
name: exits
models:
  default: {{use: scripted, script: [{{say: hello}}]}}
tasks:
  t: {{prompt: p}}
state: {{use: sqlite, path: state.db}}
evals:
  online:
    sample: 1
    graders:
      - {{id: bye, check: callable, call: "{module}:{fn}"}}
"""


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    module = f"exits_{uuid.uuid4().hex[:12]}"
    (tmp_path / f"{module}.py").write_text(CODE, encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    yield tmp_path, module
    sys.modules.pop(module, None)
    while str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def command(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("pytest-harness")
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    env["PYTHONPATH"] = str(root)
    return subprocess.run(
        [str(exe), *argv], cwd=root, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.asyncio
async def test_sys_exit_in_a_guard_fails_the_run(folder: tuple[Path, str]) -> None:
    root, module = folder
    spec = root / "harness.yaml"
    spec.write_text(GUARDED.format(module=module), encoding="utf-8")
    async with ph.load(spec) as harness:
        result = await harness.run("t", "hello", principal="ann")
        stored = await harness.store.get_run(result.run_id)
    assert result.status is ph.RunStatus.FAILED
    assert result.error == {
        "type": "HarnessError",
        "message": f"guard 'G9' ({module}:guard) raised SystemExit(9) on the output; a guard "
        "function must return a verdict or raise an Exception, not end the process",
    }
    assert (stored.status, stored.lease_owner) == ("failed", None)


def test_the_cli_survives_a_guard_that_calls_sys_exit(folder: tuple[Path, str]) -> None:
    root, module = folder
    (root / "harness.yaml").write_text(GUARDED.format(module=module), encoding="utf-8")
    ran = command(root, "run", "t", "hello", "harness.yaml")
    assert ran.returncode == 1, (ran.returncode, ran.stdout, ran.stderr)  # before: 9, silent
    assert "status: failed" in ran.stdout and "SystemExit(9)" in ran.stdout


@pytest.mark.asyncio
@pytest.mark.parametrize(("fn", "code"), [("grader", 7), ("async_grader", 8)])
async def test_sys_exit_in_a_grader_is_the_grades_error(
    folder: tuple[Path, str], fn: str, code: int
) -> None:
    root, module = folder
    spec = root / "harness.yaml"
    spec.write_text(GRADED.format(module=module, fn=fn), encoding="utf-8")
    async with ph.load(spec) as harness:
        result = await harness.run("t", "hello", principal="ann")
        await harness.flush_evals()
        [sample] = await harness.samples()
    assert result.status is ph.RunStatus.COMPLETED
    assert (sample.grader, sample.passed, sample.score) == ("bye", False, None)
    assert sample.error == f"SystemExit: {code}"


def test_the_cli_survives_a_grader_that_calls_sys_exit(folder: tuple[Path, str]) -> None:
    root, module = folder
    (root / "harness.yaml").write_text(GRADED.format(module=module, fn="grader"), encoding="utf-8")
    ran = command(root, "run", "t", "hello", "harness.yaml")
    # before: exit 7, with "Task was destroyed but it is pending!" and tracebacks on stderr
    assert ran.returncode == 0, (ran.returncode, ran.stdout, ran.stderr)
    assert "status: completed" in ran.stdout
    assert ran.stderr == ""
