"""Trace equality: two traces read from states compare by their entries, unbuilt when equal."""

from __future__ import annotations

from typing import Any

import pytest

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


def test_trace_entries_read_an_unbuilt_trace_as_its_decisions_without_building_it() -> None:
    from pytest_harness.runtime.trace import trace_entries

    guard = {"step": 2, "kind": "guard", "key": "G", "detail": {"on": "output"}}
    unbuilt = Trace._of_state([ENTRY, guard, {"step": 3, "kind": "output", "key": "output"}])
    built = Trace([Decision.from_dict(e) for e in unbuilt._source])
    assert list(trace_entries(unbuilt)) == list(trace_entries(built))
    assert list(trace_entries(built)) == [(d.kind, d.key, d.detail) for d in built]
    assert unbuilt._built is None  # a replay that reads its recording's guards keeps it so


@pytest.mark.asyncio
async def test_a_replay_leaves_its_recordings_trace_unbuilt(app: Any) -> None:
    """Reading the recording's guard decisions built every decision of its trace, and a replay
    then compared the traces decision by decision (6% more instructions a replay)."""
    import pytest_harness as ph

    app.write(
        """
        models:
          m:
            use: scripted
            script:
              - {call: lookup_order, args: {order_id: A-1}}
              - {say: "done"}
        guards:
          - {id: cards, on: output, check: regex, pattern: '\\d{16}', action: redact}
        tools:
          lookup_order: {call: "MODULE:lookup_order", replay: safe}
        tasks:
          t: {model: m, prompt: p, tools: [lookup_order]}
        """.replace("MODULE", app.module),
        base=False,
    )
    async with ph.load(app.spec, record=True) as harness:
        result = await harness.run("t", "hi", principal="ann")
        recording = await ph.Recording.from_store(harness.store, result.run_id)
        assert (await harness.replay(recording)).same
        assert recording.trace._built is None
