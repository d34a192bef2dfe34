"""The spec digest covers the files the spec names (DESIGN §14: "script files included").

A Temporal worker is identified as `<name>@<spec digest>` and refuses runs started for another
digest; a script edited under a running worker must therefore change the digest, whether the
spec is checked from its files or read from the spec cache. Nothing else may change it: not
another process, not the cache, not moving the checkout.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_harness.spec import cache as spec_cache
from pytest_harness.spec.baseline import BaselineDocument
from pytest_harness.spec.build import _digest
from pytest_harness.spec.cache import LazyPrograms
from pytest_harness.spec.loader import load_spec
from pytest_harness.spec.spec import Spec

SPEC = textwrap.dedent(
    """\
    version: 1
    name: digest-files

    models:
      default:
        use: openai
        model: gpt-4.1-mini
        api_key_env: OPENAI_API_KEY

    guards:
      - id: G1
        on: output
        check: json_schema
        schema: answer.schema.json

    tasks:
      orders:
        prompt: Be brief.

    evals:
      online:
        graders:
          - id: shape
            check: json_schema
            schema: grader.schema.json

    environments:
      offline:
        models:
          default:
            use: scripted
            script: orders.script.yaml
    """
)

SCRIPT = "- say: first answer\n"
SCHEMA = '{"type": "object"}\n'


@pytest.fixture(autouse=True)
def _app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_ENV", raising=False)
    monkeypatch.delenv(spec_cache.DISABLE, raising=False)
    Path("harness.yaml").write_text(SPEC, encoding="utf-8")
    Path("orders.script.yaml").write_text(SCRIPT, encoding="utf-8")
    Path("answer.schema.json").write_text(SCHEMA, encoding="utf-8")
    Path("grader.schema.json").write_text(SCHEMA, encoding="utf-8")


def uncached(**kwargs: object) -> Spec:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(spec_cache.DISABLE, "1")
        return load_spec("harness.yaml", **kwargs)  # type: ignore[arg-type]


def cached(**kwargs: object) -> Spec:
    """The spec taken from its cache entry (written by a first load when there is none)."""
    load_spec("harness.yaml", **kwargs)  # type: ignore[arg-type]
    spec = load_spec("harness.yaml", **kwargs)  # type: ignore[arg-type]
    assert isinstance(spec.rule_programs, LazyPrograms), "not from the cache"
    return spec


@pytest.mark.parametrize("load", [uncached, cached], ids=["uncached", "cached"])
def test_an_edited_script_file_changes_the_digest(load: object) -> None:
    before = load(env="offline")  # type: ignore[operator]
    Path("orders.script.yaml").write_text("- say: another answer\n", encoding="utf-8")
    after = load(env="offline")  # type: ignore[operator]
    assert after.digest != before.digest
    assert after.digest == uncached(env="offline").digest
    Path("orders.script.yaml").write_text(SCRIPT, encoding="utf-8")
    assert load(env="offline").digest == before.digest  # type: ignore[operator]


def test_an_edited_script_changes_the_digest_of_the_entry_already_written() -> None:
    """The entry written before the edit is still taken (the spec is unchanged), its digest new."""
    first = cached(env="offline")
    [entry] = sorted((Path(".harness") / "cache").glob("harness-*.json"))
    written = entry.read_bytes()
    Path("orders.script.yaml").write_text("- say: edited\n", encoding="utf-8")
    second = load_spec("harness.yaml", env="offline")
    assert isinstance(second.rule_programs, LazyPrograms)
    assert entry.read_bytes() == written  # a hit, not a rebuild
    assert second.digest != first.digest


@pytest.mark.parametrize("load", [uncached, cached], ids=["uncached", "cached"])
def test_an_edited_json_schema_guard_file_changes_the_digest(load: object) -> None:
    before = load()  # type: ignore[operator]
    Path("answer.schema.json").write_text('{"type": "array"}\n', encoding="utf-8")
    assert load().digest != before.digest  # type: ignore[operator]


@pytest.mark.parametrize("load", [uncached, cached], ids=["uncached", "cached"])
def test_a_baseline_guard_schema_file_is_in_the_digest(load: object) -> None:
    Path("org.yaml").write_text(
        "guards:\n  - {id: B1, on: output, check: json_schema, schema: org.schema.json}\n",
        encoding="utf-8",
    )
    Path("org.schema.json").write_text(SCHEMA, encoding="utf-8")
    text = SPEC.replace("name: digest-files\n", "name: digest-files\nbaseline: org.yaml\n")
    Path("harness.yaml").write_text(text, encoding="utf-8")
    before = load()  # type: ignore[operator]
    Path("org.schema.json").write_text('{"type": "string"}\n', encoding="utf-8")
    assert load().digest != before.digest  # type: ignore[operator]


@pytest.mark.parametrize("load", [uncached, cached], ids=["uncached", "cached"])
def test_a_grader_schema_file_does_not_change_the_digest(load: object) -> None:
    """Graders never change what a run does (as editing a grader in the spec does not)."""
    before = load(env="offline")  # type: ignore[operator]
    Path("grader.schema.json").write_text('{"type": "array"}\n', encoding="utf-8")
    assert load(env="offline").digest == before.digest  # type: ignore[operator]


def test_a_script_file_that_appears_changes_the_digest() -> None:
    Path("orders.script.yaml").unlink()
    missing = uncached(env="offline").digest
    assert cached(env="offline").digest == missing
    Path("orders.script.yaml").write_text(SCRIPT, encoding="utf-8")
    assert uncached(env="offline").digest != missing
    assert load_spec("harness.yaml", env="offline").digest != missing


def test_the_digest_is_the_same_cached_uncached_in_other_processes_and_elsewhere(
    tmp_path: Path,
) -> None:
    here = uncached(env="offline").digest
    assert cached(env="offline").digest == here
    probe = (
        "import sys\n"
        "from pytest_harness.spec.loader import load_spec\n"
        "print(load_spec(sys.argv[1], env='offline').digest)\n"
    )
    for switch in ("1", "0"):  # checked from the files; from the cache entry
        done = subprocess.run(
            [sys.executable, "-c", probe, "harness.yaml"],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
            env={**_environ(), spec_cache.DISABLE: switch},
        )
        assert done.stdout.strip() == here
    moved = tmp_path / "elsewhere" / "checkout"
    shutil.copytree(tmp_path, moved, ignore=shutil.ignore_patterns(".harness", "elsewhere"))
    assert load_spec(moved / "harness.yaml", env="offline").digest == here


def test_a_spec_that_names_no_file_keeps_the_digest_of_its_document() -> None:
    """Digests of specs without script or schema files are what they were before files counted."""
    text = SPEC.replace(
        "check: json_schema\n    schema: answer.schema.json", "check: regex\n    pattern: x"
    )
    Path("harness.yaml").write_text(text.replace("script: orders.script.yaml", "script: []"))
    spec = uncached(env="offline")
    assert spec.digest == _digest(spec.document, BaselineDocument())
    assert cached(env="offline").digest == spec.digest


def _environ() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "HARNESS_ENV"}
