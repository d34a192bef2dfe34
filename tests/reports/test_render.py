"""The report renderers on documents made by hand: escaping, ordering, size bounds."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markupsafe import escape

from pytest_harness.reports import ReportError, render_json, renderer_for, suffixes, write_report
from pytest_harness.reports.html import render_html
from pytest_harness.reports.markdown import render_markdown
from pytest_harness.reports.view import build_view


def entry(file: str, outcome: str, output: tuple[str, str] = ("a", "a")) -> dict[str, Any]:
    same = outcome == "same"
    diff = [] if output[0] == output[1] else [f"- {output[0]}", f"+ {output[1]}"]
    return {
        "file": file,
        "nodeid": f"replay {file}",
        "outcome": outcome,
        "differences": [] if same else ["output"],
        "error": None,
        "report": {
            "task": "orders",
            "status": {"recorded": "completed", "replayed": "completed"},
            "output": {"recorded": output[0], "replayed": output[1], "diff": diff},
            "decisions": [],
            "model_requests_changed": {"changed": 0, "total": 1, "parts": [], "prompt_diff": []},
            "model_answers_used": {"used": 1, "total": 1},
            "diverged": None,
        },
    }


def document(*entries: dict[str, Any]) -> dict[str, Any]:
    counts = {"total": len(entries), "same": 0, "drifted": 0, "diverged": 0, "error": 0}
    for e in entries:
        counts[e["outcome"]] += 1
    return {"format": "x", "fail_on": ["output"], "summary": counts, "recordings": list(entries)}


def test_drifted_recordings_are_listed_first() -> None:
    view = build_view(document(entry("a.yaml", "same"), entry("b.yaml", "drifted", ("x", "y"))))
    assert [r.file for r in view.recordings] == ["b.yaml", "a.yaml"]
    assert view.title == "pytest-harness replay: 1 drifted of 2"


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=60))
def test_html_shows_any_run_text_as_text(text: str) -> None:
    page = render_html(document(entry("f<i>.yaml", "drifted", ("before", text))))
    assert str(escape(text)) in page
    assert "<script" not in page.lower() and "<i>" not in page


def test_markdown_fences_outlast_backticks_in_the_text() -> None:
    md = render_markdown(document(entry("f.yaml", "drifted", ("x", "`````"))))
    assert "``````diff\n- x\n+ `````\n``````" in md


def test_markdown_stays_under_its_size_bound() -> None:
    big = "y" * 4000
    entries = [entry(f"r{i:03}.yaml", "drifted", ("x", big)) for i in range(100)]
    md = render_markdown(document(*entries), max_bytes=20_000)
    assert len(md.encode()) <= 20_000
    shown = len(re.findall(r"<details>", md))
    assert 0 < shown < 100
    assert f"_{100 - shown} more recordings not detailed here (size limit)" in md
    assert md.count("| `r") == 100  # every recording keeps its row


def test_markdown_cells_cannot_break_the_table() -> None:
    e = entry("f.yaml", "drifted", ("x", "y"))
    e["report"]["status"]["replayed"] = "a|b\n<img src=x>"
    md = render_markdown(document(e))
    row = next(line for line in md.splitlines() if line.startswith("| `f.yaml`"))
    assert "a\\|b<br>&lt;img src=x&gt;" in row


def test_renderers_by_suffix_and_errors(tmp_path: Any) -> None:
    assert suffixes()[:3] == [".html", ".json", ".md"]
    assert renderer_for("X.HTML") is renderer_for("x.html")
    with pytest.raises(ReportError, match=r"--replay-report out: no suffix; choose from \.html"):
        renderer_for("out")
    doc = document(entry("a.yaml", "same"))
    write_report(tmp_path / "deep" / "r.json", doc)
    assert (tmp_path / "deep" / "r.json").read_text() == render_json(doc)
    assert [p.name for p in (tmp_path / "deep").iterdir()] == ["r.json"]  # no temp file left
