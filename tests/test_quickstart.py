"""The README's seed flow across real processes: a run waits, another process approves it."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parent.parent / "examples" / "quickstart"


def run(script: str, *args: str, cwd: Path) -> str:
    env = {**os.environ, "HARNESS_ENV": "offline"}
    done = subprocess.run(
        [sys.executable, script, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_approve_from_a_second_process(tmp_path: Path) -> None:
    app = tmp_path / "quickstart"
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns(".harness", "__pycache__"))
    first = run("main.py", cwd=app)
    status, run_id = first.split(": ")
    assert status == "awaiting_approval" and run_id.startswith("run_")
    db = app / ".harness" / "state.db"
    assert stat.S_IMODE(db.stat().st_mode) == 0o600

    assert run("approve.py", run_id, cwd=app) == (
        "completed: Done: the refund is on its way to your card."
    )
    assert run("approve.py", run_id, cwd=app) == "completed: nothing to approve"


def test_a_cached_approve_imports_no_validation_library(tmp_path: Path) -> None:
    """With the spec, the script and the tool schemas cached, `approve.py` imports neither
    pydantic (spec and script validation, tool schemas, results) nor YAML nor docstring parsing
    (#13)."""
    app = tmp_path / "quickstart"
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns(".harness", "__pycache__"))
    run_id = run("main.py", cwd=app).split(": ")[1]
    probe = app / "probe.py"
    probe.write_text(
        "import runpy, sys\n"
        "sys.argv = ['approve.py', sys.argv[1]]\n"
        "runpy.run_path('approve.py', run_name='__main__')\n"
        "heavy = {'pydantic', 'pydantic_core', 'yaml', 'docstring_parser', 'rich', 'jinja2'}\n"
        "found = heavy & {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(found | {'cel'} & set(sys.modules)))  # cel.cel, the extension, is fine\n"
    )
    out = run("probe.py", run_id, cwd=app).splitlines()
    assert out == ["completed: Done: the refund is on its way to your card.", "[]"]
