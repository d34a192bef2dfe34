"""A small app and its tests, written into a `pytester` folder, to drive the plugin end to end."""

from __future__ import annotations

import inspect
import textwrap
import uuid
from pathlib import Path

import pytest

# Imported here so that pytester's in-process runs find them loaded (it restores sys.modules
# after each run, and re-importing the runtime every run would be slow).
import pytest_harness.plugin.fixtures
import pytest_harness.plugin.items
import pytest_harness.plugin.render
import pytest_harness.plugin.summary
import pytest_harness.recording.golden
import pytest_harness.replay.replayer
import pytest_harness.runtime.harness
import pytest_harness.spec.loader
import pytest_harness.store.sqlite
import pytest_harness.testing  # noqa: F401

TOOLS = '''
def lookup_order(order_id: str) -> dict:
    """Look an order up."""
    return {"order_id": order_id, "total": 250.0}


def refund(order_id: str, amount: float) -> dict:
    """Refund an order."""
    return {"order_id": order_id, "amount": amount}


def delete_account(user: str) -> str:
    """Delete an account."""
    return "deleted"
'''

SPEC = """
version: 1
name: mini-shop
models:
  default:
    use: scripted
    script:
      match:
        - input: "Refund $30*"
          turns:
            - {{call: lookup_order, args: {{order_id: A-1}}}}
            - {{call: refund, args: {{order_id: A-1, amount: 30}}}}
            - say: Refunded $30.
        - input: "Refund $250*"
          turns:
            - {{call: lookup_order, args: {{order_id: A-1}}}}
            - {{call: refund, args: {{order_id: A-1, amount: 250}}}}
            - say: Refunded $250.
        - input: "Delete*"
          turns:
            - {{call: delete_account, args: {{user: ann}}}}
            - say: I cannot delete accounts.
        - input: "Card*"
          turns:
            - say: Your card is 4111111111111111.
tools:
  lookup_order: {{call: "{mod}:lookup_order", replay: safe}}
  refund: {{call: "{mod}:refund", replay: idempotent}}
  delete_account: {{call: "{mod}:delete_account"}}
rules:
  - id: R1
    when: tool == "refund" && args.amount > 100
    then: approve
    approvers: [finance]
  - id: R2
    when: tool == "delete_account"
    then: deny
guards:
  - {{id: G1, on: output, check: regex, pattern: '\\b\\d{{16}}\\b', action: redact}}
tasks:
  orders:
    prompt: You are the order desk.
    tools: [lookup_order, refund, delete_account]
"""

TESTS = """
import pytest_harness as ph

FIONA = ph.Principal("fiona", ("finance",))


def test_small_refund(harness):
    assert harness.run("orders", "Refund $30 on A-1", principal="ann").ok


def test_big_refund(harness):
    waiting = harness.run("orders", "Refund $250 on A-1", principal="ann")
    done = harness.approve(waiting.run_id, waiting.approval.approval_id, "approve", approver=FIONA)
    assert done.ok


def test_denied(harness):
    assert harness.run("orders", "Delete my account", principal="ann").ok


def test_redacted(harness):
    result = harness.run("orders", "Card please", principal="ann")
    assert result.output == "Your card is [REDACTED]."
"""

INI = """
[pytest]
harness_spec = harness.yaml
harness_recordings = recordings
asyncio_default_fixture_loop_scope = function
"""


class Project:
    """A pytester folder holding the app, its tests and an ini pointing the plugin at them."""

    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester
        self.path = pytester.path
        self.module = f"desktools_{uuid.uuid4().hex[:12]}"
        (self.path / f"{self.module}.py").write_text(TOOLS, encoding="utf-8")
        self.spec = self.path / "harness.yaml"
        self.write_spec()
        self.recordings = self.path / "recordings"
        pytester.makeini(INI)

    def write_spec(self, text: str = SPEC) -> None:
        self.spec.write_text(text.format(mod=self.module), encoding="utf-8")

    def change_spec(self, old: str, new: str) -> None:
        text = self.spec.read_text(encoding="utf-8")
        assert old in text, old
        self.spec.write_text(text.replace(old, new), encoding="utf-8")

    def tests(self, body: str = TESTS, name: str = "test_desk") -> Path:
        return self.pytester.makepyfile(**{name: textwrap.dedent(body)})

    def run(self, *args: str, workers: int = 0) -> pytest.RunResult:
        """Run pytest here: in-process, or in a subprocess with `-n workers`."""
        if workers:
            return self.pytester.runpytest_subprocess("-n", str(workers), "-p", "xdist", *args)
        return self.pytester.runpytest(*args)

    def goldens(self) -> dict[str, str]:
        return {
            p.relative_to(self.recordings).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(self.recordings.rglob("*.yaml"))
        }


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Project:
    """A fresh project; `CI` is cleared (CI sets it) so that strictness is off unless a test
    turns it on (`--harness-strict`, the ini value, or `CI` set on purpose)."""
    monkeypatch.delenv("CI", raising=False)
    return Project(pytester)


@pytest.fixture(params=[0, 2], ids=["n0", "n2"])
def workers(request: pytest.FixtureRequest) -> int:
    """Run a scenario without xdist and with `-n 2`."""
    return int(request.param)


NESTED_XDIST_TIMEOUT = 600
"""Seconds a test that starts `pytest -n 2` subprocesses may take: each of them starts its own
workers, several times over, so on a loaded 2-core machine they need far longer than the suite's
120 s guard against hangs (a test killed by that guard also leaves its subprocess to be reaped
by a later test)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give tests that run pytest with xdist in subprocesses a longer hang guard."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        function = getattr(item, "function", None)
        source = inspect.getsource(function) if function is not None else ""
        if (callspec is not None and callspec.params.get("workers")) or "workers=2" in source:
            item.add_marker(pytest.mark.timeout(NESTED_XDIST_TIMEOUT))
