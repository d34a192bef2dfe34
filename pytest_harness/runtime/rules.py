"""Rules: CEL conditions on a proposed tool call, evaluated in order.

Every rule that matches is a trace decision; the first `deny` or `approve` decides the call.
A rule whose expression cannot be evaluated for this call (a missing key, a type mismatch)
counts as matching when its effect is `deny` or `approve` (fail closed) and as not matching
when it is `allow`; either way the decision records the error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_harness.cel import CelError, CelProgram
from pytest_harness.runtime.trace import Decision
from pytest_harness.spec.schema import Effect, RuleSpec

__all__ = ["RuleVerdict", "evaluate_rules"]


@dataclass(frozen=True, slots=True)
class RuleVerdict:
    """What the rules decided for one call, and the decisions that record it."""

    effect: Effect
    rule: RuleSpec | None
    decisions: tuple[Decision, ...]


def evaluate_rules(
    rules: Sequence[tuple[RuleSpec, CelProgram]],
    variables: Mapping[str, Any],
    *,
    step: int,
) -> RuleVerdict:
    """Evaluate `rules` on one call's variables (`tool`, `args`, `task`, `principal`, …)."""
    decisions: list[Decision] = []
    tool = variables["tool"]
    for rule, program in rules:
        error: str | None = None
        try:
            matched = program.evaluate(variables) is True
        except CelError as exc:
            error = str(exc)
            matched = rule.then is not Effect.ALLOW
        if not matched:
            continue
        detail: dict[str, Any] = {"effect": rule.then.value, "tool": tool}
        if error is not None:
            detail["error"] = error
        decisions.append(Decision(step, "rule", rule.id, detail))
        if rule.then is not Effect.ALLOW:
            return RuleVerdict(rule.then, rule, tuple(decisions))
    return RuleVerdict(Effect.ALLOW, None, tuple(decisions))
