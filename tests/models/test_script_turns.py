"""A script turn taken without pydantic (`plain_turn`) is the one pydantic builds."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from pytest_harness.models.script_checks import checked_turn
from pytest_harness.models.script_turns import plain_turn

TURNS: list[Any] = [
    {"say": "hi"},
    {"say": ""},
    {"say": 5},
    {"say": None},
    {},
    {"call": "refund", "args": {"order_id": "A-1", "amount": 250}},
    {"call": "refund"},
    {"call": "refund", "args": None},
    {"call": "refund", "args": {1: 2}},
    {"call": "refund", "args": []},
    {"args": {"a": 1}, "say": "x"},
    {"calls": [{"name": "a"}, {"name": "b", "args": {"x": [1]}}]},
    {"calls": []},
    {"calls": [], "say": "x"},
    {"calls": ({"name": "a"},)},
    {"calls": [{"name": "a", "extra": 1}]},
    {"calls": [{"args": {}}]},
    {"calls": [{"name": 3}]},
    {"call": "a", "calls": [{"name": "b"}]},
    {"say": "x", "usage": {"input_tokens": 420, "output_tokens": 12}},
    {"say": "x", "usage": {"input_tokens": 1}},
    {"say": "x", "usage": {}},
    {"say": "x", "usage": {"input_tokens": -1}},
    {"say": "x", "usage": {"input_tokens": True}},
    {"say": "x", "usage": {"input_tokens": "5"}},
    {"say": "x", "usage": {"input_tokens": 5.0}},
    {"say": "x", "usage": {"tokens": 5}},
    {"say": "x", "usage": None},
    {"error": "rate_limit"},
    {"error": "rate_limit", "retry_after": "2s"},
    {"error": "server", "retry_after": 1},
    {"error": "server", "retry_after": 0.5},
    {"error": "server", "retry_after": -1},
    {"error": "server", "retry_after": True},
    {"error": "server", "retry_after": "soon"},
    {"error": "server", "retry_after": None},
    {"error": "nope"},
    {"error": "timeout", "say": "x"},
    {"error": "refusal", "calls": []},
    {"error": "timeout", "incomplete": "max_tokens"},
    {"say": "x", "retry_after": 1},
    {"say": "x", "delay": "250ms"},
    {"say": "x", "delay": 0},
    {"say": "x", "delay": 10**400},
    {"say": "x", "delay": None},
    {"say": "x", "delay": "1h"},
    {"say": "x", "incomplete": "max_tokens"},
    {"say": "x", "incomplete": "context_window"},
    {"say": "x", "incomplete": "other"},
    {"say": "x", "unknown": 1},
    {"call": "a", "args": {"x": 1}, "say": "also"},
    ["say", "x"],
    "say",
]


@pytest.mark.parametrize("item", TURNS, ids=repr)
def test_a_plain_turn_is_the_checked_turn(item: Any) -> None:
    try:
        expected = checked_turn(item)
    except (ValidationError, OverflowError):  # OverflowError: a duration too big for a float
        expected = None
    taken = plain_turn(item)
    if expected is None:
        assert taken is None
    elif taken is not None:
        assert taken == expected
        assert [type(getattr(taken, f)) for f in taken.__slots__] == [
            type(getattr(expected, f)) for f in expected.__slots__
        ]


def test_the_quickstart_script_is_plain() -> None:
    turns = [
        {"call": "lookup_order", "args": {"order_id": "A-1001"}},
        {"call": "refund", "args": {"order_id": "A-1001", "amount": 250}},
        {"say": "Done.", "usage": {"input_tokens": 420, "output_tokens": 12}},
    ]
    assert all(plain_turn(t) is not None for t in turns)
