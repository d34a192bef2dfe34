"""A rule `tool == "T" && …` is not run for another tool: the same verdict as running it."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_harness.cel import CelError, compile_expression, tool_conjunct


@pytest.mark.parametrize(
    ("source", "tool"),
    [
        ('tool == "refund" && args.amount <= 100', "refund"),
        ("tool == 'refund' && args.amount <= 100 && principal.id == \"ann\"", "refund"),
        ('tool == "refund"', None),  # no `&&`: CEL runs it (it is cheap and exact anyway)
        ('tool == "refund" && args.amount <= 100 || args.force', None),
        ('tool == "refund" && (args.big ? 1 : 2) == 1', None),
        ('tool == "a" == true && args.x', None),
        ('tool == r"refund" && args.x', None),
        ('tool == "re\\"fund" && args.x', None),
        ('args.x && tool == "refund"', None),
        ('(tool == "refund") && args.x', None),
    ],
)
def test_only_a_leading_tool_equality_of_an_and_chain_is_taken(source: str, tool: str | None):
    assert tool_conjunct(source) == tool


@pytest.mark.parametrize(
    "source",
    [
        'tool == "refund" && args.amount <= 100',
        'tool == "refund" && args.missing > 1',
        'tool == "refund" && args.amount / 0 == 1',
        'tool == "refund" && 5',
    ],
)
@pytest.mark.parametrize(
    "variables",
    [
        {"tool": "lookup_order", "args": {"order_id": "A-1"}},
        {"tool": "refund", "args": {"amount": 25}},
        {"tool": "refund", "args": {"amount": 250}},
        {"tool": "refund", "args": {}},
    ],
)
def test_the_verdict_is_the_one_cel_gives(source: str, variables: dict[str, Any]) -> None:
    program = compile_expression(source)
    assert program.tool == "refund"

    def outcome(run: Any) -> object:
        try:
            return run()
        except CelError as exc:
            return ("error", exc.message)
        except Exception as exc:  # the raw program's own error
            return ("error", type(exc).__name__)

    ours = outcome(lambda: program.evaluate(variables))
    raw = outcome(lambda: program.program.execute(variables))
    if isinstance(ours, tuple):
        assert isinstance(raw, tuple)  # both fail (the message is ours, from the same error)
    else:
        assert ours == raw
