"""Shared fixtures: write a small app (harness.yaml and a tools module) into a temp folder."""

from __future__ import annotations

import os
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.model_server import ModelServer

TOOLS = '''
import asyncio
import pytest_harness as ph

CALLS = []


def lookup_order(order_id: str) -> dict:
    """Look an order up.

    Args:
        order_id: The order's id.
    """
    CALLS.append(("lookup_order", order_id))
    return {"order_id": order_id, "total": 250.0, "card": "4111111111111111"}


def refund(order_id: str, amount: float) -> dict:
    """Refund an order."""
    ctx = ph.current_tool_context()
    CALLS.append(("refund", order_id, amount, ctx.execution_key, ctx.attempt))
    return {"order_id": order_id, "amount": amount, "key": ctx.execution_key}


def explode(reason: str = "boom") -> str:
    """Always fails."""
    CALLS.append(("explode", reason))
    raise RuntimeError(reason)


async def slow(seconds: float) -> str:
    """Sleeps."""
    await asyncio.sleep(seconds)
    return "slept"


def delete_account(user: str) -> str:
    """Deletes an account."""
    CALLS.append(("delete_account", user))
    return "deleted"
'''

HEADER = """
version: 1
name: test-app
"""

BASE = (
    HEADER
    + """models:
  default:
    use: scripted
    script: []
tools:
  lookup_order: {{call: "{mod}:lookup_order", replay: safe}}
  refund: {{call: "{mod}:refund", replay: idempotent}}
  explode: {{call: "{mod}:explode"}}
  slow: {{call: "{mod}:slow"}}
  delete_account: {{call: "{mod}:delete_account"}}
"""
)


class App:
    """A temp app: `write(yaml)` writes harness.yaml after the base (or just the header);
    `tools` is its generated tools module."""

    def __init__(self, root: Path, module: str) -> None:
        self.root = root
        self.module = module
        self.spec = root / "harness.yaml"

    def write(self, body: str, *, base: bool = True) -> Path:
        text = (BASE.format(mod=self.module) if base else HEADER) + textwrap.dedent(body)
        self.spec.write_text(text, encoding="utf-8")
        return self.spec

    @property
    def tools(self):
        return sys.modules[self.module]


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    module = f"apptools_{uuid.uuid4().hex[:12]}"
    (tmp_path / f"{module}.py").write_text(TOOLS, encoding="utf-8")
    yield App(tmp_path, module)
    sys.modules.pop(module, None)
    while str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


@pytest.fixture
def write_file(tmp_path: Path) -> Callable[[str, str], Path]:
    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


# -- PostgreSQL ---------------------------------------------------------------------------------

PG_DSN = os.environ.get("HARNESS_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
"""The server the postgres tests use (DESIGN §13: the machine's PostgreSQL, trust auth)."""


def _postgres_unavailable() -> str | None:
    """Why the postgres tests cannot run here, or None when the server answers."""
    try:
        import psycopg
    except ImportError as exc:
        return f"psycopg is not installed ({exc}); pip install -e '.[test]'"
    try:
        with psycopg.connect(PG_DSN, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {PG_DSN} is unreachable: {str(exc).strip()}"
    return None


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """The test server's DSN; skips when it is unreachable, but FAILS when `$CI` is set."""
    reason = _postgres_unavailable()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI is set: the postgres tests must run, never skip)")
        pytest.skip(reason)
    return PG_DSN


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    """A fresh schema name for this test; the schema is dropped afterwards."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:20]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE".encode())


@pytest_asyncio.fixture
async def server() -> AsyncIterator[ModelServer]:
    """The loopback model server (tests/model_server.py), started for one test."""
    srv = ModelServer()
    await srv.start()
    yield srv
    await srv.close()
