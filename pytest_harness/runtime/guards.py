"""Guards: checks on a run's input, its output and tool results, and what they do when they fire.

A checker is built once per guard when the harness loads (bad parameters are `SpecError`s at the
guard's line) and then called with a text and its context. `apply_guards` runs a chain: each
guard sees the text as the guards before it left it; `redact` rewrites it, `warn` only records,
`block` stops the chain. A `redact` decision keeps a digest of the text it left (`left`).

A built-in check is a `BuiltinCheck`: deterministic, with the digest of its configuration, so
a decision on text that golden-file redaction hides can be kept and replayed
(`runtime.guard_memory`); a check that is Python code (`pkg.mod:fn`, a plugin's) is not one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_harness.cel import CelError
from pytest_harness.errors import HarnessError
from pytest_harness.models.base import content_digest
from pytest_harness.runtime.guard_memory import LEFT_TEXT, GuardMemory, Seen, config_digest
from pytest_harness.runtime.trace import Decision
from pytest_harness.spec.schema import GuardAction, GuardSpec
from pytest_harness.spec.spec import KeyPath, Spec

__all__ = [
    "REDACTED",
    "BuiltinCheck",
    "GuardChecker",
    "GuardContext",
    "GuardHit",
    "GuardOutcome",
    "apply_guards",
    "build_checker",
]

REDACTED = "[REDACTED]"


@dataclass(frozen=True, slots=True, kw_only=True)
class GuardContext:
    """What a guard may look at besides the text."""

    on: str
    task: str
    principal: Mapping[str, Any]
    labels: Mapping[str, str]
    tool: str | None = None
    args: Mapping[str, Any] = field(default_factory=dict)

    def variables(self, text: str) -> dict[str, Any]:
        """The variables of a `cel` guard."""
        return {
            "text": text,
            "on": self.on,
            "task": self.task,
            "tool": self.tool or "",
            "args": dict(self.args),
            "principal": dict(self.principal),
            "labels": dict(self.labels),
        }


@dataclass(frozen=True, slots=True)
class GuardHit:
    """A check that fired: the text as `redact` would leave it, and why it fired.

    `error` is true when the check could not decide and fired to fail closed (a `cel`
    expression that failed at run time); a grader reuses the check and records an error.
    """

    redacted: str
    reason: str = ""
    error: bool = False


class GuardChecker(Protocol):
    """A built guard check: returns a hit when the text trips it, else None."""

    def __call__(self, text: str, context: GuardContext) -> GuardHit | None:
        """Check `text`."""
        ...


@dataclass(frozen=True, slots=True)
class BuiltinCheck:
    """A built-in check: the same configuration on the same text (and context) decides the same.

    `config` is the digest of the guard's configuration (`guard_memory.config_digest`);
    `reads_context` is true for a check that reads more than the text (`cel`'s variables).
    """

    run: Callable[[str, GuardContext], GuardHit | None]
    config: str
    reads_context: bool = False

    def __call__(self, text: str, context: GuardContext) -> GuardHit | None:
        """Check `text`."""
        return self.run(text, context)


@dataclass(slots=True, unsafe_hash=True)  # not frozen: built per run, never changed
class GuardOutcome:
    """The text after a chain of guards, their decisions, and the guard that blocked, if any."""

    text: str
    decisions: tuple[Decision, ...] = ()
    blocked_by: GuardSpec | None = None
    reason: str = ""


def apply_guards(
    guards: Sequence[tuple[GuardSpec, GuardChecker]],
    text: str,
    context: GuardContext,
    *,
    step: int,
    memory: GuardMemory | None = None,
) -> GuardOutcome:
    """Run the guards that watch `context.on` over `text`, in order.

    With `memory` (a replay's), a built-in guard shown the text its recorded decision kept the
    digest of takes that decision (`runtime.guard_memory`) instead of checking again.
    """
    decisions: list[Decision] = []
    chain: list[str] | None = []  # the configs of the guards on this text so far, all built-in
    for guard, checker in guards:
        if guard.on.value != context.on:
            continue
        if guard.tools is not None and context.tool not in guard.tools:
            continue
        builtin = checker if isinstance(checker, BuiltinCheck) else None
        if chain is not None:
            if builtin is None:
                chain = None  # Python code decided before the guards after it: none are kept
            else:
                chain.append(builtin.config)
        seen: Seen | None = None
        if (
            builtin is not None
            and chain is not None
            and memory is not None
            and memory.remembers(guard.id)
        ):
            seen = Seen(builtin, chain, text, context)
            recalled = memory.recall(guard, context, seen)
            if recalled is not None:
                decisions.append(Decision(step, "guard", guard.id, dict(recalled)))
                if guard.action is GuardAction.REDACT:
                    text = str(recalled[LEFT_TEXT])
                elif guard.action is GuardAction.BLOCK:
                    return _blocked(guard, context, text, decisions)
                continue
        shown = text
        hit = checker(text, context)
        if hit is None:
            continue
        detail: dict[str, Any] = {"on": context.on, "action": guard.action.value}
        if context.tool:
            detail["tool"] = context.tool
        if hit.reason:
            detail["reason"] = hit.reason
        if guard.action is GuardAction.REDACT:
            text = hit.redacted
            # what it let through is part of what it did: a redaction that hides more or less
            # of an input or a tool result changes what the model is shown, not only requests
            detail["left"] = _left_digest(text)
        if builtin is not None and chain is not None:  # what it saw is digested only now
            if seen is None:
                seen = Seen(builtin, chain, shown, context)
            detail.update(seen.kept(text if guard.action is GuardAction.REDACT else None))
        decisions.append(Decision(step, "guard", guard.id, detail))
        if guard.action is GuardAction.BLOCK:
            return _blocked(guard, context, text, decisions)
    return GuardOutcome(text, tuple(decisions))


def _blocked(
    guard: GuardSpec, context: GuardContext, text: str, decisions: list[Decision]
) -> GuardOutcome:
    reason = guard.message or f"guard {guard.id} blocked the {context.on.replace('_', ' ')}"
    return GuardOutcome(text, tuple(decisions), guard, reason)


def _left_digest(text: str) -> str:
    """`sha256:` of the text a `redact` guard left, as recordings compare it.

    Credentials redacted and generated ids made stable, as in a golden file, so the replay of
    one finds the same digest; the text itself is not kept (it may be a whole tool result).
    """
    from pytest_harness.redaction import comparable  # deferred, as for a recorded run

    return content_digest(comparable(text))


def build_checker(check: str, guard: GuardSpec, spec: Spec, where: KeyPath) -> BuiltinCheck:
    """Build the built-in check `check` for `guard`; bad parameters are `SpecError`s."""
    builders: dict[str, Callable[[GuardSpec, Spec, KeyPath], BuiltinCheck]] = {
        "regex": _regex,
        "contains": _contains,
        "max_length": _max_length,
        "json_schema": _json_schema,
        "cel": _cel,
    }
    return builders[check](guard, spec, where)


def build_callable_checker(guard: GuardSpec, spec: Spec, where: KeyPath) -> GuardChecker:
    """A guard whose `check` is `pkg.mod:fn`, called as `fn(text, context)`.

    The function returns something falsy (no hit), `True` (hit; `redact` replaces the whole
    text) or a string (hit; the text as `redact` should leave it).
    """
    from pytest_harness.importing import import_callable

    fn = import_callable(guard.check, spec=spec, where=(*where, "check"))

    def check(text: str, context: GuardContext) -> GuardHit | None:
        try:
            verdict = fn(text, context)
        except Exception:
            raise  # the run fails with it
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | GeneratorExit):
                raise
            # sys.exit() in a guard ended the process, and every worker that resumed the
            # run in turn (it was left `running`): the run fails instead
            raise HarnessError(
                f"guard {guard.id!r} ({guard.check}) raised {type(exc).__name__}({exc}) on "
                f"the {context.on.replace('_', ' ')}; a guard function must return a verdict "
                "or raise an Exception, not end the process"
            ) from exc
        if not verdict:
            return None
        if isinstance(verdict, str):
            return GuardHit(verdict)
        return GuardHit(REDACTED)

    return check


def _need(guard: GuardSpec, spec: Spec, where: KeyPath, key: str, value: Any) -> Any:
    if value is None:
        raise spec.error(f"a {guard.check} guard needs `{key}`", where)
    return value


def _flags(guard: GuardSpec) -> int:
    return re.IGNORECASE if guard.ignore_case else 0


def _regex(guard: GuardSpec, spec: Spec, where: KeyPath) -> BuiltinCheck:
    pattern = _need(guard, spec, where, "pattern", guard.pattern)
    try:
        compiled = re.compile(pattern, _flags(guard))
    except re.error as exc:
        raise spec.error(
            f"bad regex {pattern!r}: {exc.msg} at position {exc.pos}", (*where, "pattern")
        ) from None

    def check(text: str, context: GuardContext) -> GuardHit | None:
        if compiled.search(text) is None:
            return None
        return GuardHit(compiled.sub(REDACTED, text), f"matched {pattern!r}")

    params = {"pattern": pattern, "ignore_case": guard.ignore_case}
    return BuiltinCheck(check, config_digest(guard, "regex", params))


def _contains(guard: GuardSpec, spec: Spec, where: KeyPath) -> BuiltinCheck:
    raw = _need(guard, spec, where, "text", guard.text)
    needles = (raw,) if isinstance(raw, str) else tuple(raw)
    if not needles or any(not n for n in needles):
        raise spec.error("`text` must be a non-empty string or list of them", (*where, "text"))
    compiled = re.compile("|".join(re.escape(n) for n in needles), _flags(guard))

    def check(text: str, context: GuardContext) -> GuardHit | None:
        found = compiled.search(text)
        if found is None:
            return None
        return GuardHit(compiled.sub(REDACTED, text), f"contains {found.group(0)!r}")

    params = {"text": list(needles), "ignore_case": guard.ignore_case}
    return BuiltinCheck(check, config_digest(guard, "contains", params))


def _max_length(guard: GuardSpec, spec: Spec, where: KeyPath) -> BuiltinCheck:
    limit = _need(guard, spec, where, "max", guard.max)

    def check(text: str, context: GuardContext) -> GuardHit | None:
        if len(text) <= limit:
            return None
        return GuardHit(text[:limit], f"{len(text)} characters, more than {limit}")

    return BuiltinCheck(check, config_digest(guard, "max_length", {"max": limit}))


def _json_schema(guard: GuardSpec, spec: Spec, where: KeyPath) -> BuiltinCheck:
    import jsonschema

    raw = _need(guard, spec, where, "schema", guard.schema_)
    schema: Any = raw
    if isinstance(raw, str):
        from pytest_harness.spec.yamlio import read_yaml

        schema = read_yaml(spec.resolve(raw)).data
    if not isinstance(schema, dict):
        raise spec.error("`schema` must be a mapping or a JSON/YAML file holding one", where)
    validator_cls = jsonschema.validators.validator_for(schema)
    try:
        validator_cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise spec.error(f"invalid JSON schema: {exc.message}", (*where, "schema")) from None
    validator = validator_cls(schema)

    def check(text: str, context: GuardContext) -> GuardHit | None:
        try:
            value = json.loads(text)
        except ValueError as exc:
            return GuardHit(REDACTED, f"not JSON: {exc}")
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is None:
            return None
        at = "/".join(str(p) for p in error.absolute_path) or "(root)"
        return GuardHit(REDACTED, f"{at}: {error.message}")

    # the schema as read (from its file, when it names one), not its file's name
    return BuiltinCheck(check, config_digest(guard, "json_schema", {"schema": schema}))


def _cel(guard: GuardSpec, spec: Spec, where: KeyPath) -> BuiltinCheck:
    program = spec.guard_programs.get(guard.id)
    if program is None:
        raise spec.error("a cel guard needs `when` (a CEL expression over `text`)", where)

    def check(text: str, context: GuardContext) -> GuardHit | None:
        try:
            fired = program.evaluate(context.variables(text))
        except CelError as exc:  # fail closed: a guard that cannot decide fires
            return GuardHit(REDACTED, f"error: {exc}", error=True)
        return GuardHit(REDACTED, f"{guard.when} is true") if fired is True else None

    # it reads the principal, the labels, the tool and its arguments besides the text
    config = config_digest(guard, "cel", {"when": guard.when})
    return BuiltinCheck(check, config, reads_context=True)
