"""Everything a task needs at run time, built once when the harness loads.

Building a plan imports the tools, builds the model providers (reading their scripts) and the
guard checks, so a mistake in any of them is a `SpecError` at load, not in the middle of a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from pytest_harness.models.base import ModelProvider, ToolSchema
from pytest_harness.models.live import check_live
from pytest_harness.plugins import registry
from pytest_harness.spec.schema import Budget, GuardSpec, ModelSpec, RuleSpec, TaskSpec
from pytest_harness.spec.spec import KeyPath, Spec

if TYPE_CHECKING:
    from pytest_harness.cel import CelProgram
    from pytest_harness.hookspecs import GuardCheckFactory, ProviderFactory
    from pytest_harness.runtime.guard_memory import GuardMemory
    from pytest_harness.runtime.guards import GuardChecker
    from pytest_harness.spec.schema import ToolSpec
    from pytest_harness.tools.context import ToolContext
    from pytest_harness.tools.registry import ToolOutcome, ToolSet

__all__ = ["ModelLink", "PlanTool", "Plans", "TaskPlan"]


class PlanTool(Protocol):
    """What the run loop needs of a tool: its spec (for the replay policy) and `invoke`."""

    name: str
    spec: ToolSpec

    async def invoke(
        self,
        args: Mapping[str, Any],
        context: ToolContext,
        *,
        overall_timeout: float | None = None,
    ) -> ToolOutcome:
        """Run the tool; problems come back as the outcome, never raised."""
        ...


@dataclass(frozen=True, slots=True)
class ModelLink:
    """One model of a task's chain: the task's model, then its fallbacks."""

    name: str
    spec: ModelSpec
    provider: ModelProvider


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskPlan:
    """A task ready to run."""

    name: str
    spec: TaskSpec
    models: tuple[ModelLink, ...]
    tools: Mapping[str, PlanTool]
    schemas: tuple[ToolSchema, ...]
    rules: tuple[RuleSpec, ...]
    rule_programs: Mapping[str, CelProgram]
    """The compiled conditions by rule id (`Spec.rule_programs`): from the spec cache, each is
    compiled when a call first needs it, so a run that proposes no call compiles none."""
    guards: tuple[tuple[GuardSpec, GuardChecker], ...]
    declared: Mapping[str, Mapping[str, Any]]
    """The declaration of each model of `models` a recording keeps (`runtime.declared`)."""
    guard_memory: GuardMemory | None = None
    """A replay's: the recorded guard decisions on text that golden files hide, which its
    guards take when shown the same text (`runtime.guard_memory`). None in a run."""
    watched: frozenset[str] = field(init=False)
    """What the guards watch (`input`, `output`, `tool_result`): text nothing watches goes by
    without a `GuardContext` being built."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "watched", frozenset(g.on.value for g, _ in self.guards))

    @property
    def budget(self) -> Budget:
        """The task's budget."""
        return self.spec.budget

    def check_live(self) -> None:
        """Raise `LiveModelBlocked` when the task's first model may not be called now."""
        first = self.models[0]
        check_live(first.provider, first.name)


class Plans:
    """The plans of every task of a spec, and the providers they share."""

    def __init__(self, spec: Spec, tools: ToolSet) -> None:
        from pytest_harness.runtime.rule_args import check_rule_arguments

        check_rule_arguments(spec, tools)
        self.spec = spec
        self.tools = tools
        self._providers: dict[str, ModelProvider] = {}
        self._checkers = {g.id: self._checker(g, w) for g, w in _guards_with_paths(spec)}
        self.tasks = {name: self._plan(name) for name in spec.document.tasks}

    def provider(self, name: str) -> ModelProvider:
        """The provider of model `name` (built once)."""
        if name not in self._providers:
            model = self.spec.document.models[name]
            factory = cast("ProviderFactory", registry("harness_model_providers").get(model.use))
            from pytest_harness.hookspecs import ProviderConfig

            where: KeyPath = ("models", name)
            config = ProviderConfig(name=name, model=model, spec=self.spec, key_path=where)
            self._providers[name] = factory(config)
        return self._providers[name]

    def replace_provider(self, name: str, provider: ModelProvider) -> None:
        """Answer model `name` with `provider` from now on (tests script models this way)."""
        self._providers[name] = provider
        self.tasks = {task: self._plan(task) for task in self.spec.document.tasks}

    def _chain(self, first: str) -> tuple[ModelLink, ...]:
        names = [first]
        for name in names:  # fallbacks of fallbacks, each once
            for fallback in self.spec.document.models[name].fallback:
                if fallback not in names:
                    names.append(fallback)
        models = self.spec.document.models
        return tuple(ModelLink(n, models[n], self.provider(n)) for n in names)

    def _checker(self, guard: GuardSpec, where: KeyPath) -> GuardChecker:
        if ":" in guard.check:
            from pytest_harness.runtime.guards import build_callable_checker

            return build_callable_checker(guard, self.spec, where)
        factory = registry("harness_guard_checks").get(guard.check)
        if factory is None:
            from pytest_harness.errors import did_you_mean

            known = registry("harness_guard_checks").names()
            raise self.spec.error(
                f"unknown guard check {guard.check!r}{did_you_mean(guard.check, known)}; "
                "or name a function as 'pkg.module:function'",
                (*where, "check"),
            )
        return cast("GuardCheckFactory", factory)(guard, self.spec, where)

    def _plan(self, name: str) -> TaskPlan:
        task = self.spec.task(name)
        tools: dict[str, PlanTool] = {}
        for tool_name in task.tools:
            tool = self.tools.get(tool_name)
            if tool is not None:
                tools[tool_name] = tool
        from pytest_harness.runtime.declared import model_declarations

        models = self._chain(task.model)
        return TaskPlan(
            name=name,
            spec=task,
            models=models,
            declared=model_declarations(self.spec, models),
            tools=tools,
            schemas=self.tools.schemas(task.tools),
            rules=self.spec.rules_for(name),
            rule_programs=self.spec.rule_programs,
            guards=tuple((g, self._checkers[g.id]) for g in self.spec.guards_for(name)),
        )


def _guards_with_paths(spec: Spec) -> list[tuple[GuardSpec, KeyPath]]:
    out: list[tuple[GuardSpec, KeyPath]] = [
        (g, ("baseline", "guards", i)) for i, g in enumerate(spec.baseline_guards)
    ]
    out += [(g, ("guards", i)) for i, g in enumerate(spec.document.guards)]
    return out
