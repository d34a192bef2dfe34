"""A worker compiles its spec's CEL before it polls: no workflow task compiles or loads it.

Workflow tasks run on threads of their own, several at once; a worker that takes runs over
replays them together. A spec read from the spec cache compiles each condition on first use,
which would otherwise be inside those tasks (see tests/test_cel_loading.py for what loading
the CEL extension from two threads at once did).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import pytest_harness as ph
import pytest_harness.cel as cel
from pytest_harness.temporal.worker import _Activities
from tests.temporal.helpers import make_spec


def test_hosting_a_spec_from_the_cache_compiles_its_rules_before_any_workflow_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HARNESS_NO_SPEC_CACHE", raising=False)  # this is the cache's path
    spec = make_spec(tmp_path, "127.0.0.1:7233")
    ph.load(spec)  # checks the files, writes the cache entry
    harness = ph.load(spec)  # a worker's load: from the entry, nothing compiled yet
    programs = harness.spec.rule_programs
    assert type(programs).__name__ == "LazyPrograms"
    _Activities(harness, ()).host()

    def no_compiling(source: str) -> cel.CelProgram:
        raise AssertionError(f"{source!r} compiled after the worker started polling")

    monkeypatch.setattr(cel, "compile_expression", no_compiling)
    plan = harness.plans.tasks["charges"]
    assert (
        plan.rule_programs["big-refund"].evaluate({"tool": "refund", "args": {"amount": 5}})
        is False
    )
