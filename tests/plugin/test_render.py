"""The coloured failure of a replay item keeps a CEL error whole, outside the table's columns."""

from __future__ import annotations

import io

from _pytest._io import TerminalWriter

from pytest_harness.plugin.render import ReplayFailureRepr
from pytest_harness.replay.report import DecisionChange, FieldDiff, ReplayReport
from pytest_harness.runtime.trace import Decision

ERROR = (
    "TypeError: No such overload: the operation is not defined for the given operand types. "
    "CEL does not coerce between types, so convert explicitly with int(x) or double(x)."
)


def draw(report: ReplayReport) -> str:
    out = io.StringIO()
    tw = TerminalWriter(out)
    tw.hasmarkup = True
    tw.fullwidth = 100
    ReplayFailureRepr(report.to_dict(), report.render()).toterminal(tw)
    return out.getvalue()


def test_an_added_rule_decision_with_an_error_shows_it_whole_on_its_own_line() -> None:
    rule = Decision(2, "rule", "typed", {"effect": "deny", "tool": "refund", "error": ERROR})
    report = ReplayReport(
        task="orders",
        source="r.yaml",
        status=("completed", "completed"),
        output=("ok", "ok"),
        decisions=(DecisionChange(change="added", step=2, kind="rule", key="typed", actual=rule),),
    )
    text = draw(report)
    assert f"error: {ERROR}" in text
    assert "\\'" not in text


def test_a_changed_error_field_is_shown_whole_and_unquoted() -> None:
    before = Decision(2, "rule", "typed", {"effect": "deny", "tool": "refund", "error": "x"})
    after = Decision(2, "rule", "typed", {"effect": "deny", "tool": "refund", "error": ERROR})
    change = DecisionChange(
        change="changed",
        step=2,
        kind="rule",
        key="typed",
        expected=before,
        actual=after,
        fields=(FieldDiff("error", "x", ERROR),),
    )
    report = ReplayReport(
        task="orders",
        source="r.yaml",
        status=("completed", "completed"),
        output=("ok", "ok"),
        decisions=(change,),
    )
    assert f"error: x → {ERROR}" in draw(report)
    assert f"error: x → {ERROR}" in report.render()
