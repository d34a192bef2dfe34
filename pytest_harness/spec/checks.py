"""The checks after the schema: cross-references, CEL expressions and online graders.

Every name that points at another part of the spec (a task's model, tools, rules and guards; a
model's fallbacks; a grader's tasks and judge) or at a plugin (model providers, stores, guard
checks, graders) must exist; ids must be unique; each CEL expression must compile and use only
the variables of its kind.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeVar

from pytest_harness.cel import CelProgram, CelSyntaxError, compile_expression
from pytest_harness.errors import did_you_mean
from pytest_harness.spec.spec import KeyPath
from pytest_harness.spec.where import BASELINE, Where, show

if TYPE_CHECKING:
    from pytest_harness.spec.baseline import BaselineDocument
    from pytest_harness.spec.schema import SpecDocument

__all__ = [
    "GUARD_VARIABLES",
    "RULE_VARIABLES",
    "check_graders",
    "check_references",
    "compile_conditions",
]

RULE_VARIABLES = frozenset({"tool", "args", "task", "principal", "step", "spent", "labels"})
"""The variables a rule's `when` may use."""
GUARD_VARIABLES = frozenset({"text", "on", "task", "tool", "args", "principal", "labels"})
"""The variables a `cel` guard's `when` may use."""

_COMPREHENSION = re.compile(
    r"\b(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_]\w*)\s*(?:,\s*([A-Za-z_]\w*)\s*)?,"
)


def check_references(document: SpecDocument, baseline: BaselineDocument, where: Where) -> None:
    """Check every name that points at another part of the spec or at a plugin."""
    from pytest_harness.plugins import registry

    doc = document
    providers = registry("harness_model_providers").names()
    for name, model in doc.models.items():
        if model.use not in providers:
            raise where.error(
                f"unknown model provider {model.use!r}{did_you_mean(model.use, providers)}",
                ("models", name, "use"),
            )
        for i, other in enumerate(model.fallback):
            if other == name:
                raise where.error(
                    f"model {name!r} cannot fall back to itself", ("models", name, "fallback", i)
                )
        _check_names("model", model.fallback, doc.models, ("models", name, "fallback"), where)
    stores = registry("harness_stores").names()
    if doc.state.use not in stores:
        hint = did_you_mean(doc.state.use, stores)
        raise where.error(f"unknown store {doc.state.use!r}{hint}", ("state", "use"))

    rules = _with_paths("rules", baseline.rules, doc.rules)
    guards = _with_paths("guards", baseline.guards, doc.guards)
    _check_unique("rule", [(p, r.id) for p, r in rules], where)
    _check_unique("guard", [(p, g.id) for p, g in guards], where)
    checks = registry("harness_guard_checks").names()
    for at, guard in guards:
        if ":" not in guard.check and guard.check not in checks:
            raise where.error(
                f"unknown guard check {guard.check!r}{did_you_mean(guard.check, checks)}; "
                "or name a callable as 'package.module:function'",
                (*at, "check"),
            )
    for i, guard in enumerate(doc.guards):  # a baseline serves many specs: its tools go unchecked
        _check_names("tool", guard.tools or (), doc.tools, ("guards", i, "tools"), where)

    rule_ids = {r.id for r in doc.rules}
    guard_ids = {g.id for g in doc.guards}
    baseline_rules = {r.id for r in baseline.rules}
    baseline_guards = {g.id for g in baseline.guards}
    for name, task in doc.tasks.items():
        at = ("tasks", name)
        if task.model not in doc.models:
            hint = did_you_mean(task.model, doc.models)
            if not doc.models:
                hint = ": this spec defines no models; add one under `models:`"
            raise where.error(f"unknown model {task.model!r}{hint}", (*at, "model"))
        _check_names("tool", task.tools, doc.tools, (*at, "tools"), where)
        _check_names("rule", task.rules or (), rule_ids, (*at, "rules"), where, baseline_rules)
        _check_names("guard", task.guards or (), guard_ids, (*at, "guards"), where, baseline_guards)


def _check_names(
    kind: str,
    names: Iterable[str],
    known: Iterable[str],
    at: KeyPath,
    where: Where,
    from_baseline: Iterable[str] = (),
) -> None:
    known, from_baseline = set(known), set(from_baseline)
    for i, name in enumerate(names):
        if name in known:
            continue
        if name in from_baseline:
            reason = (
                f"{kind} {name!r} comes from the baseline, which applies it to every task; "
                "leave it out of this list"
            )
        else:
            reason = f"unknown {kind} {name!r}{did_you_mean(name, known)}"
        raise where.error(reason, (*at, i))


def _check_unique(kind: str, items: list[tuple[KeyPath, str]], where: Where) -> None:
    first: dict[str, KeyPath] = {}
    for at, ident in items:
        if ident in first:
            file, line = where.locate((*first[ident], "id"))
            raise where.error(
                f"duplicate {kind} id {ident!r} (first at {file}:{line})", (*at, "id")
            )
        first[ident] = at


_T = TypeVar("_T")


def _with_paths(
    key: str, from_baseline: tuple[_T, ...], own: tuple[_T, ...]
) -> list[tuple[KeyPath, _T]]:
    """Pair the baseline's items, then the spec's, with their key paths."""
    return [((*BASELINE, key, i), item) for i, item in enumerate(from_baseline)] + [
        ((key, i), item) for i, item in enumerate(own)
    ]


def compile_conditions(
    document: SpecDocument, baseline: BaselineDocument, where: Where
) -> tuple[dict[str, CelProgram], dict[str, CelProgram]]:
    """Compile every rule's `when` and every `cel` guard's `when`, by id."""
    rules: dict[str, CelProgram] = {}
    for at, rule in _with_paths("rules", baseline.rules, document.rules):
        rules[rule.id] = _program(rule.when, RULE_VARIABLES, f"rule {rule.id}", at, where)
    guards: dict[str, CelProgram] = {}
    for at, guard in _with_paths("guards", baseline.guards, document.guards):
        if guard.check != "cel":
            continue
        if not guard.when or not guard.when.strip():
            raise where.error(
                "a cel guard needs `when`, a CEL expression over "
                + ", ".join(sorted(GUARD_VARIABLES)),
                at,
            )
        guards[guard.id] = _program(guard.when, GUARD_VARIABLES, f"guard {guard.id}", at, where)
    return rules, guards


def check_graders(document: SpecDocument, where: Where) -> dict[str, CelProgram]:
    """Check `evals.online.graders` (checks, judge models, tasks) and compile `cel` ones."""
    from pytest_harness.plugins import registry

    at: KeyPath = ("evals", "online", "graders")
    graders = document.evals.online.graders
    _check_unique("grader", [((*at, i), g.id) for i, g in enumerate(graders)], where)
    checks = sorted({"model", *registry("harness_graders").names()})
    programs: dict[str, CelProgram] = {}
    for i, grader in enumerate(graders):
        here = (*at, i)
        if grader.check not in checks:
            raise where.error(
                f"unknown grader check {grader.check!r}{did_you_mean(grader.check, checks)} "
                f"(checks: {', '.join(checks)})",
                (*here, "check"),
            )
        _check_names("task", grader.tasks or (), document.tasks, (*here, "tasks"), where)
        if grader.check == "model":
            if not grader.model:
                raise where.error("a model grader needs `model`, a model of `models:`", here)
            if grader.model not in document.models:
                hint = did_you_mean(grader.model, document.models)
                if not document.models:
                    hint = ": this spec defines no models; add the judge under `models:`"
                raise where.error(f"unknown judge model {grader.model!r}{hint}", (*here, "model"))
            if not grader.prompt or not grader.prompt.strip():
                raise where.error(
                    "a model grader needs `prompt`: what the judge scores, asking for a number "
                    "from 0 to 1",
                    here,
                )
        elif grader.check == "callable":
            if not grader.call or ":" not in grader.call:
                raise where.error(
                    f"a callable grader needs `call: module:function`, got {show(grader.call)}",
                    (*here, "call") if grader.call else here,
                )
        elif grader.check == "cel":
            if not grader.when or not grader.when.strip():
                raise where.error(
                    "a cel grader needs `when`, a CEL expression over "
                    + ", ".join(sorted(GUARD_VARIABLES)),
                    here,
                )
            programs[grader.id] = _program(
                grader.when, GUARD_VARIABLES, f"grader {grader.id}", here, where
            )
    return programs


def _program(
    source: str, allowed: frozenset[str], owner: str, at: KeyPath, where: Where
) -> CelProgram:
    when = (*at, "when")
    try:
        program = compile_expression(source)
    except CelSyntaxError as exc:
        position = ""
        if exc.column is not None and exc.line is not None and exc.line > 1:
            position = f" at line {exc.line}, column {exc.column}"
        elif exc.column is not None:
            position = f" at column {exc.column}"
        raise where.error(f"CEL syntax error{position}: {exc.message}", when) from None
    bound = {name for m in _COMPREHENSION.finditer(source) for name in m.groups() if name}
    unknown = sorted(program.variables - allowed - bound)
    if unknown:
        raise where.error(
            f"unknown variable {unknown[0]!r} in {owner}{did_you_mean(unknown[0], allowed)}", when
        )
    return program
