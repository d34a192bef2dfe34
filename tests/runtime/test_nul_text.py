"""A NUL in what a run produces is kept on every store; a NUL in an argument is refused on all.

A tool that reads a binary file returns text with a NUL; a model may echo it in its arguments
and its answer. Memory and sqlite kept such a run; Postgres failed its first commit with
`unsupported Unicode escape sequence` (its JSON parser builds text, which holds no NUL) and
left it `running`, to fail again at every recovery. Now the run completes alike on each store,
and its recording replays as `same`, from the store and from a golden file.

An argument kept as a text column (the input, a session id, a tenant, a label, a principal, a
reason) cannot hold a NUL on Postgres, so `check_text` refuses it on every store with a
`StoreError` naming it, before anything is written.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

import pytest_harness as ph
from pytest_harness.errors import StoreError

pytestmark = pytest.mark.asyncio

TOOLS = '''
def read_blob(name: str) -> dict:
    """Read a stored blob."""
    return {"name": name, "head": "PK\\x03\\x04\\x00\\x00", "six": "\\\\u0000"}
'''

SPEC = """
version: 1
name: nul
models:
  default:
    use: scripted
    script:
      - call: read_blob
        args: {{name: "a\\u0000b.zip"}}
      - say: "The blob starts PK\\u0003\\u0004\\u0000."
tools:
  read_blob: {{call: "{module}:read_blob"}}
tasks:
  t: {{prompt: p, tools: [read_blob]}}
state: {{use: {store}, path: state.db, record: true{postgres}}}
"""


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def spec(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    module = f"nul_tools_{uuid.uuid4().hex[:12]}"
    (tmp_path / f"{module}.py").write_text(TOOLS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    postgres = ""
    if request.param == "postgres":
        monkeypatch.setenv("HARNESS_TEST_DSN", request.getfixturevalue("pg_dsn"))
        postgres = f", dsn_env: HARNESS_TEST_DSN, schema: {request.getfixturevalue('pg_schema')}"
    path = tmp_path / "harness.yaml"
    path.write_text(SPEC.format(module=module, store=request.param, postgres=postgres))
    return path


async def test_a_run_whose_tool_and_model_produce_a_nul_completes_and_replays_same(
    spec: Path, tmp_path: Path
) -> None:
    async with ph.load(spec) as harness:
        run = await harness.run("t", "read it", principal="ann")
        assert run.status is ph.RunStatus.COMPLETED, run.error
        assert run.output == "The blob starts PK\x03\x04\x00."
        recording = await harness.recording(run.run_id)
        (result,) = recording.tool_results
        assert result.args == {"name": "a\x00b.zip"}
        blob = {"name": "a\x00b.zip", "head": "PK\x03\x04\x00\x00", "six": "\\u0000"}
        assert result.outcome["value"] == blob
        assert (await harness.replay(run.run_id)).same
        golden = recording.save(tmp_path / "golden.yaml")
        assert (await harness.replay(ph.Recording.load(golden))).same


NUL_ARGUMENTS: dict[str, tuple[dict[str, Any], str]] = {
    "input": (
        {"input": "read\x00it"},
        "input 'read\\x00it' holds a NUL character (at character 4)",
    ),
    "session_id": (
        {"session_id": "ses\x00"},
        "session_id 'ses\\x00' holds a NUL character (at character 3)",
    ),
    "tenant": ({"tenant": "\x00acme"}, "tenant '\\x00acme' holds a NUL character (at character 0)"),
    "label": ({"labels": {"team": "d\x00"}}, "labels['team'] 'd\\x00' holds a NUL character"),
    "principal": ({"principal": "ann\x00"}, "principal id 'ann\\x00' holds a NUL character"),
    "idempotency_key": (
        {"idempotency_key": "k\x00"},
        "idempotency_key 'k\\x00' holds a NUL character (at character 1)",
    ),
}


@pytest.mark.parametrize("argument", list(NUL_ARGUMENTS))
async def test_an_argument_with_a_nul_is_refused_on_every_store_and_writes_nothing(
    spec: Path, argument: str
) -> None:
    given, shown = NUL_ARGUMENTS[argument]
    kwargs: dict[str, Any] = {"input": "read it", "principal": "ann", **given}
    async with ph.load(spec) as harness:
        with pytest.raises(StoreError) as caught:
            await harness.run("t", **kwargs)
        assert str(caught.value).startswith(shown), str(caught.value)
        assert "PostgreSQL text cannot keep" in str(caught.value)
        assert "nothing was written" in str(caught.value)
        assert await harness.runs() == []
        assert await harness.runs(task="t\x00") == []


async def test_an_answer_with_a_nul_is_refused_on_every_store_and_writes_nothing(
    spec: Path,
) -> None:
    async with ph.load(spec) as harness:
        run = await harness.run("t", "read it", principal="ann")
        before = [e.cursor for e in await harness.store.events(run.run_id)]
        with pytest.raises(StoreError, match=r"^reason 'no\\x00' holds a NUL character"):
            await harness.approve(run.run_id, "apr_1", "decline", approver="fiona", reason="no\x00")
        with pytest.raises(StoreError, match=r"^resolver id 'op\\x00' holds a NUL character"):
            await harness.resolve(run.run_id, "exk_1", abort=True, resolver="op\x00")
        assert [e.cursor for e in await harness.store.events(run.run_id)] == before
