"""A `function` model that calls sys.exit() fails its run; it does not end the process.

Before, `SystemExit` went through the run loop: the process ended (exit code: the function's),
the run stayed `running` with its lease released, and every `worker` that claimed it next
ended the same way, one after the other.
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

MODELS = """
import sys


def leave(request):
    sys.exit(4)


async def leave_async(request):
    raise SystemExit(5)


def interrupted(request):
    raise KeyboardInterrupt
"""

SPEC = """
version: 1
name: exits
models:
  default: {{use: function, call: "{module}:{fn}"}}
tasks:
  t: {{prompt: p}}
state: {{use: sqlite, path: state.db}}
"""


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    module = f"exits_{uuid.uuid4().hex[:12]}"
    (tmp_path / f"{module}.py").write_text(MODELS, encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    yield tmp_path, module
    sys.modules.pop(module, None)
    while str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


@pytest.mark.asyncio
@pytest.mark.parametrize(("fn", "code"), [("leave", 4), ("leave_async", 5)])
async def test_sys_exit_in_a_function_model_fails_the_run(
    folder: tuple[Path, str], fn: str, code: int
) -> None:
    root, module = folder
    spec = root / "harness.yaml"
    spec.write_text(SPEC.format(module=module, fn=fn), encoding="utf-8")
    async with ph.load(spec) as harness:
        result = await harness.run("t", "hello", principal="ann")
        stored = await harness.store.get_run(result.run_id)
    assert result.status is ph.RunStatus.FAILED
    assert result.error is not None and result.error["type"] == "HarnessError"
    assert result.error["message"].startswith(
        f"function model 'default' ({module}:{fn}) raised SystemExit({code});"
    )
    assert (stored.status, stored.lease_owner) == ("failed", None)


@pytest.mark.asyncio
async def test_ctrl_c_in_a_function_model_still_goes_through(folder: tuple[Path, str]) -> None:
    root, module = folder
    spec = root / "harness.yaml"
    spec.write_text(SPEC.format(module=module, fn="interrupted"), encoding="utf-8")
    async with ph.load(spec) as harness:
        with pytest.raises(KeyboardInterrupt):
            await harness.run("t", "hello", principal="ann")
        [summary] = await harness.runs()
    assert summary.status is ph.RunStatus.RUNNING  # resumable from its last commit


@pytest.mark.asyncio
async def test_a_worker_survives_a_run_whose_model_calls_sys_exit(
    folder: tuple[Path, str],
) -> None:
    root, module = folder
    spec = root / "harness.yaml"
    # a run left `running` from its last commit (Ctrl-C during its model call)
    spec.write_text(SPEC.format(module=module, fn="interrupted"), encoding="utf-8")
    async with ph.load(spec) as harness:
        with pytest.raises(KeyboardInterrupt):
            await harness.run("t", "hello", principal="ann")
    spec.write_text(SPEC.format(module=module, fn="leave"), encoding="utf-8")
    exe = Path(sys.executable).with_name("pytest-harness")
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    env["PYTHONPATH"] = str(root)

    def command(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(exe), *argv], cwd=root, env=env, capture_output=True, text=True, timeout=60
        )

    served = command("worker", "harness.yaml", "--exit-when-idle")
    # before: the worker ended with the model's exit code 4, and so did the next one
    assert served.returncode == 0, (served.returncode, served.stderr)
    assert '"event": "run_done"' in served.stderr and '"status": "failed"' in served.stderr
    assert '"event": "worker_stopped"' in served.stderr
    ran = command("run", "t", "hello", "harness.yaml")
    assert ran.returncode == 1, (ran.returncode, ran.stdout, ran.stderr)  # before: 4, silent
    assert "status: failed" in ran.stdout and "SystemExit(4)" in ran.stdout
