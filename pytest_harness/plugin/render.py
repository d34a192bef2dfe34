"""How a failed replay item reads: coloured, with a decision table, on a terminal; plain elsewhere.

The report's content is computed by `pytest_harness.replay.report` (its `render()` text and its
`to_dict()` form); this module only lays it out. pytest asks a failure for `toterminal()` when it
prints to a terminal and for `str()` when it writes junit XML, so a terminal with colour gets the
coloured form and everything else the plain DESIGN §6 text. Under pytest-xdist the controller
rebuilds the same object from the data the worker sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _pytest._io import TerminalWriter

__all__ = ["ReplayFailureRepr"]


_HEAD = {"same": {"green": True}, "changed": {"yellow": True}, "diverged": {"red": True}}
"""The first word's colour, as `pytest_harness.report` (the CLI's renderer) colours it."""


@dataclass(frozen=True, slots=True)
class _Crash:
    """What pytest's short summary and junit's `message` attribute read: one line."""

    path: str
    lineno: int
    message: str


class ReplayFailureRepr:
    """The failure of one replay item: the §6 report, and what to do about it."""

    def __init__(self, report: Mapping[str, Any], plain: str, hint: str | None = None) -> None:
        self.report = report
        self.plain = plain
        self.hint = hint

    @property
    def reprcrash(self) -> _Crash:
        """The report's first line, for the short test summary and junit's message."""
        return _Crash(str(self.report.get("source") or ""), 0, self.plain.split("\n", 1)[0])

    def __str__(self) -> str:
        return self.plain if self.hint is None else f"{self.plain}\n{self.hint}"

    def toterminal(self, tw: TerminalWriter) -> None:
        """Write the report: coloured with a decision table when `tw` has markup, else plain."""
        if not tw.hasmarkup:
            for line in str(self).splitlines():
                tw.line(line)
            return
        lines = self.plain.splitlines()
        word, colon, rest = lines[0].partition(":")
        tw.write(word, bold=True, **_HEAD.get(word, {}))
        tw.line(colon + rest, bold=True)
        section = ""
        for line in lines[1:]:
            if line.startswith("  ") and not line.startswith("   "):
                section = line.strip().split(":", 1)[0]
                if section == "decisions":
                    tw.line("  decisions:", bold=True)
                    _decision_table(tw, self.report.get("decisions") or ())
                    continue
            elif section == "decisions":
                continue  # drawn as the table
            _coloured(tw, line, section)
        if self.hint is not None:
            tw.line(self.hint, yellow=True)


def _coloured(tw: TerminalWriter, line: str, section: str) -> None:
    body = line.lstrip()
    if section == "status":
        label, _, change = line.partition(": ")
        before, _, after = change.partition(" → ")
        tw.write(f"{label}: ", bold=True)
        tw.write(before, green=True)
        tw.write(" → ")
        tw.line(after, red=True, bold=True)
    elif section == "output" and line.startswith("    "):
        tw.line(line, red=body.startswith("-"), green=body.startswith("+"))
    elif section == "expected":
        tw.line(line, green=True)
    elif section == "actual":
        tw.line(line, red=True)
    elif body.startswith(("output:", "diverged")):
        tw.line(line, bold=True)
    else:
        tw.line(line)


def _decision_table(tw: TerminalWriter, changes: Sequence[Mapping[str, Any]]) -> None:
    """`changes` (`DecisionChange.to_dict()`s) as aligned columns, one colour per change."""
    header: tuple[str, ...] = ("", "step", "kind", "key", "recorded", "replayed")
    rows: list[tuple[str, tuple[str, ...], list[str]]] = []
    for change in changes:
        kind = str(change.get("change"))
        sign = {"added": "+", "removed": "-"}.get(kind, "~")
        fields = [_field(f) for f in change.get("fields") or ()]
        error = _error_of(change.get("actual")) or _error_of(change.get("expected"))
        if error and not any(f.get("path") == "error" for f in change.get("fields") or ()):
            fields.insert(0, f"error: {error}")  # a CEL message, whole: never cut by a column
        row: tuple[str, ...] = (
            sign,
            str(change.get("step")),
            str(change.get("kind")),
            str(change.get("key")),
            _what(change.get("expected")),
            _what(change.get("actual")),
        )
        rows.append((kind, row, fields))
    widths = [max(len(row[i]) for row in [header, *(r[1] for r in rows)]) for i in range(6)]
    room = max(20, (tw.fullwidth - 4 - sum(widths[:4]) - 10) // 2)
    widths[4] = min(widths[4], room)
    widths[5] = min(widths[5], room)

    def cells_line(cells: Sequence[str]) -> str:
        return "    " + "  ".join(_fit(c, w) for c, w in zip(cells, widths, strict=True)).rstrip()

    tw.line(cells_line(header), bold=True)
    for kind, cells, fields in rows:
        colour = {"added": {"green": True}, "removed": {"red": True}}.get(kind, {"yellow": True})
        tw.line(cells_line(cells), **colour)
        indent = " " * (4 + sum(widths[:4]) + 8)
        for text in fields:
            tw.line(indent + text)


def _what(decision: Any) -> str:
    """A decision's outcome without its kind and key: `approve (tool refund)`; `—` for none."""
    if not isinstance(decision, Mapping):
        return "—"
    from pytest_harness.runtime.trace import Decision

    shown = Decision.from_dict(decision)
    if shown.kind == "rule" and shown.detail.get("error"):  # the error goes on its own line
        shown = Decision(shown.step, shown.kind, shown.key, {**shown.detail, "error": None})
    summary = shown.summary()
    return summary.split(" → ", 1)[1] if " → " in summary else summary


def _error_of(decision: Any) -> str | None:
    if isinstance(decision, Mapping) and decision.get("kind") == "rule":
        detail = decision.get("detail") or {}
        error = detail.get("error") if isinstance(detail, Mapping) else None
        return str(error) if error else None
    return None


def _field(diff: Mapping[str, Any]) -> str:
    path = str(diff.get("path"))
    if path == "error" or path.endswith(".error"):  # an error message reads whole, as written
        before, after = (diff.get(k) for k in ("expected", "actual"))
        return f"{path}: {'(none)' if before is None else before} → {after or '(none)'}"
    return f"{path}: {_value(diff.get('expected'))} → {_value(diff.get('actual'))}"


def _value(value: Any) -> str:
    text = "(none)" if value is None else repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:59] + "…"


def _fit(text: str, width: int) -> str:
    return text.ljust(width) if len(text) <= width else text[: width - 1] + "…"
