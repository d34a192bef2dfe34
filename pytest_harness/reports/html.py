"""The `.html` replay report: one self-contained page, rendered by Jinja2 with autoescaping.

The page carries its CSS inline and loads nothing (no script, style sheet, font or image; a
Content-Security-Policy of `default-src 'none'` says so to the browser too). Everything that
came from a run (outputs, tool results, prompts, file names) is escaped by the template engine,
so a model output holding `<script>` shows as text.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from pytest_harness.reports.view import build_view

__all__ = ["render_html"]


@functools.cache
def _template() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("pytest_harness.reports", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template("report.html.j2")


def render_html(document: Mapping[str, Any]) -> str:
    """The page for a report document (`--replay-report x.json`'s content)."""
    text: str = _template().render(view=build_view(document))
    return text
