"""The paging of a run's snapshot and the size checks of one Temporal payload (no server)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_harness.errors import ExecutionError, PayloadTooLarge
from pytest_harness.temporal.paging import (
    PAGE_BUDGET,
    PAYLOAD_LIMIT,
    check_fits,
    encoded_size,
    outcome_of,
    page,
    read_pages,
    wire_outcome,
)

_TEXT = st.text(alphabet=st.sampled_from('ab"\\\n\t\u00e9\u4e2d\U0001f600 '), max_size=400)
_ENTRY = st.fixed_dictionaries({"kind": st.sampled_from(["event", "tool.returned"]), "data": _TEXT})


def _read(snap: Mapping[str, Any], budget: int) -> tuple[Any, list[int]]:
    """`snap` read back through `read_pages`, and the encoded size of every page."""
    text = json.dumps(snap, separators=(",", ":"))
    sizes: list[int] = []

    async def fetch(offset: int, rev: int | None) -> Mapping[str, Any]:
        answer = page(text, offset, 7, budget)
        sizes.append(encoded_size(answer))
        return answer

    return asyncio.run(read_pages(fetch)), sizes


@settings(max_examples=150, deadline=None)
@given(
    journal=st.lists(_ENTRY, max_size=30),
    events=st.lists(_ENTRY, max_size=10),
    budget=st.integers(min_value=300, max_value=3000),
)
def test_any_snapshot_is_read_back_whole_in_pages_within_the_budget(
    journal: list[dict[str, Any]], events: list[dict[str, Any]], budget: int
) -> None:
    snap = {"run_id": "run_1", "state": {"messages": events}, "journal": journal, "events": events}
    read, sizes = _read(snap, budget)
    assert read == snap  # whole and in order, an entry larger than a page included
    assert all(size <= budget for size in sizes), (sizes, budget)
    text = json.dumps(snap, separators=(",", ":"))
    assert len(sizes) <= 2 * len(text) // (budget - 256) + 1  # no page needlessly small


def test_a_snapshot_many_pages_long_takes_pages_of_the_default_budget() -> None:
    snap = {"journal": [{"payload": "x" * 700_000} for _ in range(4)], "state": {"q": '"' * 10}}
    read, sizes = _read(snap, PAGE_BUDGET)
    assert read == snap
    assert len(sizes) == 3 and max(sizes) <= PAGE_BUDGET


def test_a_reader_starts_over_when_the_run_changed_between_pages() -> None:
    texts = [json.dumps({"n": "a" * 2000}), json.dumps({"n": "b" * 3000})]
    calls: list[int] = []

    async def fetch(offset: int, rev: int | None) -> Mapping[str, Any]:
        calls.append(offset)
        now = 0 if len(calls) < 2 else 1  # the run changes after the first page
        return page(texts[now], offset, now, 1000)

    assert asyncio.run(read_pages(fetch)) == {"n": "b" * 3000}
    assert calls[0] == calls[2] == 0 < calls[1]  # read again from the start


def test_a_value_over_the_payload_limit_names_its_size_the_limit_and_what_carried_it() -> None:
    check_fits({"text": "x" * 1000}, "the result of tool big")
    with pytest.raises(PayloadTooLarge) as caught:
        check_fits({"text": "x" * 3_000_000}, "the result of tool big")
    error = caught.value
    assert isinstance(error, ExecutionError)
    assert (error.size, error.limit) == (3_000_011, PAYLOAD_LIMIT)
    assert error.what == "the result of tool big"
    assert "the result of tool big is 3000011 bytes" in str(error)
    assert str(PAYLOAD_LIMIT) in str(error)


@pytest.mark.parametrize(
    ("value", "text", "sent"),
    [
        ("x" * 300_000, "x" * 300_000, "text"),
        ({"a": ["x" * 300_000]}, '{"a":["' + "x" * 300_000 + '"]}', "json"),
        ("x" * 100, "x" * 100, None),  # small: whole, as a worker of the previous version reads
        ({"a": [1, 2.5, True, None]}, '{"a":[1,2.5,true,null]}', None),
        ("x", "y", None),
        (None, "failed", None),
    ],
)
def test_a_tool_outcome_carries_its_value_once_and_is_restored(
    value: Any, text: str, sent: str | None
) -> None:
    outcome = {"ok": True, "kind": "ok", "value": value, "text": text, "error": None}
    wired = wire_outcome(outcome)
    assert wired.get("value_from") == sent
    assert ("value" in wired) is (sent is None)
    assert outcome_of(wired) == outcome


def test_a_run_that_changes_at_every_page_is_an_execution_error_not_an_endless_read() -> None:
    calls: list[int] = []

    async def fetch(offset: int, rev: int | None) -> Mapping[str, Any]:
        calls.append(offset)
        return page(json.dumps({"n": "a" * 2000}), offset, len(calls), 1000)  # a new rev each

    with pytest.raises(ExecutionError, match="changed 1000 times"):
        asyncio.run(read_pages(fetch))
    assert len(calls) >= 1000
