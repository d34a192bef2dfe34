"""A golden file keeps the schema of a tool parameter named like a credential, not `[REDACTED]`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import pytest_harness as ph
from pytest_harness.recording.model import Recording

pytestmark = pytest.mark.asyncio

TOOLS = '''
async def login(user: str, password: str, api_key: str = "k-default") -> dict:
    """Log a user in.

    Args:
        user: Who logs in.
        password: Their password, at least 12 characters.
    """
    return {"ok": True}
'''

SPEC = """
models:
  default:
    use: scripted
    script: [{{call: login, args: {{user: ann, password: hunter2hunter2}}}}, {{say: done}}]
tools:
  login: {{call: "{module}:login"}}
tasks:
  t: {{prompt: p, tools: [login]}}
state: {{record: true}}
"""


async def test_the_golden_keeps_the_definition_and_hides_the_values(app, tmp_path: Path) -> None:
    (app.root / f"{app.module}_login.py").write_text(TOOLS, encoding="utf-8")
    app.write(SPEC.format(module=f"{app.module}_login"), base=False)
    golden = tmp_path / "g.yaml"
    async with ph.load(app.spec) as harness:
        result = await harness.run("t", "go", principal="ann")
        (await Recording.from_store(harness.store, result.run_id)).save(golden)
        assert (await harness.replay(golden)).same
    text = golden.read_text(encoding="utf-8")
    assert "hunter2" not in text and "k-default" not in text
    (login,) = yaml.safe_load(text)["tool_schemas"]
    properties = login["parameters"]["properties"]
    assert properties["password"]["type"] == "string"
    assert "12 characters" in properties["password"]["description"]
    assert properties["api_key"]["default"] == "[REDACTED]"
