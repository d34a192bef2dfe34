"""`examples/flight_recorder/`: the walkthrough runs offline, end to end, in a real process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest_harness as ph

EXAMPLE = Path(__file__).parent.parent / "examples" / "flight_recorder" / "flight_recorder.py"


def test_the_walkthrough_exports_verifies_and_plays_back_with_no_further_calls(
    tmp_path: Path,
) -> None:
    output = tmp_path / "invoice-incident.hx"
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "completed: ACME owes 242.75 on 3 overdue invoices; card on file [REDACTED]."
    assert "valid: True, complete: True, issues: 0" in lines
    assert (
        lines[-1]
        == "calls during the run: {'model': 3, 'tool': 1}; during verify and playback: none"
    )
    played = ph.playback(output)
    kinds = [r["kind"] for r in played.records if r["kind"] != "event"]
    assert kinds[:3] == ["run.started", "model.started", "model.failed"]
    assert len(played.artifacts) == 1
    assert list(tmp_path.iterdir()) == [output]  # the store went with its temporary folder
