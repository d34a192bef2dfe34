"""An unreachable PostgreSQL skips the postgres tests on a laptop and fails them under CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEST = "tests/postgres/test_postgres.py::test_store_from_url_takes_the_schema_out_of_the_query"


def run_with(ci: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["HARNESS_TEST_POSTGRES"] = "postgresql://postgres@127.0.0.1:1/test"
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", TEST],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_an_unreachable_server_skips_without_ci_and_fails_with_it() -> None:
    local = run_with(None)
    assert local.returncode == 0 and "1 skipped" in local.stdout, local.stdout
    ci = run_with("true")
    assert ci.returncode == 1 and "1 error" in ci.stdout, ci.stdout
    assert "CI is set: the postgres tests must run, never skip" in ci.stdout
    assert "127.0.0.1:1" in ci.stdout
