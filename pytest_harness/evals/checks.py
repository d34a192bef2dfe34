"""Grader checks: what a grader computes from an ended run, and the built-in ones.

A check is built once per grader when the harness loads (bad parameters are `SpecError`s at the
grader's line) and called with a `GradeInput`. It returns a bool (pass or fail), a score 0..1
or a `Verdict` (a score with a detail), or an awaitable of one.

The guard checks (`regex`, `contains`, `max_length`, `json_schema`, `cel`) are the guard
implementations of `runtime/guards.py`, built through the `harness_guard_checks` registry and
read the other way round: a guard *fires* on what it forbids, a grader *passes* on what it
wants. `regex`, `contains` and `cel` pass when their guard would fire (the pattern is found,
the expression is true); `max_length` and `json_schema` pass when it would not (the text is
short enough, the JSON is valid). A `cel` expression that fails at run time is an error.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

from pytest_harness.errors import SpecError
from pytest_harness.hookspecs import GuardCheckFactory
from pytest_harness.runtime.guards import GuardChecker, GuardContext
from pytest_harness.runtime.results import RunResult
from pytest_harness.spec.schema import GraderSpec, GuardAction, GuardSpec, GuardTarget
from pytest_harness.spec.spec import KeyPath, Spec

__all__ = [
    "GradeInput",
    "GraderCheck",
    "GraderError",
    "Verdict",
    "VerdictValue",
    "build_check",
]


class GraderError(Exception):
    """A grader could not grade: its message is stored as the sample's `error`."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """A score 0..1 and what it is based on."""

    score: float
    detail: str = ""


VerdictValue = bool | float | int | Verdict
"""What a check returns: pass/fail, a score 0..1, or a `Verdict`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GradeInput:
    """What a grader sees: the run's result, its input and principal, and the text it checks.

    `text` is the output (`on: output`; empty when the run has none) or the trace rendered
    one decision a line (`on: trace`).
    """

    result: RunResult
    input: str
    text: str
    principal: Mapping[str, Any] = field(default_factory=dict)


GraderCheck = Callable[[GradeInput], VerdictValue | Awaitable[VerdictValue]]
"""A built grader check."""

_PASS_ON_HIT = {
    "regex": True,
    "contains": True,
    "cel": True,
    "max_length": False,
    "json_schema": False,
}
"""Whether a grader passes when the guard check of the same name fires."""

_SHOWN = {
    "regex": "no match for {pattern!r}",
    "contains": "does not contain {text!r}",
    "cel": "{when} is false",
}


def build_check(check: str, grader: GraderSpec, spec: Spec, where: KeyPath) -> GraderCheck:
    """Build the built-in check `check` (a guard check, or `callable`) for `grader`."""
    if check == "callable":
        return _callable(grader, spec, where)
    return _guard_check(check, grader, spec, where)


def _guard_check(check: str, grader: GraderSpec, spec: Spec, where: KeyPath) -> GraderCheck:
    from pytest_harness.plugins import registry

    guard = GuardSpec(  # the grader's fields were validated with it: they fit a guard's
        id=grader.id,
        on=GuardTarget.OUTPUT,
        check=check,
        action=GuardAction.WARN,
        pattern=grader.pattern,
        text=grader.text,
        ignore_case=grader.ignore_case,
        max=grader.max,
        schema_=grader.schema_,
        when=grader.when,
    )
    if check == "cel":  # the guard check reads its compiled expression by id
        programs = {grader.id: spec.grader_programs[grader.id]}
        spec = replace(spec, guard_programs=programs)
    factory = cast(GuardCheckFactory, registry("harness_guard_checks").get(check))
    try:
        checker: GuardChecker = factory(guard, spec, where)
    except SpecError as exc:  # the guard's words, for a grader
        reason = exc.reason.replace(f"a {check} guard", f"a {check} grader")
        raise SpecError(reason, file=exc.file, line=exc.line, key=exc.key) from None
    pass_on_hit = _PASS_ON_HIT[check]
    shown = _SHOWN.get(check, "").format(pattern=grader.pattern, text=grader.text, when=grader.when)

    def grade(subject: GradeInput) -> Verdict:
        result = subject.result
        context = GuardContext(
            on=grader.on.value,
            task=result.task,
            principal=subject.principal,
            labels=result.labels,
        )
        hit = checker(subject.text, context)
        if hit is not None and hit.error:
            raise GraderError(hit.reason.removeprefix("error: "))
        passed = (hit is not None) == pass_on_hit
        detail = hit.reason if hit is not None else shown
        return Verdict(1.0 if passed else 0.0, detail)

    return grade


def _callable(grader: GraderSpec, spec: Spec, where: KeyPath) -> GraderCheck:
    """`call: module:function`, called with the run's `RunResult` (in a thread when sync)."""
    from pytest_harness.importing import import_callable
    from pytest_harness.threads import in_thread

    fn = import_callable(str(grader.call), spec=spec, where=(*where, "call"))

    async def grade(subject: GradeInput) -> VerdictValue:
        if inspect.iscoroutinefunction(fn):
            answer = await fn(subject.result)
        else:
            answer = await in_thread(fn, subject.result)
            if inspect.isawaitable(answer):
                answer = await answer
        if isinstance(answer, bool | int | float | Verdict):
            return answer
        raise GraderError(
            f"{grader.call} returned {type(answer).__name__} {answer!r:.60}; return a bool or a "
            "float from 0 to 1"
        )

    return grade
