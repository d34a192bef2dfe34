"""Rendering of replay reports for terminals: the plain text of `ReplayReport.render()`, coloured.

The characters are exactly those of `render()`; only styles are added (the status line bold,
`+` lines green, `-` lines red, `~` lines yellow), so a console that is not a terminal prints the
plain text. `rich` is imported when a report is rendered, not when this module is imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from pytest_harness.replay.report import ReplayReport

__all__ = ["render_report", "report_text"]

_HEAD_STYLES = {"same": "bold green", "changed": "bold yellow", "diverged": "bold red"}
_LINE_STYLES = {"+": "green", "-": "red", "~": "yellow"}


def report_text(report: ReplayReport) -> Text:
    """The report's plain `render()` as rich `Text`, styled line by line."""
    from rich.text import Text

    text = Text()
    for number, line in enumerate(report.render().splitlines()):
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


def render_report(report: ReplayReport, console: Console) -> None:
    """Print the report on `console` (coloured on a terminal, plain otherwise)."""
    console.print(report_text(report), soft_wrap=True)
