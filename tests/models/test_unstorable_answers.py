"""A model answer the store cannot keep fails its attempt as `malformed`; the run never hangs.

Python's `json` reads `NaN`, `Infinity` and `1e999` (infinite) as floats and a `"\\udcff"`
escape as a lone surrogate, none of which the store's strict UTF-8 JSON can write. Before, such
an answer (a live model's, or a `function` model's with a huge integer or an object) made the
commit after the call fail: `run()` raised `StoreError` or, recording, `RecordingError` after
four tries; the run stayed `running`, and `recover()` asked the model, and paid, again. Now the
attempt fails as a `malformed` `ModelError` naming the model, the place and the value: the run
ends `failed` (or a fallback model answers), its lease released, its usage counted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import pytest_harness as ph
from tests.model_server import KEY_ENV, ModelServer, Reply, openai_body

pytestmark = [pytest.mark.asyncio, pytest.mark.harness(allow_live=True)]


def spec(root: Path, server: ModelServer, *, record: bool, fallback: bool = False) -> Path:
    backup = (
        "\n    fallback: [backup]\n  backup: {use: scripted, script: [{say: from the backup}]}"
        if fallback
        else ""
    )
    path = root / "harness.yaml"
    path.write_text(
        f"""
version: 1
name: unstorable
models:
  default:
    use: openai
    model: test-model
    base_url: {server.url}/v1
    api_key_env: {KEY_ENV}
    retries: 2{backup}
tasks:
  t: {{prompt: p}}
state: {{use: sqlite, path: state.db, record: {str(record).lower()}}}
""",
        encoding="utf-8",
    )
    return path


def raw(body: dict[str, Any], arguments: str | None = None) -> Reply:
    """A reply of `body`, with the call's arguments text put in as it is (NaN is no JSON)."""
    text = json.dumps(body)
    if arguments is not None:
        text = text.replace('"ARGS"', json.dumps(arguments))
    return Reply(raw=text.encode(), headers={"Content-Type": "application/json"})


CALL = (("c1", "lookup", "ARGS"),)
ANSWERS = {
    "NaN argument": (
        raw(openai_body(None, CALL), '{"n": NaN}'),
        "tool call 1 ('lookup') args.n: nan",
    ),
    "infinite argument": (
        raw(openai_body(None, CALL), '{"n": [1, 1e999]}'),
        "tool call 1 ('lookup') args.n[1]: inf, not a finite number",
    ),
    "lone surrogate in an argument": (
        raw(openai_body(None, CALL), '{"q": "\\udcff"}'),
        "tool call 1 ('lookup') args.q: text with a lone surrogate, no UTF-8 ('\\udcff')",
    ),
    "lone surrogate in the text": (
        Reply(
            raw=b'{"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": '
            b'"assistant", "content": "caf\\udce9"}}], "usage": {"prompt_tokens": 3, '
            b'"completion_tokens": 2}}'
        ),
        "its text: text with a lone surrogate, no UTF-8 ('caf\\udce9')",
    ),
}


@pytest.mark.parametrize("record", [False, True], ids=["plain", "recorded"])
@pytest.mark.parametrize("case", list(ANSWERS))
async def test_an_answer_the_store_cannot_keep_fails_the_run_once(
    case: str, record: bool, server: ModelServer, tmp_path: Path
) -> None:
    reply, where = ANSWERS[case]
    server.reply(reply)
    async with ph.load(spec(tmp_path, server, record=record)) as harness:
        result = await harness.run("t", "hi", principal="ann")
        stored = await harness.store.get_run(result.run_id)
        recovered = await harness.recover()
    assert result.status is ph.RunStatus.FAILED
    assert result.error is not None and result.error["type"] == "ModelError"
    message = result.error["message"]
    assert "model 'default' answered with what the store cannot keep: " + where in message
    assert (stored.status, stored.lease_owner) == ("failed", None)
    assert recovered == []
    assert len(server.received) == 1  # malformed is not retried, and recover asks nothing


async def test_the_fallback_model_answers_instead(server: ModelServer, tmp_path: Path) -> None:
    reply, _ = ANSWERS["NaN argument"]
    server.reply(reply)
    async with ph.load(spec(tmp_path, server, record=True, fallback=True)) as harness:
        result = await harness.run("t", "hi", principal="ann")
        report = await harness.replay(result.run_id)
    assert (result.status, result.output) == (ph.RunStatus.COMPLETED, "from the backup")
    assert result.usage.tokens_in > 12  # the malformed answer's 12, and the backup's
    assert report.same, report.render()


MODELS = """
import datetime

from pytest_harness.models.base import ModelResponse, ProposedCall, TokenUsage


def huge(request):
    return ModelResponse(calls=(ProposedCall(id="c1", name="lookup", args={"n": 10**5000}),))


def an_object(request):
    at = datetime.date(2026, 1, 2)
    return ModelResponse(calls=(ProposedCall(id="c1", name="lookup", args={"on": at}),))


def huge_usage(request):
    return ModelResponse(text="hi", usage=TokenUsage(input_tokens=1, output_tokens=10**5000))
"""


@pytest.mark.parametrize(
    ("fn", "where"),
    [
        ("huge", "tool call 1 ('lookup') args.n: an integer of 16610 bits, too long"),
        ("an_object", "tool call 1 ('lookup') args.on: a value of type date (datetime.date("),
        ("huge_usage", "its usage (input, output tokens)[1]: an integer of 16610 bits"),
    ],
)
async def test_a_function_models_answer_the_store_cannot_keep_fails_the_run(
    fn: str, where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = f"unstorable_{fn}_{tmp_path.name[-8:].replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(MODELS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "harness.yaml").write_text(
        f"""
version: 1
name: unstorable
models:
  default: {{use: function, call: "{module}:{fn}"}}
tasks:
  t: {{prompt: p}}
state: {{use: sqlite, path: state.db, record: true}}
""",
        encoding="utf-8",
    )
    async with ph.load(tmp_path / "harness.yaml") as harness:
        result = await harness.run("t", "hi", principal="ann")
        stored = await harness.store.get_run(result.run_id)
    assert result.status is ph.RunStatus.FAILED
    assert result.error is not None and where in result.error["message"], result.error
    assert (stored.status, stored.lease_owner) == ("failed", None)
