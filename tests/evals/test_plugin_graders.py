"""`harness_graders`: a plugin package, installed through its entry point, adds a check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

PLUGIN = '''
"""A grader plugin: `word_count` passes when the text has at most `options.max_words` words."""

from pytest_harness.hookspecs import hookimpl
from pytest_harness.evals import Verdict


def _word_count(grader, spec, where):
    limit = grader.options.get("max_words")
    if not isinstance(limit, int):
        raise spec.error("word_count needs options.max_words, a whole number", where)

    def check(subject):
        words = len(subject.text.split())
        return Verdict(1.0 if words <= limit else 0.0, f"{words} words")

    return check


@hookimpl
def harness_graders():
    return {"word_count": _word_count}
'''

SPEC = """
version: 1
name: plugin-app
models:
  default:
    use: scripted
    script: [{say: "Order A-1 was delivered on May 2."}]
tasks:
  orders: {prompt: You are an order desk.}
evals:
  online:
    graders:
      - {id: brief, check: word_count, options: {max_words: 10}}
      - {id: terse, check: word_count, options: {max_words: 3}}
"""

SCRIPT = """
import asyncio, json, sys
import pytest_harness as ph


async def main():
    try:
        harness = ph.load(sys.argv[1])
    except ph.SpecError as exc:
        print(json.dumps({"error": str(exc)}))
        return
    async with harness:
        await harness.run("orders", "Where is A-1?", principal="ann")
        await harness.flush_evals()
        samples = await harness.samples()
    print(json.dumps({s.grader: [s.passed, s.detail] for s in samples}))


asyncio.run(main())
"""


def install_plugin(site: Path) -> None:
    """Install the plugin the way pip would: the module and a dist-info with its entry point."""
    (site / "grader_plugin_example.py").write_text(PLUGIN, encoding="utf-8")
    info = site / "grader_plugin_example-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: grader-plugin-example\nVersion: 0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[pytest_harness]\nword_count = grader_plugin_example\n", encoding="utf-8"
    )


def run(tmp_path: Path, spec: str, *, installed: bool) -> dict[str, object]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    if installed and not (site / "grader_plugin_example.py").exists():
        install_plugin(site)
    (tmp_path / "harness.yaml").write_text(textwrap.dedent(spec), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "harness.yaml")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_an_installed_plugin_adds_a_grader_check(tmp_path: Path) -> None:
    got = run(tmp_path, SPEC, installed=True)
    assert got == {"brief": [True, "7 words"], "terse": [False, "7 words"]}


def test_without_the_plugin_the_check_is_unknown(tmp_path: Path) -> None:
    got = run(tmp_path, SPEC, installed=False)
    error = str(got["error"])
    assert "evals.online.graders[0].check: unknown grader check 'word_count'" in error


def test_the_plugin_check_reports_its_own_spec_errors(tmp_path: Path) -> None:
    got = run(tmp_path, SPEC.replace("max_words: 10", "max_words: lots"), installed=True)
    error = str(got["error"])
    assert "evals.online.graders[0]: word_count needs options.max_words" in error
