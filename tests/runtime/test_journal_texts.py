"""Journal payloads whose text is put together from parts (`runtime.texts`) store the same bytes.

`run.started`, `model.started` and `checkpoint` entries take the text of their tool schemas,
messages and trace from what was encoded already; every text a store gets must be exactly
what encoding the payload whole gives, in every run shape (session history, several drives,
replaced schemas), and a value JSON cannot hold must fail as encoding it whole fails.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import pytest

import pytest_harness as ph
from pytest_harness.errors import StoreError
from pytest_harness.models.base import ToolSchema
from pytest_harness.runtime.texts import composed, schemas_text, tool_schemas
from pytest_harness.store.base import JournalDraft, encode_json
from pytest_harness.store.helpers import PreparedJSON, json_text
from pytest_harness.store.memory import MemoryStore


def plain(value: Any) -> Any:
    """`value` with every `PreparedJSON` in it made a plain dict (encoded by value)."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


class CheckingStore(MemoryStore):
    """A memory store that checks each journal payload's text against its whole encoding."""

    def __init__(self) -> None:
        super().__init__()
        self.prepared: list[str] = []

    def check(self, drafts: Sequence[JournalDraft]) -> None:
        for entry in drafts:
            text = encode_json(entry.payload, "the payload")
            assert text == json_text(plain(entry.payload)), entry.kind
            if type(entry.payload) is PreparedJSON:
                self.prepared.append(entry.kind)

    async def create_run(self, run: Any) -> Any:
        self.check(run.journal)
        return await super().create_run(run)

    async def commit(self, run_id: str, token: int, **kw: Any) -> str | None:
        self.check(kw.get("journal", ()))
        return await super().commit(run_id, token, **kw)


SPEC = """
models:
  default:
    use: scripted
    script:
      - {call: lookup_order, args: {order_id: "A-1001"}}
      - {call: refund, args: {order_id: "A-1001", amount: 25}}
      - {say: "Remboursé: 25 € sur A-1001 \\u2028 fin."}
tools:
  lookup_order: {call: "{mod}:lookup_order"}
  refund: {call: "{mod}:refund", replay: idempotent}
rules:
  - {id: refunds, when: 'tool == "refund"', then: approve, approvers: [ops]}
tasks:
  t: {prompt: "Vous aidez. é", tools: [lookup_order, refund]}
"""


@pytest.mark.asyncio
async def test_every_payload_text_a_recorded_session_stores_is_its_whole_encoding(
    app: Any,
) -> None:
    app.write(SPEC.replace("{mod}", app.module), base=False)
    store = CheckingStore()
    ops = ph.Principal("olga", ("ops",))
    session = None
    async with ph.load(app.spec, store=store, record=True) as harness:
        for _ in range(2):  # the second run's requests start with the first's messages
            waiting = await harness.run("t", "Rembourse 25 €", principal="ann", session_id=session)
            assert waiting.approval is not None
            session = waiting.session_id
            # a second drive: its first request records its messages and schemas whole again
            done = await harness.approve(
                waiting.run_id, waiting.approval.approval_id, "approve", approver=ops
            )
            assert done.ok, done
        recording = await ph.Recording.from_store(harness.store, done.run_id)
    assert {"run.started", "model.started", "checkpoint"} <= set(store.prepared)
    assert len(recording.history) == 6 and len(recording.model_turns) == 3


def test_a_composed_text_is_the_whole_encoding_and_fails_as_it_does() -> None:
    value = {"a": 1, "b": [{"x": "é"}], "c": None, "d": 2.5, "e": {"f": "\u2028"}}
    text = composed(value, lambda: {"b": json_text(value["b"])})
    assert encode_json(text, "p") == encode_json(dict(value), "p")
    assert json.loads(encode_json(text, "p")) == value
    for bad in (math.nan, object()):
        broken = {"a": [1], "b": bad}
        with pytest.raises(StoreError) as whole:
            encode_json(dict(broken), "the journal of run r")
        with pytest.raises(StoreError) as parts:
            encode_json(composed(broken, lambda: {"a": "[1]"}), "the journal of run r")
        assert str(parts.value) == str(whole.value)


def test_schema_texts_are_kept_per_schemas_object() -> None:
    schemas = (ToolSchema("t", "d é", {"type": "object", "properties": {"a": {"type": "x"}}}),)
    assert schemas_text(schemas) == json_text(tool_schemas(schemas))
    assert schemas_text(schemas) is schemas_text(schemas)
    other = (ToolSchema("u", "d", {}),)
    assert schemas_text(other) == json_text(tool_schemas(other))


@pytest.mark.parametrize(
    "value", ["", "default", "sha256:" + "0f" * 32, 'a"b', "a\\b", "é", "\x7f", "\t", "\u2028", 3]
)
def test_a_quoted_name_or_digest_is_its_json_text(value: object) -> None:
    from pytest_harness.runtime.model_calls import _quoted

    assert _quoted(value) == json_text(value)
