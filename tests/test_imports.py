"""Importing the package is cheap: what `import pytest_harness` and the `ph.load` path load.

No timing here (timings are `benchmarks/run.py`'s job): each test imports in a fresh process and
lists the modules that import left behind, so a new eager import of a heavy dependency fails
a test that names it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_harness as ph

HEAVY = frozenset(
    {
        "aiosqlite",
        "asyncio",
        "cel",
        "deepdiff",
        "docstring_parser",
        "httpx",
        "jinja2",
        "jsonschema",
        "psycopg",
        "pydantic",
        "pydantic_core",
        "rich",
        "tenacity",
        "temporalio",
        "yaml",
    }
)
"""Dependencies (and asyncio, ≈15 ms alone) that `import pytest_harness` must not import."""


def loaded_after(code: str) -> tuple[list[str], list[str]]:
    """Run `code` in a fresh interpreter: the heavy top-level modules and our modules it loaded."""
    probe = (
        f"{code}\nimport json, sys\n"
        "print(json.dumps([sorted({m.split('.')[0] for m in sys.modules}), "
        "sorted(m for m in sys.modules if m.split('.')[0] == 'pytest_harness')]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    tops, ours = json.loads(done.stdout)
    return sorted(HEAVY.intersection(tops)), ours


def test_import_pytest_harness_imports_only_the_package() -> None:
    heavy, ours = loaded_after("import pytest_harness")
    assert heavy == []
    assert ours == ["pytest_harness"]


def test_the_load_path_imports_no_yaml_store_driver_or_renderer() -> None:
    """`ph.load` imports the run loop (asyncio), nothing more: the spec's classes are dataclasses
    and pydantic comes with the spec's validation, which a cached spec skips."""
    heavy, ours = loaded_after("import pytest_harness as ph; ph.load")
    assert heavy == ["asyncio"]
    assert "pytest_harness.runtime.harness" in ours
    unwanted = (
        "spec.baseline",
        "spec.checks",
        "spec.loader",
        "spec.where",
        "spec.validation",
        "spec.yamlio",
        "store.sqlite",
        "store.memory",
        "tools.registry",
    )
    assert [m for m in ours if m.removeprefix("pytest_harness.") in unwanted] == []


def test_the_load_path_imports_no_pluggy_hookspecs_or_redaction() -> None:
    """pluggy and the hook specs come with the plugin manager (a harness's first store or
    model), redaction and the request digests with a recorded run's first model call (#13)."""
    _, ours = loaded_after(
        "import sys\nimport pytest_harness as ph\nph.load\n"
        "assert 'pluggy' not in sys.modules, 'the load path imported pluggy'"
    )
    deferred = ("hookspecs", "redaction", "runtime.request_digests", "builtins")
    assert [m for m in ours if m.removeprefix("pytest_harness.") in deferred] == []


def test_the_load_path_imports_no_run_loop_guard_or_cel() -> None:
    """The run loop comes with a harness's first drive, the guards with a spec's first guard,
    CEL with the first rule compiled: loading a harness, or reading its results, needs none
    of them (#13)."""
    _, ours = loaded_after("import pytest_harness as ph; ph.load")
    deferred = (
        "cel",
        "runtime.approvals",
        "runtime.driver_base",
        "runtime.engine",
        "runtime.guards",
        "runtime.model_calls",
        "runtime.rules",
        "runtime.tool_calls",
    )
    assert [m for m in ours if m.removeprefix("pytest_harness.") in deferred] == []


def test_loading_a_spec_with_a_live_model_imports_no_httpx(tmp_path: Path) -> None:
    """A live provider is built (and its settings checked) at load; httpx waits for its first
    request, and CEL for the first call a rule decides (#13)."""
    spec = tmp_path / "harness.yaml"
    spec.write_text(
        "version: 1\nname: t\nmodels:\n  default: {use: openai, model: gpt-test}\n"
        "tools:\n  add: {call: 'textwrap:dedent'}\n"
        "rules:\n  - {id: R1, when: 'tool == \"add\"', then: approve}\n"
        "tasks:\n  t: {prompt: p, tools: [add]}\n"
    )
    code = (
        f"import pytest_harness as ph\nharness = ph.load({str(spec)!r})\n"
        "assert type(harness.plans.provider('default')).__name__ == 'OpenAIProvider'"
    )
    first, _ = loaded_after(code)  # checks the spec and writes the spec cache
    again, ours = loaded_after(code)  # a fresh process that finds the cached spec
    assert "httpx" not in first
    assert "httpx" not in again
    assert "cel" not in again  # a cached rule's condition is compiled when first evaluated
    assert "pytest_harness.models.openai" in ours


def test_a_public_name_imports_what_it_needs_only() -> None:
    heavy, ours = loaded_after("from pytest_harness import HarnessError, RunResult")
    assert heavy == []
    assert "pytest_harness.runtime.harness" not in ours


@pytest.mark.parametrize("name", ph.__all__)
def test_every_public_name_resolves(name: str) -> None:
    assert getattr(ph, name) is not None
    assert name in dir(ph)


def test_public_names_are_the_defining_modules_objects() -> None:
    from pytest_harness.errors import HarnessError
    from pytest_harness.loading import load
    from pytest_harness.runtime.results import RunResult

    assert (ph.HarnessError, ph.RunResult, ph.load) == (HarnessError, RunResult, load)
    assert ph.testing.__name__ == "pytest_harness.testing"


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="'nothing_here'"):
        _ = ph.nothing_here


def test_the_tools_and_the_scripted_model_import_no_pydantic() -> None:
    """Plain tools and plain script turns need no pydantic (`tools/plain.py`,
    `models/script_turns.py`): importing what builds them must not import it either (#13)."""
    heavy, _ = loaded_after(
        "import pytest_harness.tools.registry, pytest_harness.models.scripted, "
        "pytest_harness.tools.outcome"
    )
    assert heavy == ["asyncio"]


def test_the_principal_is_still_importable_from_the_run_loop() -> None:
    """`Principal` moved below the tools (`pytest_harness.principal`); its old module keeps
    the names for code that imported them from there."""
    from pytest_harness import principal
    from pytest_harness.runtime.principal import Principal, as_principal

    assert Principal is principal.Principal is ph.Principal
    assert as_principal is principal.as_principal
