"""`EvalReport`: online eval samples summed up per grader and task, against the window before.

Computed here from `Sample`s and rendered as a rich table or JSON; the CLI's `eval report`
(`evals/command.py`) only loads, calls and prints. A window is `[since, until)`; the previous
window is the one of the same length just before it, and `change` is the difference of the
pass rates (None when either window has no sample of that grader and task).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pytest_harness.store.base import Sample

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["EvalReport", "EvalRow", "build_report"]


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalRow:
    """One grader on one task over one window, and its pass rate in the previous window."""

    grader: str
    task: str
    count: int
    passed: int
    errors: int
    mean_score: float | None
    previous_count: int = 0
    previous_pass_rate: float | None = None

    @property
    def pass_rate(self) -> float:
        """Passed samples over all samples (a grader error counts as not passed)."""
        return self.passed / self.count if self.count else 0.0

    @property
    def change(self) -> float | None:
        """The pass rate minus the previous window's, or None without a previous sample."""
        if self.previous_pass_rate is None:
            return None
        return self.pass_rate - self.previous_pass_rate

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "grader": self.grader,
            "task": self.task,
            "count": self.count,
            "passed": self.passed,
            "errors": self.errors,
            "pass_rate": self.pass_rate,
            "mean_score": self.mean_score,
            "previous": {"count": self.previous_count, "pass_rate": self.previous_pass_rate},
            "change": self.change,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalReport:
    """Per grader and task: the samples of `[since, until)` against the window before it."""

    since: float
    until: float
    rows: tuple[EvalRow, ...]
    min_pass: float | None = None

    @property
    def failing(self) -> tuple[EvalRow, ...]:
        """The rows whose pass rate is below `min_pass`."""
        if self.min_pass is None:
            return ()
        return tuple(r for r in self.rows if r.pass_rate < self.min_pass)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (`eval report --json`)."""
        return {
            "since": _iso(self.since),
            "until": _iso(self.until),
            "window_seconds": self.until - self.since,
            "min_pass": self.min_pass,
            "rows": [r.to_dict() for r in self.rows],
            "failing": [{"grader": r.grader, "task": r.task} for r in self.failing],
        }

    def table(self) -> Table:
        """A rich table: grader, task, samples, pass rate, mean score, change, errors."""
        from rich.table import Table
        from rich.text import Text

        table = Table(box=None, pad_edge=False, header_style="bold")
        for name in ("grader", "task"):
            table.add_column(name, no_wrap=True)
        for name in ("samples", "pass rate", "mean score", "change", "errors"):
            table.add_column(name, no_wrap=True, justify="right")
        failing = {(r.grader, r.task) for r in self.failing}
        for row in self.rows:
            style = "bold red" if (row.grader, row.task) in failing else ""
            change = row.change
            if change is None:
                shown = Text("new", style="dim")
            else:
                points = change * 100
                colour = "green" if points > 0 else "red" if points < 0 else ""
                shown = Text(f"{points:+.1f} pp", style=colour)
            table.add_row(
                row.grader,
                row.task,
                str(row.count),
                Text(f"{row.pass_rate:.0%}", style=style),
                "-" if row.mean_score is None else f"{row.mean_score:.2f}",
                shown,
                str(row.errors),
            )
        return table


def build_report(
    current: Iterable[Sample],
    previous: Iterable[Sample],
    *,
    since: float,
    until: float,
    min_pass: float | None = None,
) -> EvalReport:
    """Sum the samples of the window and of the previous one up per grader and task."""
    now = _groups(current)
    before = _groups(previous)
    rows = []
    for (grader, task), samples in sorted(now.items()):
        scores = [s.score for s in samples if s.score is not None]
        earlier = before.get((grader, task), [])
        rows.append(
            EvalRow(
                grader=grader,
                task=task,
                count=len(samples),
                passed=sum(1 for s in samples if s.passed),
                errors=sum(1 for s in samples if s.error is not None),
                mean_score=sum(scores) / len(scores) if scores else None,
                previous_count=len(earlier),
                previous_pass_rate=(
                    sum(1 for s in earlier if s.passed) / len(earlier) if earlier else None
                ),
            )
        )
    return EvalReport(since=since, until=until, rows=tuple(rows), min_pass=min_pass)


def _groups(samples: Iterable[Sample]) -> dict[tuple[str, str], Sequence[Sample]]:
    groups: dict[tuple[str, str], list[Sample]] = {}
    for sample in samples:
        groups.setdefault((sample.grader, sample.task), []).append(sample)
    return dict(groups)


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, tz=UTC).isoformat(timespec="seconds")
