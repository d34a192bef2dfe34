"""Rules: CEL conditions on a proposed tool call, combined as in Cedar and IAM (DESIGN §3).

Every rule that applies is evaluated for every call, and every match is a `rule` trace
decision, in spec order, even when another rule decides the call. Any matching `deny` denies
the call (the model is told the first deny's message); otherwise every matching `approve` rule
needs its own approval; `allow` never overrides either. A condition that fails at run time (a
missing key, a type mismatch) fails closed: the rule counts as matched, its effect applies, and
its decision carries `error: <CEL message>`. A condition whose value is not a bool
(`labels.flagged` on a string label, `size(args)`) is such an error too (`condition returned
string, not a bool`): a rule that silently never matched is what failing closed prevents.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pytest_harness.cel import CelError, CelProgram
from pytest_harness.runtime.trace import Decision
from pytest_harness.spec.schema import Effect, RuleSpec

__all__ = ["RuleVerdict", "cel_type_name", "evaluate_rules"]

_CEL_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "bool"),
    (str, "string"),
    (int, "int"),
    (float, "double"),
    (bytes, "bytes"),
    (list, "list"),
    (dict, "map"),
    (type(None), "null"),
    (datetime, "timestamp"),
    (timedelta, "duration"),
)


@dataclass(slots=True, unsafe_hash=True)  # not frozen: built per run, never changed
class RuleVerdict:
    """What the rules decided for one call, and the decisions that record it.

    `effect` is `deny` when any deny matched, else `approve` when any approve matched, else
    `allow`. `rule` is the deciding rule: the first matching deny, else the first matching
    approve. `approvals` holds every matching approve rule (one approval request each) when
    the effect is `approve`.
    """

    effect: Effect
    rule: RuleSpec | None
    decisions: tuple[Decision, ...]
    approvals: tuple[RuleSpec, ...] = ()


def evaluate_rules(
    rules: Sequence[RuleSpec],
    programs: Mapping[str, CelProgram],
    variables: Mapping[str, Any],
    *,
    step: int,
) -> RuleVerdict:
    """Evaluate every rule on one call's variables (`tool`, `args`, `task`, `principal`, …).

    `programs` holds each rule's compiled condition by id (`Spec.rule_programs`).
    """
    decisions: list[Decision] = []
    denies: list[RuleSpec] = []
    approves: list[RuleSpec] = []
    tool = variables["tool"]
    for rule in rules:
        error: str | None = None
        try:
            value = programs[rule.id].evaluate(variables)
        except CelError as exc:
            error = exc.message
            matched = True  # fail closed: the rule's effect applies
        else:
            if type(value) is bool:
                matched = value
            else:  # an evaluation error like any other: fail closed
                error = f"condition returned {cel_type_name(value)}, not a bool"
                matched = True
        if not matched:
            continue
        detail: dict[str, Any] = {"effect": rule.then.value, "tool": tool}
        if rule.then is Effect.APPROVE:
            # who may answer is part of the decision: a rule that stops asking finance is drift
            detail["approvers"] = sorted(rule.approvers)
            if rule.self_approve:
                detail["self_approve"] = True
        if error is not None:
            detail["error"] = error
        decisions.append(Decision(step, "rule", rule.id, detail))
        if rule.then is Effect.DENY:
            denies.append(rule)
        elif rule.then is Effect.APPROVE:
            approves.append(rule)
    if denies:
        return RuleVerdict(Effect.DENY, denies[0], tuple(decisions))
    if approves:
        return RuleVerdict(Effect.APPROVE, approves[0], tuple(decisions), tuple(approves))
    return RuleVerdict(Effect.ALLOW, None, tuple(decisions))


def cel_type_name(value: object) -> str:
    """The CEL name of the type of `value` as the binding returns it (`string`, `map`, …)."""
    for python_type, name in _CEL_TYPES:
        if isinstance(value, python_type):
            return name
    return type(value).__name__
