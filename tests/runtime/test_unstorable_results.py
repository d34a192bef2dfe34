"""A tool result holding an integer too long for decimal text is kept as its hex string.

Before, such a result (`10**5000`, past `sys.get_int_max_str_digits()`) raised `ValueError`
while its outcome was built, after the tool ran: the run ended `failed` with that bare
`ValueError`, the tool's result was never recorded, and the replay of the run diverged
(`tool call … was never recorded at all`). `resolve(result=...)` with such a value failed alike
(tests/runtime/test_durable.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import pytest_harness as ph

pytestmark = pytest.mark.asyncio

TOOLS = '''
def huge() -> int:
    """A number too long for decimal text."""
    return 10**5000
'''

SPEC = """
version: 1
name: huge
models:
  default:
    use: scripted
    script:
      - call: {tool}
        args: {args}
      - say: done
tools:
  huge: {{call: "{module}:huge"}}
tasks:
  t: {{prompt: p, tools: [huge]}}
state: {{use: sqlite, path: state.db, record: true}}
"""


def write(root: Path, monkeypatch: pytest.MonkeyPatch, tool: str, args: str) -> Path:
    module = f"huge_tools_{root.name[-10:].replace('-', '_')}"
    (root / f"{module}.py").write_text(TOOLS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(root))
    spec = root / "harness.yaml"
    spec.write_text(SPEC.format(tool=tool, args=args, module=module), encoding="utf-8")
    return spec


async def test_a_huge_integer_result_is_recorded_and_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = write(tmp_path, monkeypatch, "huge", "{}")
    async with ph.load(spec) as harness:
        result = await harness.run("t", "go", principal="ann")
        report = await harness.replay(result.run_id)
        stored = await harness.store.get_run(result.run_id)
        await harness.export(
            result.run_id, tmp_path / "run.hx", policy=ph.ExportPolicy(include_payloads=True)
        )
    assert (result.status, result.output) == (ph.RunStatus.COMPLETED, "done"), result.error
    [call] = result.trace.tool_calls("huge")
    assert call.outcome == "ok"
    told = [m["content"] for m in stored.state["messages"] if m.get("role") == "tool"]
    assert told == [f'"{hex(10**5000)}"']  # what the model read, kept by the store
    assert report.same, report.render()
    assert ph.verify_archive(tmp_path / "run.hx").complete
