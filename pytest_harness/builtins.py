"""The built-in providers, stores, guard and grader checks, registered as a plugin like any other.

Each factory imports its implementation when first used, so loading the plugin is cheap.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pytest_harness.hookspecs import (
    GraderFactory,
    GuardCheckFactory,
    ProviderConfig,
    ProviderFactory,
    ReportRenderer,
    StoreFactory,
    hookimpl,
)

if TYPE_CHECKING:
    from pytest_harness.evals.checks import GraderCheck
    from pytest_harness.models.base import ModelProvider
    from pytest_harness.runtime.guards import GuardChecker
    from pytest_harness.spec.schema import GraderSpec, GuardSpec, StateSpec
    from pytest_harness.spec.spec import KeyPath, Spec
    from pytest_harness.store.base import Store


def _scripted(config: ProviderConfig) -> ModelProvider:
    from pytest_harness.models.scripted import ScriptedProvider

    return ScriptedProvider.from_config(config)


def _function(config: ProviderConfig) -> ModelProvider:
    from pytest_harness.models.function import FunctionProvider

    return FunctionProvider.from_config(config)


def _openai(config: ProviderConfig) -> ModelProvider:
    from pytest_harness.models.openai import OpenAIProvider

    return OpenAIProvider.from_config(config)


def _anthropic(config: ProviderConfig) -> ModelProvider:
    from pytest_harness.models.anthropic import AnthropicProvider

    return AnthropicProvider.from_config(config)


def _memory(state: StateSpec, spec: Spec) -> Store:
    from pytest_harness.store.memory import MemoryStore

    return MemoryStore()


def _sqlite(state: StateSpec, spec: Spec) -> Store:
    from pytest_harness.store.sqlite import SQLiteStore

    return SQLiteStore(
        spec.resolve(state.path),
        synchronous=state.synchronous,
        busy_timeout=state.busy_timeout,
    )


def _guard(check: str) -> GuardCheckFactory:
    def factory(guard: GuardSpec, spec: Spec, where: KeyPath) -> GuardChecker:
        from pytest_harness.runtime.guards import build_checker

        return build_checker(check, guard, spec, where)

    return factory


@hookimpl
def harness_model_providers() -> Mapping[str, ProviderFactory]:
    """`scripted` and `function`, and the live `openai` and `anthropic`."""
    return {
        "scripted": _scripted,
        "function": _function,
        "openai": _openai,
        "anthropic": _anthropic,
    }


@hookimpl
def harness_stores() -> Mapping[str, StoreFactory]:
    """`memory` and `sqlite`."""
    return {"memory": _memory, "sqlite": _sqlite}


@hookimpl
def harness_guard_checks() -> Mapping[str, GuardCheckFactory]:
    """`regex`, `contains`, `max_length`, `json_schema` and `cel`."""
    return {
        name: _guard(name) for name in ("regex", "contains", "max_length", "json_schema", "cel")
    }


def _grader(check: str) -> GraderFactory:
    def factory(grader: GraderSpec, spec: Spec, where: KeyPath) -> GraderCheck:
        from pytest_harness.evals.checks import build_check

        return build_check(check, grader, spec, where)

    return factory


@hookimpl
def harness_graders() -> Mapping[str, GraderFactory]:
    """The guard checks as graders, and `callable` (the `model` judge is built into the evals)."""
    names = ("regex", "contains", "max_length", "json_schema", "cel", "callable")
    return {name: _grader(name) for name in names}


def _html(document: Mapping[str, Any]) -> str:
    from pytest_harness.reports.html import render_html

    return render_html(document)


def _markdown(document: Mapping[str, Any]) -> str:
    from pytest_harness.reports.markdown import render_markdown

    return render_markdown(document)


def _json(document: Mapping[str, Any]) -> str:
    from pytest_harness.reports import render_json

    return render_json(document)


@hookimpl
def harness_report_renderers() -> Mapping[str, ReportRenderer]:
    """`.json` (the document), `.html` (a self-contained page), `.md` (a CI job summary)."""
    return {".json": _json, ".html": _html, ".md": _markdown}
