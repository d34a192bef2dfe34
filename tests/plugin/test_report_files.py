"""`--replay-report PATH` by suffix: `.json`, `.html`, `.md`, several at once, and a plugin's."""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest

from .conftest import Project
from .test_replay_items import STRICTER, recorded

SCRIPT = "<script>alert('owned')</script>"


def drifted(project: Project) -> None:
    """Record, then drift two ways: a stricter rule, and a guard that no longer redacts an
    output holding markup (`<script>`); the system prompt changes too."""
    from .conftest import SPEC, TESTS

    card = "say: Your card is 4111111111111111."
    project.write_spec(SPEC.replace(card, f'say: "Your card is 4111111111111111. {SCRIPT} & co"'))
    project.tests(
        TESTS.replace('"Your card is [REDACTED]."', f'"Your card is [REDACTED]. {SCRIPT} & co"')
    )
    project.run("--record-recordings=all").assert_outcomes(passed=4)
    project.change_spec(*STRICTER)
    project.change_spec("action: redact", "action: warn")
    project.change_spec("You are the order desk.", "You are the <b>order</b> desk.")


def test_json_html_and_markdown_in_one_session(project: Project, workers: int) -> None:
    drifted(project)
    out = project.path / "out"
    result = project.run(
        "--replay-recordings",
        f"--replay-report={out / 'replay.json'}",
        f"--replay-report={out / 'replay.html'}",
        f"--replay-report={out / 'summary.md'}",
        workers=workers,
    )
    result.assert_outcomes(passed=2, failed=2)
    data = json.loads((out / "replay.json").read_text(encoding="utf-8"))
    assert data["summary"]["drifted"] == 2

    page = (out / "replay.html").read_text(encoding="utf-8")
    assert SCRIPT not in page and "<script" not in page.lower()
    assert "&lt;script&gt;alert(&#39;owned&#39;)&lt;/script&gt; &amp; co" in page
    assert "You are the &lt;b&gt;order&lt;/b&gt; desk." in page  # the prompt diff, escaped
    for needle in ("http://", "https://", "src=", "@import", "url("):
        assert needle not in page, needle
    assert '<td id="count-drifted">2</td>' in page
    assert '<tr class="change-added"><td class="mono">+</td><td>2</td><td>rule</td>' in page
    assert '<span class="status-before">completed</span> → ' in page
    assert '<span class="diff-del">- Refunded $30.</span>' in page

    md = (out / "summary.md").read_text(encoding="utf-8")
    assert "| total | same | drifted | diverged | error | updated |" in md
    assert "| 4 | 2 | 2 | 0 | 0 | 0 |" in md
    assert (
        "| `recordings/test_desk/test_small_refund.yaml` | ⚠️ drifted "
        "| completed → **awaiting\\_approval** | decisions, output, requests, status |"
    ) in md
    # inside a fence the text stays as it is (GitHub shows it as text); nowhere else is it raw
    assert f"+ Your card is 4111111111111111. {SCRIPT} & co\n```" in md
    outside = re.sub(r"(?s)\n(`{3,})diff\n.*?\n\1\n", "\n", md)
    assert "<script" not in outside and "script" not in outside


def test_an_unknown_suffix_is_a_usage_error_naming_the_choices(project: Project) -> None:
    result = project.run("--replay-recordings", "--replay-report=out/report.txt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--replay-report out/report.txt: suffix '.txt'; choose from .html, .json, .md "
            "(a plugin adds more through harness_report_renderers)*"
        ]
    )


CSV_PLUGIN = textwrap.dedent(
    """
    from pytest_harness.hookspecs import hookimpl


    def render_csv(document):
        lines = ["file,outcome"]
        lines += [f"{r['file']},{r['outcome']}" for r in document["recordings"]]
        return "\\n".join(lines) + "\\n"


    @hookimpl
    def harness_report_renderers():
        return {".csv": render_csv}
    """
)


def test_a_plugin_package_adds_a_suffix(
    project: Project, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path_factory.mktemp("site")
    (site / "csv_reports.py").write_text(CSV_PLUGIN, encoding="utf-8")
    info = site / "csv_reports-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: csv-reports\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest_harness]\ncsv = csv_reports\n")
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    drifted(project)
    report = project.path / "out.csv"
    result = project.pytester.runpytest_subprocess(
        "--replay-recordings", f"--replay-report={report}", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=2, failed=2)
    assert report.read_text(encoding="utf-8").splitlines() == [
        "file,outcome",
        "recordings/test_desk/test_big_refund.yaml,same",
        "recordings/test_desk/test_denied.yaml,same",
        "recordings/test_desk/test_redacted.yaml,drifted",
        "recordings/test_desk/test_small_refund.yaml,drifted",
    ]


def test_a_renderer_that_fails_fails_the_session_naming_it(project: Project) -> None:
    recorded(project)
    (project.path / "conftest.py").write_text(
        textwrap.dedent(
            """
            from pytest_harness.plugins import plugin_manager
            from pytest_harness.hookspecs import hookimpl


            class Broken:
                @hookimpl
                def harness_report_renderers(self):
                    return {".bad": lambda document: 1 / 0}


            plugin_manager().register(Broken(), "broken-renderer")
            """
        )
    )
    result = project.pytester.runpytest_subprocess(
        "--replay-recordings", "--replay-report=r.bad", "-p", "no:cacheprovider"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*the .bad report renderer failed writing *r.bad: ZeroDivisionError: division by zero"]
    )
    assert not Path(project.path / "r.bad").exists()
