"""The pluggy hook specs through which packages add providers, stores, checks and report formats.

A plugin is a module or object with `@hookimpl` functions, advertised under the
`pytest_harness` entry-point group; the built-ins (`pytest_harness.builtins`) register the same
way. Each collecting hook returns a mapping of names to factories; the manager merges them and
refuses two plugins claiming one name. `harness_checkpoint` is told of every committed boundary
of a run (`pytest_harness.plugins.notify_checkpoint` calls it). `harness_redaction_patterns`
returns secret shapes, which are all applied.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from pytest_harness.evals.checks import GraderCheck
    from pytest_harness.models.base import ModelProvider
    from pytest_harness.redaction import SecretPattern
    from pytest_harness.runtime.guards import GuardChecker
    from pytest_harness.spec.schema import GraderSpec, GuardSpec, ModelSpec, StateSpec
    from pytest_harness.spec.spec import KeyPath, Spec
    from pytest_harness.store.base import Store

__all__ = [
    "GraderFactory",
    "GuardCheckFactory",
    "ProviderConfig",
    "ProviderFactory",
    "ReportRenderer",
    "StoreFactory",
    "hookimpl",
    "hookspec",
]

PROJECT = "pytest_harness"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderConfig:
    """What a provider factory is given: the model's name and settings, and the spec."""

    name: str
    model: ModelSpec
    spec: Spec
    key_path: KeyPath


ProviderFactory = Callable[[ProviderConfig], "ModelProvider"]
StoreFactory = Callable[["StateSpec", "Spec"], "Store"]
GuardCheckFactory = Callable[["GuardSpec", "Spec", "KeyPath"], "GuardChecker"]
GraderFactory = Callable[["GraderSpec", "Spec", "KeyPath"], "GraderCheck"]
ReportRenderer = Callable[[Mapping[str, Any]], "str | bytes"]


@hookspec
def harness_model_providers() -> Mapping[str, ProviderFactory]:  # type: ignore[empty-body]
    """Model providers by the name a spec's `use:` gives (`scripted`, `openai`, …)."""


@hookspec
def harness_stores() -> Mapping[str, StoreFactory]:  # type: ignore[empty-body]
    """Stores by the name `state.use:` gives (`memory`, `sqlite`, …)."""


@hookspec
def harness_guard_checks() -> Mapping[str, GuardCheckFactory]:  # type: ignore[empty-body]
    """Guard checks by the name a guard's `check:` gives (`regex`, `contains`, …)."""


@hookspec
def harness_graders() -> Mapping[str, GraderFactory]:  # type: ignore[empty-body]
    """Online eval grader checks by the name a grader's `check:` gives (`regex`, …).

    A factory is called once per grader when the harness loads, with the grader's spec, the
    spec and the grader's key path (for `SpecError`s), and returns the check: a function of a
    `pytest_harness.evals.GradeInput` returning a bool, a score 0..1 or a `Verdict` (or an
    awaitable of one). `model` (the LLM judge) is built in and cannot be replaced.
    """


@hookspec
def harness_report_renderers() -> Mapping[str, ReportRenderer]:  # type: ignore[empty-body]
    """Replay report renderers by the file suffix `--replay-report PATH` picks them with.

    Keys are lower-case suffixes with their dot (`.html`, `.json`, `.md` are built in); a
    renderer is called with the report document (the `.json` report's content: `format`,
    `fail_on`, `summary`, `recordings`, each with its `ReplayReport.to_dict()` under `report`)
    and returns the file's text (`str`, written as UTF-8) or `bytes`.
    """


@hookspec
def harness_checkpoint(session_id: str, run_id: str, status: str, phase: str) -> None:
    """A run committed a boundary: called after the write, never before it.

    `status` is the run's status as committed (`running`, `awaiting_approval`, `completed`, …)
    and `phase` names the boundary (`run.started`, `tool.dispatched`, `run.ended`, …; see
    `pytest_harness.runtime.boundaries`). Use it to export metrics or tell a UI. It is called
    in the driving worker's event loop, so keep it quick (hand slow work to a queue or a
    thread). A hook that raises is logged (logger `pytest_harness.plugins`) and changes nothing:
    the run goes on, and the other plugins' hooks are still called.
    """


@hookspec
def harness_redaction_patterns() -> Sequence[SecretPattern | str | re.Pattern[str]]:  # type: ignore[empty-body]
    """Secret shapes to redact in free text, besides the built-in ones (DESIGN §6).

    Each is a `pytest_harness.SecretPattern(name, pattern)` or a regular expression; a group
    named `secret` marks the part to replace (the rest of the match is kept as its label),
    else the whole match is replaced. They apply to everything that leaves the store: golden
    files, exports, reports and CLI output.
    """
