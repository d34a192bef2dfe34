"""Trace equality: two traces read from states compare by their entries, unbuilt when equal."""

from __future__ import annotations

from pytest_harness.runtime.trace import Decision, Trace

ENTRY = {"step": 1, "kind": "rule", "key": "R1", "detail": {"effect": "allow"}}


def test_equal_entries_compare_equal_without_building_decisions() -> None:
    left, right = Trace._of_state([dict(ENTRY)]), Trace._of_state([dict(ENTRY)])
    assert left == right
    assert left._built is None and right._built is None


def test_entries_that_differ_but_build_equal_decisions_still_compare_equal() -> None:
    # `detail` absent and empty build the same decision: the entries differ, the traces do not
    bare = {k: v for k, v in ENTRY.items() if k != "detail"}
    assert Trace._of_state([bare]) == Trace._of_state([{**bare, "detail": {}}])


def test_different_decisions_compare_unequal_whichever_side_is_built() -> None:
    changed = {**ENTRY, "detail": {"effect": "deny"}}
    assert Trace._of_state([ENTRY]) != Trace._of_state([changed])
    assert Trace([Decision.from_dict(ENTRY)]) != Trace._of_state([changed])
    assert Trace([Decision.from_dict(ENTRY)]) == Trace._of_state([ENTRY])
