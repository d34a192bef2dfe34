"""The load-time check of the `args.<name>` a rule condition reads (DESIGN §3).

A condition that reads a parameter no tool it applies to has (`args.amout`) would fail closed
on every call, silently; here it is a `SpecError` at load, with a suggestion. The tools a rule
applies to are those its condition names (`tool == "refund"`), else every tool of the tasks
that use it. A key read only under `has(args.x)` or `"x" in args` is optional by design and
is not checked.

The tools a condition names are checked first: a name no tool of the spec has (`tool ==
"refnd"`) would never match, silently, and is a `SpecError` with a suggestion. Any tool the
spec declares counts, whichever tasks offer it (`pytest-harness mutate` takes a tool off a task
and must still load). A baseline's rules are exempt from this (an org baseline names tools not
every app has); their `args.` reads are still checked against the named tools this spec has.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_harness.cel import argument_reads
from pytest_harness.errors import did_you_mean
from pytest_harness.spec.schema import RuleSpec
from pytest_harness.spec.spec import KeyPath, Spec
from pytest_harness.tools.registry import ToolSet

__all__ = ["check_rule_arguments"]


def check_rule_arguments(spec: Spec, tools: ToolSet) -> None:
    """Raise `SpecError` for the first tool name or `args.<name>` a rule cannot apply to."""
    rules: list[tuple[KeyPath, RuleSpec, bool]] = [
        (("baseline", "rules", i), r, True) for i, r in enumerate(spec.baseline_rules)
    ]
    rules += [(("rules", i), r, False) for i, r in enumerate(spec.document.rules)]
    users: dict[str, list[str]] = {}
    for task in spec.document.tasks:
        for rule in spec.rules_for(task):
            for name in spec.document.tasks[task].tools:
                users.setdefault(rule.id, [])
                if name not in users[rule.id]:
                    users[rule.id].append(name)
    for at, rule, from_baseline in rules:
        reads = argument_reads(rule.when)
        when: KeyPath = (*at, "when")
        if not from_baseline:
            for name in reads.tools:
                if name not in tools:
                    hint = did_you_mean(name, tools.names())
                    raise spec.error(f"rule {rule.id!r}: unknown tool {name!r}{hint}", when)
        if not reads.names:
            continue
        named = [t for t in reads.tools if t in tools]
        candidates = named if reads.tools else users.get(rule.id, [])
        _check(spec, tools, when, reads.names, [t for t in candidates if t in tools])


def _check(
    spec: Spec, tools: ToolSet, when: KeyPath, names: Sequence[str], candidates: Sequence[str]
) -> None:
    if not candidates:
        return
    taken: dict[str, None] = {}
    for tool_name in candidates:
        tool = tools.get(tool_name)
        if tool is not None:
            taken.update(dict.fromkeys(tool.parameters))
    for name in names:
        if name in taken:
            continue
        hint = did_you_mean(name, taken) if taken else " (it takes no arguments)"
        if len(candidates) == 1:
            what = f"no tool {candidates[0]!r} parameter {name!r}"
        else:
            shown = ", ".join(repr(t) for t in candidates)
            what = f"no parameter {name!r} in tools {shown}"
        raise spec.error(f"args.{name}: {what}{hint}", when)
