"""Rendering of replay reports for terminals: the plain text of `ReplayReport.render()`, coloured.

The characters are exactly those of `render()`; only styles are added (the status line bold,
`+` lines green, `-` lines red, `~` lines yellow), so a console that is not a terminal prints the
plain text. `rich` is imported when a report is rendered, not when this module is imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rich.console import Console
    from rich.text import Text

    from pytest_harness.replay.report import ReplayReport

__all__ = ["render_report", "report_text"]

_HEAD_STYLES = {"same": "bold green", "changed": "bold yellow", "diverged": "bold red"}
_LINE_STYLES = {"+": "green", "-": "red", "~": "yellow"}


def report_text(report: ReplayReport, fail_on: Iterable[str] | None = None) -> Text:
    """The report's plain `render(fail_on)` as rich `Text`, styled line by line.

    `fail_on` as `ReplayReport.render` takes it; None is its default (status, output, decisions).
    """
    from rich.text import Text

    plain = report.render() if fail_on is None else report.render(fail_on)
    text = Text()
    for number, line in enumerate(plain.splitlines()):
        if number:
            text.append("\n")
        if number == 0:
            word, colon, rest = line.partition(":")
            text.append(word, style=_HEAD_STYLES.get(word, "bold"))
            text.append(colon + rest, style="bold")
            continue
        body = line.lstrip(" ")
        marker = body[:2]
        if line.startswith("    ") and marker[:1] in _LINE_STYLES and marker[1:] == " ":
            text.append(line, style=_LINE_STYLES[marker[0]])
        elif body.startswith("status: "):
            text.append(line, style="yellow")
        else:
            text.append(line)
    return text


def render_report(
    report: ReplayReport, console: Console, fail_on: Iterable[str] | None = None
) -> None:
    """Print the report on `console` (coloured on a terminal, plain otherwise)."""
    console.print(report_text(report, fail_on), soft_wrap=True)
