"""`harness_redaction_patterns`: a plugin package, installed through its entry point, adds shapes.

The package is installed the way pip lays one out (the module and a `.dist-info` folder whose
`entry_points.txt` names it in the `pytest_harness` group) into a folder put on a fresh
process's path, so the plugin manager finds it exactly as it finds an installed plugin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

PLUGIN = textwrap.dedent(
    '''
    """Acme's ticket ids and internal tokens are secrets too."""
    import re

    from pytest_harness import SecretPattern
    from pytest_harness.hookspecs import hookimpl


    @hookimpl
    def harness_redaction_patterns():
        return [
            SecretPattern("acme-ticket", r"ACME-(?P<secret>\\d{6})"),
            re.compile(r"acmetok_[a-z0-9]{12}"),
        ]
    '''
)

CHECK = textwrap.dedent(
    """
    import json
    from pytest_harness.plugins import plugin_manager
    from pytest_harness.recording.golden import dump_recording
    from pytest_harness.recording.model import Recording
    from pytest_harness.redaction import redact, redact_text

    names = [name for name, _ in plugin_manager().list_name_plugin()]
    recording = Recording(
        task="t",
        input="see ACME-123456",
        principal={"id": "ann"},
        output="use acmetok_abcdef123456 and Bearer abcdefghijkl",
    )
    print(json.dumps({
        "plugins": names,
        "text": redact_text("ticket ACME-123456 for bob, acmetok_abcdef123456"),
        "nested": redact({"note": ["ACME-654321"]}),
        "golden": dump_recording(recording),
    }))
    """
)


def install(site: Path) -> None:
    (site / "acme_redact.py").write_text(PLUGIN, encoding="utf-8")
    info = site / "acme_redact-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: acme-redact\nVersion: 1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[pytest_harness]\nacme = acme_redact\n", encoding="utf-8"
    )


def run(site: Path | None) -> dict[str, object]:
    env = {**os.environ}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_a_plugin_adds_secret_shapes_through_its_entry_point(tmp_path: Path) -> None:
    install(tmp_path)
    got = run(tmp_path)
    assert "acme" in got["plugins"]  # type: ignore[operator]
    assert got["text"] == "ticket ACME-[REDACTED] for bob, [REDACTED]"
    assert got["nested"] == {"note": ["ACME-[REDACTED]"]}
    golden = str(got["golden"])
    assert "input: see ACME-[REDACTED]" in golden
    assert "use [REDACTED] and Bearer [REDACTED]" in golden  # built-in shapes still apply
    assert "123456" not in golden


def test_without_the_plugin_its_shapes_are_left_alone(tmp_path: Path) -> None:
    got = run(None)
    assert "acme" not in got["plugins"]  # type: ignore[operator]
    assert got["text"] == "ticket ACME-123456 for bob, acmetok_abcdef123456"
