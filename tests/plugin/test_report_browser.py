"""The HTML replay report as a person sees it: opened in headless Chromium (Debian's package).

`--dump-dom` prints the DOM after the page loaded (and after any script would have run), so a
`<script>` from a run that executed would show in it; `--screenshot` draws the page. The
network is off for the browser (background networking, component updates and sync disabled)
and the page's own Content-Security-Policy allows nothing to load. When `CI` is set a missing
Chromium fails the test; elsewhere it skips.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_harness.plugin.settings import in_ci

from .conftest import Project
from .test_report_files import SCRIPT, drifted

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
)


def chromium() -> str:
    found = shutil.which("chromium") or (
        "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
    )
    if found is None:
        message = "Debian's chromium is not installed (apt-get install -y chromium)"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return found


def browse(page: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    profile = tmp / "profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run(
        [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def visible_text(dom: str) -> str:
    body = re.sub(r"(?s)<head>.*?</head>", "", dom)
    return html.unescape(re.sub(r"<[^>]+>", "", body))


def test_the_html_report_in_headless_chromium(project: Project, tmp_path: Path) -> None:
    chromium()
    drifted(project)
    page = project.path / "replay.html"
    project.run("--replay-recordings", f"--replay-report={page}").assert_outcomes(
        passed=2, failed=2
    )

    dom = browse(page, tmp_path, "--dump-dom").stdout
    text = visible_text(dom)
    # the drifted recordings, first, each with its status change
    assert "pytest-harness replay: 2 drifted of 4" in text
    assert "drifted recordings/test_desk/test_small_refund.yaml (orders)" in text
    assert "status: completed → awaiting_approval" in text
    # the changed decision, in a row coloured by its change
    row = re.search(r'<tr class="change-added">(.*?)</tr>', dom, re.S)
    assert row is not None
    cells = [visible_text(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)]
    assert cells[:6] == ["+", "2", "rule", "R1", "—", "approve (tool refund)"]
    # the diff lines carry their colour classes; the CSS gives those classes their colours
    assert re.search(r'<span class="diff-del">- Refunded \$30\.</span>', dom)
    assert re.search(r'<span class="diff-add">\+ Refunded \$30\.</span>', dom) is None
    assert ".diff-del { background: #ffebe9; color: #82071e; }" in dom
    assert ".diff-add { background: #dafbe1; color: #116329; }" in dom
    assert re.search(r'<span class="diff-add">\+ Your card is 4111111111111111\. &lt;script', dom)
    # the model's <script> is text on the page, and never became an element
    assert f"+ Your card is 4111111111111111. {SCRIPT} & co" in text
    assert "<script" not in dom.lower()
    # collapsible: every drifted recording is a <details> (open), the prompt diff closed
    assert dom.count('<details id="r') == 2
    assert '<details class="prompt"><summary>System prompt diff</summary>' in dom

    shot = tmp_path / "report.png"
    browse(page, tmp_path, f"--screenshot={shot}", "--window-size=1200,1400")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 10_000
