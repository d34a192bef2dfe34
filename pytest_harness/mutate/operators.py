"""The mutants of a spec: single-point changes to its policy, described as data.

Each `Mutant` is one change to the spec's document (key paths set to new values), applied to the
data after the environment overlay and the org baseline and before every load-time check, so a
mutant that does not load is reported as such. The operators (DESIGN §16):

- remove a rule; flip its effect (`deny` and `approve` become `allow`, `allow` becomes `deny`);
- move a numeric threshold in a rule's condition (`args.amount > 100`) across the nearest value
  the recordings passed for that argument, up and down;
- remove a guard; weaken its action (`block` and `redact` become `warn`);
- remove a tool from a task;
- lower a budget below the most any recording of the task used, and a model's
  `retry_budget` below the most any recording waited on it;
- remove an approver role from an `approve` rule.

The org baseline's rules and guards are not mutated: they belong to another file.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_harness.recording.model import Recording
    from pytest_harness.spec.schema import GuardSpec, RuleSpec, SpecDocument
    from pytest_harness.spec.spec import KeyPath

__all__ = ["Mutant", "make_mutants"]

_NUMBER = r"-?\d+(?:\.\d+)?"
_OP = r"<=|>=|<|>"
_ARG_FIRST = re.compile(rf"\bargs\.(?P<arg>[A-Za-z_]\w*)\s*(?P<op>{_OP})\s*(?P<num>{_NUMBER})")
_NUM_FIRST = re.compile(rf"(?P<num>{_NUMBER})\s*(?P<op>{_OP})\s*args\.(?P<arg>[A-Za-z_]\w*)\b")
_TOOL_NAMED = re.compile(r"\btool\s*==\s*[\"']([^\"']+)[\"']")
_WEAKER = {"block": "warn", "redact": "warn"}
_FLIPPED = {"deny": "allow", "approve": "allow", "allow": "deny"}
_BUDGETS = ("steps", "tokens", "usd", "tool_calls")


@dataclass(frozen=True, slots=True, kw_only=True)
class Mutant:
    """One single-point change to a spec.

    `id` is stable across runs (`rule:big-refund:remove`); `target` names the part of the policy
    changed (`rule big-refund`); `change` says what was done to it, phrased to complete
    "`<target>`: `<change>` changes no recording" when the mutant survives; `changes` sets key
    paths of the spec's data to new values.
    """

    id: str
    target: str
    description: str
    change: str
    changes: tuple[tuple[KeyPath, Any], ...]

    @property
    def unprotected(self) -> str:
        """What a survivor leaves unprotected: `rule R2: removing it changes no recording`."""
        return f"{self.target}: {self.change} changes no recording"

    def apply(self, data: dict[str, Any]) -> None:
        """Set this mutant's key paths in the spec's data (as `load_spec(edit=...)` calls it)."""
        for path, value in self.changes:
            node: Any = data
            for part in path[:-1]:
                node = node[part]
            node[path[-1]] = value


def make_mutants(document: SpecDocument, recordings: Sequence[Recording]) -> list[Mutant]:
    """Every mutant of `document` the operators make, given what `recordings` saw."""
    rules = [_dump(r) for r in document.rules]
    guards = [_dump(g) for g in document.guards]
    out: list[Mutant] = []
    for i, rule in enumerate(document.rules):
        out += _rule_mutants(document, rules, i, rule, recordings)
    for i, guard in enumerate(document.guards):
        out += _guard_mutants(document, guards, i, guard)
    for name, task in document.tasks.items():
        for tool in task.tools:
            kept = [t for t in task.tools if t != tool]
            out.append(
                Mutant(
                    id=f"task:{name}:tool:{tool}:remove",
                    target=f"task {name}",
                    description=f"remove tool {tool} from task {name}",
                    change=f"removing tool {tool} from it",
                    changes=((("tasks", name, "tools"), kept),),
                )
            )
        out += _budget_mutants(name, dataclasses.asdict(task.budget), recordings)
    out += _retry_budget_mutants(document, recordings)
    return out


# -- rules --------------------------------------------------------------------------------------


def _rule_mutants(
    document: SpecDocument,
    rules: list[dict[str, Any]],
    i: int,
    rule: RuleSpec,
    recordings: Sequence[Recording],
) -> Iterator[Mutant]:
    rid, effect = rule.id, rule.then.value
    without = rules[:i] + rules[i + 1 :]
    changes: list[tuple[KeyPath, Any]] = [(("rules",), without)]
    for name, task in document.tasks.items():
        if task.rules is not None and rid in task.rules:
            changes.append((("tasks", name, "rules"), [r for r in task.rules if r != rid]))
    yield Mutant(
        id=f"rule:{rid}:remove",
        target=f"rule {rid}",
        description=f"remove rule {rid}",
        change="removing it",
        changes=tuple(changes),
    )
    flipped = _FLIPPED[effect]
    data = {k: v for k, v in rules[i].items() if k not in ("approvers", "self_approve")}
    yield _set_rule(
        rules,
        i,
        {**data, "then": flipped},
        id=f"rule:{rid}:effect:{flipped}",
        target=f"rule {rid}",
        description=f"flip the effect of rule {rid} from {effect} to {flipped}",
        change=f"turning its effect from {effect} into {flipped}",
    )
    if effect == "approve":
        for role in rule.approvers:
            roles = [r for r in rule.approvers if r != role]
            yield _set_rule(
                rules,
                i,
                {**rules[i], "approvers": roles},
                id=f"rule:{rid}:approver:{role}:remove",
                target=f"rule {rid}",
                description=f"remove approver role {role} from rule {rid}",
                change=f"removing approver role {role}",
            )
    yield from _threshold_mutants(document, rules, i, rule, recordings)


def _set_rule(
    rules: list[dict[str, Any]],
    i: int,
    new: dict[str, Any],
    *,
    id: str,
    target: str,
    description: str,
    change: str,
) -> Mutant:
    changed = [*rules[:i], new, *rules[i + 1 :]]
    return Mutant(
        id=id,
        target=target,
        description=description,
        change=change,
        changes=((("rules",), changed),),
    )


def _threshold_mutants(
    document: SpecDocument,
    rules: list[dict[str, Any]],
    i: int,
    rule: RuleSpec,
    recordings: Sequence[Recording],
) -> Iterator[Mutant]:
    when = rule.when
    found = [(m, False) for m in _ARG_FIRST.finditer(when)]
    found += [(m, True) for m in _NUM_FIRST.finditer(when)]
    tools = _tools_of_rule(document, rule)
    tasks = _tasks_of_rule(document, rule.id)
    for n, (match, reversed_) in enumerate(sorted(found, key=lambda f: f[0].start("num"))):
        arg, op, text = match.group("arg"), match.group("op"), match.group("num")
        seen = sorted(set(_seen_values(recordings, tasks, tools, arg)))
        threshold = float(text)
        integral = "." not in text and all(float(v).is_integer() for v in seen)
        step = 1.0 if integral else 0.01

        def matches(value: float, limit: float, op: str = op, reversed_: bool = reversed_) -> bool:
            return _compare(limit, op, value) if reversed_ else _compare(value, op, limit)

        before = [matches(v, threshold) for v in seen]
        candidates = sorted({c for v in seen for c in (v - step, v, v + step)})
        moved = [c for c in candidates if [matches(v, c) for v in seen] != before]
        ups = [c for c in moved if c > threshold]
        downs = [c for c in moved if c < threshold]
        suffix = "" if len(found) == 1 else f":{n + 1}"
        for direction, chosen in (("up", ups[:1]), ("down", downs[-1:])):
            if not chosen:
                continue
            shown = _number(chosen[0], integral)
            new_when = when[: match.start("num")] + shown + when[match.end("num") :]
            yield _set_rule(
                rules,
                i,
                {**rules[i], "when": new_when},
                id=f"rule:{rule.id}:threshold{suffix}:{direction}",
                target=f"rule {rule.id}",
                description=(
                    f"move the threshold of rule {rule.id} from {text} to {shown} "
                    f"(recorded args.{arg}: {', '.join(_number(v, integral) for v in seen)})"
                ),
                change=f"moving its threshold on args.{arg} from {text} to {shown}",
            )


def _compare(left: float, op: str, right: float) -> bool:
    if op == "<":
        return left < right
    if op == "<=":
        return left <= right
    if op == ">":
        return left > right
    return left >= right


def _number(value: float, integral: bool) -> str:
    if integral:
        return str(round(value))
    return f"{value:.2f}".rstrip("0").rstrip(".") if "." in f"{value:.2f}" else str(value)


def _tools_of_rule(document: SpecDocument, rule: RuleSpec) -> set[str]:
    """The tools a rule can apply to: those `tool == "…"` names, else every tool of its tasks."""
    named = set(_TOOL_NAMED.findall(rule.when))
    if named:
        return named
    return {t for name in _tasks_of_rule(document, rule.id) for t in document.tasks[name].tools}


def _tasks_of_rule(document: SpecDocument, rule_id: str) -> set[str]:
    return {
        name for name, task in document.tasks.items() if task.rules is None or rule_id in task.rules
    }


def _seen_values(
    recordings: Iterable[Recording], tasks: set[str], tools: set[str], arg: str
) -> Iterator[float]:
    """The numbers the recordings' models passed as `arg` to one of `tools`, in those tasks."""
    for recording in recordings:
        if recording.task not in tasks:
            continue
        for turn in recording.model_turns:
            for call in turn.answer.get("calls") or ():
                if not isinstance(call, Mapping) or call.get("name") not in tools:
                    continue
                value = (call.get("args") or {}).get(arg)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    yield float(value)


# -- guards, budgets -------------------------------------------------------------------------


def _guard_mutants(
    document: SpecDocument, guards: list[dict[str, Any]], i: int, guard: GuardSpec
) -> Iterator[Mutant]:
    gid = guard.id
    changes: list[tuple[KeyPath, Any]] = [(("guards",), guards[:i] + guards[i + 1 :])]
    for name, task in document.tasks.items():
        if task.guards is not None and gid in task.guards:
            changes.append((("tasks", name, "guards"), [g for g in task.guards if g != gid]))
    yield Mutant(
        id=f"guard:{gid}:remove",
        target=f"guard {gid}",
        description=f"remove guard {gid}",
        change="removing it",
        changes=tuple(changes),
    )
    action = guard.action.value
    weaker = _WEAKER.get(action)
    if weaker is not None:
        changed = [*guards[:i], {**guards[i], "action": weaker}, *guards[i + 1 :]]
        yield Mutant(
            id=f"guard:{gid}:action:{weaker}",
            target=f"guard {gid}",
            description=f"weaken the action of guard {gid} from {action} to {weaker}",
            change=f"weakening its action from {action} to {weaker}",
            changes=((("guards",), changed),),
        )


def _budget_mutants(
    task: str, budget: Mapping[str, Any], recordings: Sequence[Recording]
) -> Iterator[Mutant]:
    used: dict[str, float] = {}
    for recording in recordings:
        if recording.task != task:
            continue
        usage = recording.usage
        spent = {
            "steps": usage.get("steps"),
            "tokens": (usage.get("tokens_in") or 0) + (usage.get("tokens_out") or 0),
            "usd": usage.get("usd"),
            "tool_calls": usage.get("tool_calls"),
        }
        for key, value in spent.items():
            if isinstance(value, int | float) and value > used.get(key, 0):
                used[key] = float(value)
    for key in _BUDGETS:
        limit, most = budget.get(key), used.get(key)
        if limit is None or not most:
            continue
        lowered: float | int = round(most / 2, 8) if key == "usd" else int(most) - 1
        if key in ("steps", "tokens") and lowered < 1:
            continue
        yield Mutant(
            id=f"task:{task}:budget:{key}:lower",
            target=f"budget {key} of task {task}",
            description=(
                f"lower the {key} budget of task {task} from {limit:g} to {lowered:g} "
                f"(a recording used {most:g})"
            ),
            change=f"lowering it from {limit:g} to {lowered:g}",
            changes=((("tasks", task, "budget", key), lowered),),
        )


def _retry_budget_mutants(
    document: SpecDocument, recordings: Sequence[Recording]
) -> Iterator[Mutant]:
    """Halve a model's `retry_budget` below the most a recording waited on it.

    A recorded error's `wait` was charged when the same model was asked again next (a retry;
    another model next is a fallback, which charges nothing).
    """
    most: dict[str, float] = {}
    for recording in recordings:
        waited: dict[str, float] = {}
        for turn, after in pairwise(recording.model_turns):
            wait = turn.answer.get("wait")
            if isinstance(wait, int | float) and wait > 0 and after.model == turn.model:
                waited[turn.model] = waited.get(turn.model, 0.0) + float(wait)
        for name, total in waited.items():
            most[name] = max(most.get(name, 0.0), total)
    for name, total in most.items():
        model = document.models.get(name)
        if model is None:
            continue
        lowered = round(total / 2, 6)
        yield Mutant(
            id=f"model:{name}:retry_budget:lower",
            target=f"retry budget of model {name}",
            description=(
                f"lower the retry budget of model {name} from {model.retry_budget:g}s to "
                f"{lowered:g}s (a recording waited {total:g}s)"
            ),
            change=f"lowering it from {model.retry_budget:g}s to {lowered:g}s",
            changes=((("models", name, "retry_budget"), f"{lowered:g}s"),),
        )


def _dump(item: RuleSpec | GuardSpec) -> dict[str, Any]:
    from pytest_harness.spec.validation import dump

    data: dict[str, Any] = dump(item)
    return data
