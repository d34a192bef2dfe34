"""The `.md` replay report: a summary sized for a CI job summary (`$GITHUB_STEP_SUMMARY`).

Counts, a table of the recordings that did not replay the same, and per drifted one its status
change, decision changes and output diff, each in a collapsed `<details>` block. Text from a
run is escaped for Markdown tables and HTML, diffs sit in fences longer than any backtick run
they hold, and the whole stays under `MAX_BYTES` (GitHub takes up to 1 MiB per step): what does
not fit is counted and left to the HTML or JSON report.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pytest_harness.reports.view import DiffLine, RecordingView, build_view

__all__ = ["MAX_BYTES", "render_markdown"]

MAX_BYTES = 64 * 1024
"""The largest summary written; the details of further recordings are left out (counted)."""

_ICON = {"same": "✅", "drifted": "⚠️", "diverged": "❌", "error": "❌", "updated": "📝"}


def render_markdown(document: Mapping[str, Any], *, max_bytes: int = MAX_BYTES) -> str:
    """The Markdown summary of a report document."""
    view = build_view(document)
    c = view.counts
    names = ("total", "same", "drifted", "diverged", "error", "updated")
    head = [
        f"## {_icon(view.failed)} {_cell(view.title)}",
        "",
        "| " + " | ".join(names) + " |",
        "|" + "---:|" * len(names),
        "| " + " | ".join(str(c.get(n, 0)) for n in names) + " |",
        "",
    ]
    notable = [r for r in view.recordings if r.has_details]
    if notable:
        head += ["| recording | outcome | status | differences |", "|---|---|---|---|"]
        for r in notable:
            status = (
                f"{_cell(r.status_recorded)} → **{_cell(r.status_replayed)}**"
                if r.status_changed
                else _cell(r.status_recorded)
            )
            head.append(
                f"| `{_code(r.file)}` | {_ICON.get(r.outcome, '')} {_cell(r.outcome)} "
                f"| {status} | {_cell(', '.join(r.differences))} |"
            )
        head.append("")
    text = "\n".join(head)
    left_out = 0
    for r in notable:
        block = "\n".join(_details(r)) + "\n"
        if left_out or len((text + block).encode("utf-8")) > max_bytes - 200:
            left_out += 1
            continue
        text += block
    if left_out:
        text += (
            f"\n_{left_out} more recording{'s' if left_out != 1 else ''} not detailed here "
            "(size limit): see the HTML or JSON report._\n"
        )
    return text


def _details(r: RecordingView) -> list[str]:
    lines = [
        "<details>",
        f"<summary>{_ICON.get(r.outcome, '')} {html.escape(r.outcome)}: "
        f"<code>{html.escape(r.file)}</code></summary>",
        "",
    ]
    if r.error:
        lines += _fenced([DiffLine("ctx", r.error)], "text")
    if r.divergence:
        lines += [f"the replay stopped: {_cell(r.divergence)}", ""]
    if r.status_changed:
        lines += [f"status: {_cell(r.status_recorded)} → **{_cell(r.status_replayed)}**", ""]
    if r.decisions:
        lines += ["| | step | kind | key | recorded | replayed |", "|---|---|---|---|---|---|"]
        for d in r.decisions:
            replayed = "<br>".join([_cell(d.replayed), *(_cell(f) for f in d.fields)])
            lines.append(
                f"| {d.sign} | {d.step} | {_cell(d.kind)} | {_cell(d.key)} "
                f"| {_cell(d.recorded)} | {replayed} |"
            )
        lines.append("")
    if r.output_diff:
        lines += ["output:", "", *_fenced(r.output_diff, "diff")]
    if r.requests:
        lines += [f"model requests: {_cell(r.requests)}", ""]
    if r.prompt_diff:
        lines += ["system prompt:", "", *_fenced(r.prompt_diff, "diff")]
    lines += ["</details>", ""]
    return lines


def _fenced(lines: Iterable[DiffLine], lang: str) -> list[str]:
    signs = {"del": "-", "add": "+"}
    body = [
        f"{signs.get(line.kind, ' ')} {line.text}" if lang == "diff" else line.text
        for line in lines
    ]
    longest = max((len(m) for m in re.findall(r"`+", "\n".join(body))), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{lang}", *body, fence, ""]


def _icon(failed: bool) -> str:
    return "❌" if failed else "✅"


def _cell(text: str) -> str:
    """Text safe in a Markdown table cell: HTML escaped, pipes and newlines neutralised."""
    escaped = html.escape(str(text), quote=False)
    escaped = re.sub(r"([\\`*_\[\]|])", r"\\\1", escaped)
    return escaped.replace("\r", "").replace("\n", "<br>")


def _code(text: str) -> str:
    return str(text).replace("`", "'").replace("|", "\\|").replace("\n", " ")
