"""`render_report`: the plain report text, with colour only on a terminal."""

from __future__ import annotations

import io

from rich.console import Console

from pytest_harness.replay.report import DecisionChange, ReplayReport, output_diff
from pytest_harness.report import render_report, report_text
from pytest_harness.runtime.trace import Decision

DONE = "Done: the refund is on its way to your card."


def drifted() -> ReplayReport:
    return ReplayReport(
        task="orders",
        run_id="run_e7c1",
        status=("completed", "awaiting_approval"),
        output=(DONE, None),
        output_diff=output_diff(DONE, None),
        decisions=(
            DecisionChange(
                change="added",
                step=2,
                kind="rule",
                key="R3",
                actual=Decision(2, "rule", "R3", {"effect": "approve", "tool": "refund"}),
            ),
            DecisionChange(
                change="removed",
                step=2,
                kind="tool",
                key="refund",
                expected=Decision(2, "tool", "refund", {"outcome": "ok"}),
            ),
        ),
        model_requests_changed=(2, 2),
        model_answers_used=(1, 2),
    )


def test_plain_text_is_exactly_render() -> None:
    report = drifted()
    assert report_text(report).plain == report.render()
    stream = io.StringIO()
    render_report(report, Console(file=stream, force_terminal=False, width=20))
    assert stream.getvalue() == report.render() + "\n"  # not re-wrapped at the console width
    assert report.render() == (
        "changed: run run_e7c1 (orders) ended completed; the replay ended awaiting_approval\n"
        "  status: completed → awaiting_approval\n"
        "  decisions:\n"
        "    + step 2 rule R3 → approve (tool refund)\n"
        "    - step 2 tool refund → ok\n"
        "  output: changed\n"
        f"    - {DONE}\n"
        "    + (none)\n"
        "  model requests changed: 2 of 2\n"
        "  model answers used: 1 of 2"
    )


def test_a_terminal_gets_bold_head_green_plus_red_minus() -> None:
    text = report_text(drifted())
    styles = {text.plain[span.start : span.end]: str(span.style) for span in text.spans}
    assert styles["changed"] == "bold yellow"
    assert styles["    + step 2 rule R3 → approve (tool refund)"] == "green"
    assert styles["    - step 2 tool refund → ok"] == "red"
    assert styles[f"    - {DONE}"] == "red"
    assert styles["    + (none)"] == "green"
    stream = io.StringIO()
    render_report(drifted(), Console(file=stream, force_terminal=True, color_system="standard"))
    assert "\x1b[32m    + step 2 rule R3" in stream.getvalue()
    assert "\x1b[1m" in stream.getvalue()
