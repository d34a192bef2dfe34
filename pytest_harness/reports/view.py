"""What a replay report page shows, computed from the report document (no markup here).

The document is what `--replay-report x.json` writes: `{"format", "fail_on", "summary",
"recordings": [{"file", "nodeid", "outcome", "differences", "error", "report"}]}`, each
`report` being a `ReplayReport.to_dict()`. The HTML and Markdown renderers lay out the
`ReportView` built here; neither computes anything of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_harness.runtime.trace import Decision

__all__ = ["DecisionRow", "DiffLine", "RecordingView", "ReportView", "build_view"]

OUTCOME_ORDER = ("diverged", "drifted", "error", "updated", "same")
"""The order recordings are listed in: what needs a look first."""


@dataclass(frozen=True, slots=True)
class DiffLine:
    """One line of a unified diff: `kind` is `del`, `add` or `ctx`; `text` has no sign."""

    kind: str
    text: str


@dataclass(frozen=True, slots=True)
class DecisionRow:
    """One row of the decision diff table."""

    change: str
    """`added`, `removed` or `changed`."""
    sign: str
    step: str
    kind: str
    key: str
    recorded: str
    replayed: str
    fields: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RecordingView:
    """One recording: its row in the table and, when it drifted, the details."""

    file: str
    nodeid: str
    outcome: str
    task: str
    status_recorded: str
    status_replayed: str
    differences: tuple[str, ...]
    error: str | None = None
    divergence: str | None = None
    decisions: tuple[DecisionRow, ...] = ()
    output_diff: tuple[DiffLine, ...] = ()
    prompt_diff: tuple[DiffLine, ...] = ()
    requests: str | None = None
    """`2 of 3 changed (system prompt: 1 line changed)`, or None when none changed."""
    answers: str = ""

    @property
    def status_changed(self) -> bool:
        """Whether the replay ended differently from the recording."""
        return self.status_recorded != self.status_replayed

    @property
    def has_details(self) -> bool:
        """Whether the page shows a section for this recording (anything but `same`)."""
        return self.outcome != "same"


@dataclass(frozen=True, slots=True)
class ReportView:
    """The page: counts, the failing kinds, and the recordings in the order they are shown."""

    counts: Mapping[str, int]
    fail_on: tuple[str, ...]
    recordings: tuple[RecordingView, ...] = field(default=())

    @property
    def failed(self) -> bool:
        """Whether any recording drifted, diverged or could not be replayed."""
        return any(self.counts.get(k, 0) for k in ("drifted", "diverged", "error"))

    @property
    def title(self) -> str:
        """`pytest-harness replay: 2 drifted of 40` or `… 40 same`."""
        c = self.counts
        bad = [f"{c.get(k, 0)} {k}" for k in ("drifted", "diverged", "error") if c.get(k, 0)]
        total = c.get("total", 0)
        if bad:
            return f"pytest-harness replay: {', '.join(bad)} of {total}"
        return f"pytest-harness replay: {total} same"


def build_view(document: Mapping[str, Any]) -> ReportView:
    """The view of a report document (`--replay-report x.json`'s content)."""
    counts = {str(k): int(v) for k, v in (document.get("summary") or {}).items()}
    recordings = [_recording(entry) for entry in document.get("recordings") or ()]
    rank = {outcome: i for i, outcome in enumerate(OUTCOME_ORDER)}
    recordings.sort(key=lambda r: (rank.get(r.outcome, len(rank)), r.file))
    return ReportView(
        counts=counts,
        fail_on=tuple(str(k) for k in document.get("fail_on") or ()),
        recordings=tuple(recordings),
    )


def _recording(entry: Mapping[str, Any]) -> RecordingView:
    report: Mapping[str, Any] = entry.get("report") or {}
    status = report.get("status") or {}
    output = report.get("output") or {}
    requests = report.get("model_requests_changed") or {}
    answers = report.get("model_answers_used") or {}
    diverged = report.get("diverged")
    changed = int(requests.get("changed") or 0)
    why = "; ".join(str(p) for p in requests.get("parts") or ())
    return RecordingView(
        file=str(entry.get("file") or entry.get("nodeid") or "?"),
        nodeid=str(entry.get("nodeid") or ""),
        outcome=str(entry.get("outcome") or "?"),
        task=str(report.get("task") or ""),
        status_recorded=str(status.get("recorded") or "—"),
        status_replayed=str(status.get("replayed") or "—"),
        differences=tuple(str(d) for d in entry.get("differences") or ()),
        error=None if entry.get("error") is None else str(entry["error"]),
        divergence=None if not diverged else str(diverged.get("reason")),
        decisions=tuple(_decision_row(c) for c in report.get("decisions") or ()),
        output_diff=diff_lines(output.get("diff") or ()),
        prompt_diff=diff_lines(requests.get("prompt_diff") or ()),
        requests=(
            f"{changed} of {requests.get('total')} changed{f' ({why})' if why else ''}"
            if changed
            else None
        ),
        answers=f"{answers.get('used', 0)} of {answers.get('total', 0)}" if answers else "",
    )


def diff_lines(lines: Sequence[Any]) -> tuple[DiffLine, ...]:
    """`- old` / `+ new` / `  same` lines (the report's diff form) as typed lines."""
    found = []
    for line in lines:
        text = str(line)
        if text.startswith(("--- ", "+++ ", "@@")):
            continue  # the unified diff's file and hunk headers
        kind = {"-": "del", "+": "add"}.get(text[:1], "ctx")
        found.append(DiffLine(kind, text[2:] if text[1:2] == " " else text[1:]))
    return tuple(found)


def _decision_row(change: Mapping[str, Any]) -> DecisionRow:
    kind = str(change.get("change"))
    fields = [_field(f) for f in change.get("fields") or ()]
    return DecisionRow(
        change=kind,
        sign={"added": "+", "removed": "-"}.get(kind, "~"),
        step=str(change.get("step")),
        kind=str(change.get("kind")),
        key=str(change.get("key")),
        recorded=_what(change.get("expected")),
        replayed=_what(change.get("actual")),
        fields=tuple(fields),
    )


def _what(decision: Any) -> str:
    """A decision's outcome without its kind and key: `approve (tool refund)`; `—` for none."""
    if not isinstance(decision, Mapping):
        return "—"
    summary = Decision.from_dict(decision).summary()
    return summary.split(" → ", 1)[1] if " → " in summary else summary


def _field(diff: Mapping[str, Any]) -> str:
    before, after = diff.get("expected"), diff.get("actual")
    return f"{diff.get('path')}: {_value(before)} → {_value(after)}"


def _value(value: Any) -> str:
    if value is None:
        return "(none)"
    return repr(value) if isinstance(value, str) else str(value)
