"""`load_spec`: read a `harness.yaml`, apply its environment and org baseline, and check it.

The steps, in order: read the YAML (`yamlio`); deep-merge the chosen environment; load the
baseline and apply its locks; apply `record=`; validate the schema (pydantic); check the
cross-references (models, tools, rules, guards, providers, stores); compile the CEL. Each step
fails with one `SpecError` naming the file, the line and the key path.

Locations: `Spec.locations` maps each key path of the effective document to `(file, line)`. A
key an environment sets points into `environments.<env>`; a lock the baseline applies points at
the lock's line in the baseline file. The baseline file's own keys live under a `"baseline"`
prefix: baseline rule `i` is `("baseline", "rules", i)` and its expression
`("baseline", "rules", i, "when")`, guard `i` is `("baseline", "guards", i)`, a lock is
`("baseline", "locks", "state.record")`. `("baseline",)` itself is the spec's `baseline:` line;
the prefix cannot clash with the document, where `baseline` is a plain string.

Locks compare the values as written (after YAML parsing): `lease: 30` does not satisfy a lock
`state.lease: 30s`. A lock whose key is absent is applied, creating the mappings on its path.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, NoneType, UnionType
from typing import TYPE_CHECKING, Any, TypeVar, Union, get_args, get_origin

from pytest_harness.cel import CelProgram, CelSyntaxError, compile_expression
from pytest_harness.errors import SpecError, did_you_mean
from pytest_harness.spec import cache as spec_cache
from pytest_harness.spec.schema import STRICT, GuardSpec, RuleSpec, SpecDocument, resolve_path
from pytest_harness.spec.spec import KeyPath, Spec, format_key_path, is_name, quote_key

if TYPE_CHECKING:
    from pydantic import ValidationError
    from pydantic_core import ErrorDetails

    from pytest_harness.spec.yamlio import YamlDoc

__all__ = ["GUARD_VARIABLES", "RULE_VARIABLES", "load_spec", "validate_yaml"]

RULE_VARIABLES = frozenset({"tool", "args", "task", "principal", "step", "spent", "labels"})
"""The variables a rule's `when` may use."""
GUARD_VARIABLES = frozenset({"text", "on", "task", "tool", "args", "principal", "labels"})
"""The variables a `cel` guard's `when` may use."""

_M = TypeVar("_M")
_BASELINE: KeyPath = ("baseline",)
_COMPREHENSION = re.compile(
    r"\b(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_]\w*)\s*(?:,\s*([A-Za-z_]\w*)\s*)?,"
)
_LOCK_SEGMENT = re.compile(r"([^.\[\]]+)((?:\[\d+\])*)")
_EXTRA = ("extra_forbidden", "unexpected_keyword_argument")
"""Pydantic's error types for an unknown key (of a model; of a dataclass)."""
_WORDING = {
    "a dictionary or an instance of": "a mapping or instance of",
    "a valid dictionary": "a mapping",
    "a valid list": "a list",
    "a valid tuple": "a list",
    "a valid string": "a string",
    "a valid integer": "an integer",
    "a valid number": "a number",
    "a valid boolean": "true or false",
    "greater": "a value greater",
    "less": "a value less",
}


@dataclass(frozen=True, kw_only=True)
class _BaselineDocument:
    """An org baseline: locked keys, and rules and guards prepended to every task."""

    __pydantic_config__ = STRICT

    locks: dict[str, Any] = field(default_factory=dict)
    rules: tuple[RuleSpec, ...] = ()
    guards: tuple[GuardSpec, ...] = ()


@dataclass(frozen=True)
class _Baseline:
    path: Path
    file: str
    document: _BaselineDocument
    sha256: str | None
    """The digest of the bytes read (for the spec cache)."""


def load_spec(
    path: str | Path,
    *,
    env: str | None = None,
    record: bool | None = None,
    edit: Callable[[dict[str, Any]], None] | None = None,
) -> Spec:
    """Load and check a `harness.yaml`; raise `SpecError` at the first problem.

    `env` picks an environment overlay (default: `$HARNESS_ENV` when set; `""` for none);
    `record`, when given, sets `state.record` unless the baseline locks it otherwise. `edit`,
    when given, changes the document's data in place after the overlay and the baseline and
    before every check (`pytest-harness mutate` loads its mutants this way, so a mutant is
    checked exactly as a spec file would be).
    """
    spec_path = Path(os.path.abspath(path))
    env_name, env_source = _choose_env(env)
    cached = edit is None and spec_cache.enabled()
    spec_sha = None
    if cached:
        hit = spec_cache.read(spec_path, env_name, record)
        if hit is not None:
            return hit
        spec_sha = spec_cache.file_digest(spec_path)
    spec, baseline = _check(spec_path, env_name, env_source, record, edit)
    if cached:
        spec_cache.write(spec, record, spec_sha, baseline.sha256 if baseline else None)
    return spec


def _check(
    spec_path: Path,
    env_name: str | None,
    env_source: str,
    record: bool | None,
    edit: Callable[[dict[str, Any]], None] | None,
) -> tuple[Spec, _Baseline | None]:
    """Read, merge and check the spec file (every step of `load_spec` but the cache)."""
    from pytest_harness.spec.yamlio import read_yaml

    doc = read_yaml(spec_path)
    if not isinstance(doc.data, dict):
        raise SpecError(
            "the top level must be a mapping (version, name, models, tools, tasks, …), "
            f"not {_kind(doc.data)}",
            file=doc.file,
            line=doc.line(()),
        )
    data: dict[str, Any] = doc.data
    where = _Where(doc)
    env_paths: set[KeyPath] = set()
    if env_name is not None:
        env_paths = _apply_environment(data, env_name, env_source, where)
    baseline = _load_baseline(data, spec_path, where)
    if baseline is not None:
        _apply_locks(data, baseline, where, env_name, env_paths)
    if record is not None:
        _apply_record(data, record, baseline, where)
    if edit is not None:
        edit(data)
    document = _validate(SpecDocument, data, where)
    base = baseline.document if baseline is not None else _BaselineDocument()
    _check_references(document, base, where)
    rule_programs, guard_programs = _compile(document, base, where)
    grader_programs = _check_graders(document, where)
    spec = Spec(
        document=document,
        path=spec_path,
        env=env_name,
        digest=_digest(document, base),
        locations=MappingProxyType(where.locations),
        rule_programs=MappingProxyType(rule_programs),
        guard_programs=MappingProxyType(guard_programs),
        grader_programs=MappingProxyType(grader_programs),
        baseline_rules=base.rules,
        baseline_guards=base.guards,
        baseline_path=baseline.path if baseline is not None else None,
    )
    return spec, baseline


class _Where:
    """The `(file, line)` of every key path read so far, and errors that point at them."""

    def __init__(self, doc: YamlDoc) -> None:
        self.file = doc.file
        self.locations: dict[KeyPath, tuple[str, int]] = {}
        self.add(doc)

    def add(self, doc: YamlDoc, prefix: KeyPath = ()) -> None:
        for path, line in doc.lines.items():
            if path or not prefix:
                self.locations[(*prefix, *path)] = (doc.file, line)

    def locate(self, path: KeyPath) -> tuple[str, int | None]:
        probe = path
        while True:
            if probe in self.locations:
                return self.locations[probe]
            if not probe:
                return (self.file, None)
            probe = probe[:-1]

    def error(self, reason: str, path: KeyPath) -> SpecError:
        file, line = self.locate(path)
        shown = path[1:] if path[:1] == _BASELINE and len(path) > 1 else path
        return SpecError(reason, file=file, line=line, key=format_key_path(shown) or None)

    def relocate(self, moves: Mapping[KeyPath, KeyPath]) -> None:
        """Point each replaced path (key) and what is under it at its source (value) instead."""
        sources = {there: here for here, there in moves.items()}
        kept: dict[KeyPath, tuple[str, int]] = {}
        for path, loc in self.locations.items():
            if not any(path[:n] in moves for n in range(1, len(path) + 1)):
                kept[path] = loc
        for path, loc in self.locations.items():
            for n in range(1, len(path) + 1):
                if path[:n] in sources:
                    kept[(*sources[path[:n]], *path[n:])] = loc
                    break
        self.locations = kept


def _choose_env(env: str | None) -> tuple[str | None, str]:
    if env is not None:
        return (env or None, f"env={env!r}")
    value = os.environ.get("HARNESS_ENV", "")
    return (value, f"HARNESS_ENV={value!r}") if value else (None, "")


def _apply_environment(data: dict[str, Any], env: str, source: str, where: _Where) -> set[KeyPath]:
    """Deep-merge `environments[env]` into `data`; return the key paths it replaced."""
    envs = data.get("environments")
    if not isinstance(envs, dict):
        envs = {}
    if env not in envs:
        hint = did_you_mean(env, envs) if envs else "; this file defines no `environments`"
        raise where.error(
            f"unknown environment {env!r}{hint}, chosen by {source}", ("environments",)
        )
    at: KeyPath = ("environments", env)
    overlay = envs[env]
    if not isinstance(overlay, dict):
        raise where.error(
            f"an environment must be a mapping of the keys it overrides, not {_show(overlay)}", at
        )
    for key in ("environments", "baseline"):
        if key in overlay:
            raise where.error(f"an environment cannot set `{key}`", (*at, key))
    moves: dict[KeyPath, KeyPath] = {}
    _merge(data, overlay, (), at, moves)
    where.relocate(moves)
    return set(moves)


def _merge(
    base: dict[str, Any],
    overlay: dict[str, Any],
    path: KeyPath,
    source: KeyPath,
    moves: dict[KeyPath, KeyPath],
) -> None:
    """Merge mappings recursively; anything else in `overlay` replaces what `base` holds."""
    for key, value in overlay.items():
        here, there = (*path, key), (*source, key)
        current = base.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            _merge(current, value, here, there, moves)
        else:
            base[key] = copy.deepcopy(value)
            moves[here] = there


def _load_baseline(data: dict[str, Any], spec_path: Path, where: _Where) -> _Baseline | None:
    raw = data.get("baseline")
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw.strip():
        raise where.error(
            f"`baseline` must be the path of a YAML file, not {_show(raw)}", _BASELINE
        )
    path = resolve_path(spec_path.parent, raw)
    if not path.is_file():
        raise where.error(f"baseline file not found: {path}", _BASELINE)
    from pytest_harness.spec.yamlio import read_yaml

    sha256 = spec_cache.file_digest(path)
    doc = read_yaml(path)
    content = {} if doc.data is None else doc.data
    if not isinstance(content, dict):
        raise SpecError(
            "a baseline must be a mapping with `locks`, `rules` and `guards`, "
            f"not {_kind(content)}",
            file=doc.file,
            line=doc.line(()),
        )
    where.add(doc, _BASELINE)
    document = _validate(_BaselineDocument, content, where, _BASELINE)
    return _Baseline(path=path, file=doc.file, document=document, sha256=sha256)


def _apply_locks(
    data: dict[str, Any],
    baseline: _Baseline,
    where: _Where,
    env: str | None,
    env_paths: set[KeyPath],
) -> None:
    for dotted, value in baseline.document.locks.items():
        lock_at = (*_BASELINE, "locks", dotted)
        path = _lock_path(dotted)
        if path is None:
            raise where.error(
                f"a lock key must be a dotted key path like state.record, not {dotted!r}", lock_at
            )
        found, current = _get(data, path)
        if found:
            if not _same(current, value):
                touched = any(p[: len(path)] == path or path[: len(p)] == p for p in env_paths)
                by = f"environment {env!r}" if touched else "this file"
                raise where.error(
                    f"locked to {_show(value)} by {baseline.file} (locks.{dotted}); "
                    f"{by} sets {_show(current)}",
                    path,
                )
        elif _put(data, path, copy.deepcopy(value)):
            file, line = where.locate(lock_at)
            if line is not None:
                where.locations[path] = (file, line)
        else:
            raise where.error(
                f"cannot apply the lock {dotted} from {baseline.file}: a value on its path is "
                "not a mapping",
                path,
            )


def _apply_record(
    data: dict[str, Any], record: bool, baseline: _Baseline | None, where: _Where
) -> None:
    if baseline is not None:
        for dotted, value in baseline.document.locks.items():
            if _lock_path(dotted) == ("state", "record") and not _same(value, record):
                raise where.error(
                    f"record={record} was asked for, but {baseline.file} locks state.record to "
                    f"{_show(value)} (locks.{dotted})",
                    (*_BASELINE, "locks", dotted),
                )
    if data.get("state") is None:
        data["state"] = {}
    if isinstance(data["state"], dict):
        data["state"]["record"] = record


def _lock_path(dotted: str) -> KeyPath | None:
    """`("models", "default", "retries")` for `models.default.retries`; `a[0]` indexes a list."""
    path: list[str | int] = []
    for segment in dotted.split("."):
        match = _LOCK_SEGMENT.fullmatch(segment)
        if match is None:
            return None
        path.append(match.group(1))
        path.extend(int(i) for i in re.findall(r"\d+", match.group(2)))
    return tuple(path)


def _get(data: Any, path: KeyPath) -> tuple[bool, Any]:
    node = data
    for part in path:
        if not _has(node, part):
            return (False, None)
        node = node[part]
    return (True, node)


def _has(node: Any, part: str | int) -> bool:
    if isinstance(node, dict):
        return isinstance(part, str) and part in node
    return isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)


def _put(data: dict[str, Any], path: KeyPath, value: Any) -> bool:
    """Set `path` to `value`, creating missing mappings; False when something is in the way."""
    node: Any = data
    for i, part in enumerate(path):
        last = i == len(path) - 1
        if isinstance(part, str) and isinstance(node, dict):
            if last:
                node[part] = value
            elif part not in node or node[part] is None:
                node[part] = {}
            node = node[part]
        elif isinstance(part, int) and isinstance(node, list) and part < len(node):
            if last:
                node[part] = value
            node = node[part]
        else:
            return False
    return True


def _same(a: Any, b: Any) -> bool:
    """Equality that does not take `true` for `1`."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def validate_yaml(model: type[_M], doc: YamlDoc) -> _M:
    """Validate a parsed YAML file into `model`; one `SpecError` at the right line.

    `model` is a pydantic model or a dataclass of `spec.schema`'s kind.
    """
    return _validate(model, doc.data, _Where(doc))


def _validate(model: type[_M], data: Any, where: _Where, prefix: KeyPath = ()) -> _M:
    from pytest_harness.spec.validation import ValidationError, validate

    try:
        return validate(model, data)
    except ValidationError as exc:
        raise _schema_error(exc, model, data, where, prefix) from None


def _schema_error(
    exc: ValidationError, model: type[Any], data: Any, where: _Where, prefix: KeyPath
) -> SpecError:
    """One `SpecError` for the problem nearest the top of the file, counting the others."""
    groups: dict[KeyPath, list[ErrorDetails]] = {}
    for error in exc.errors(include_url=False):
        groups.setdefault(_real_path(data, error["loc"]), []).append(error)

    def line_of(path: KeyPath) -> int:
        line = where.locate((*prefix, *path))[1]
        return sys.maxsize if line is None else line

    path = min(groups, key=line_of)
    if all(e["type"] == "missing" for e in groups[path]):
        # a misspelt key explains a missing one better: `than:` for `then:`
        typos = [p for p, errs in groups.items() if p[:-1] == path and _is_extra(errs)]
        path = min(typos, key=line_of, default=path)
    reason = _describe(model, path, groups[path])
    if len(groups) > 1:
        reason += f" (and {len(groups) - 1} more)"
    return where.error(reason, (*prefix, *path))


def _is_extra(errors: list[ErrorDetails]) -> bool:
    return errors[0]["type"] in _EXTRA


def _real_path(data: Any, loc: Iterable[str | int]) -> KeyPath:
    """Return the part of pydantic's `loc` that exists in `data` (dropping union members)."""
    node, path = data, []
    for part in loc:
        if not _has(node, part):
            break
        node = node[part]
        path.append(part)
    return tuple(path)


def _describe(model: type[Any], path: KeyPath, errors: list[ErrorDetails]) -> str:
    missing = list(dict.fromkeys(str(e["loc"][-1]) for e in errors if e["type"] == "missing"))
    if missing:
        names = ", ".join(repr(m) for m in missing)
        return f"missing required key{'s' if len(missing) > 1 else ''} {names}"
    first = errors[0]
    if first["type"] in _EXTRA and path:
        key = str(path[-1])
        if not is_name(key):  # file content, not a key someone misspelt: never quote it
            known = ", ".join(_keys_at(model, path[:-1]))
            return f"unknown key {quote_key(key)}" + (f" (known: {known})" if known else "")
        return f"unknown key {key!r}{did_you_mean(key, _keys_at(model, path[:-1]))}"
    value = _show(first["input"])
    if len(errors) > 1:  # one error per member of a union
        expected = list(dict.fromkeys(_expected(e["msg"]) for e in errors))
        choices = (
            ", ".join(expected[:-1]) + f" or {expected[-1]}" if len(expected) > 1 else expected[0]
        )
        return f"expected {choices}, got {value}"
    message = first["msg"].removeprefix("Value error, ")
    if message.startswith("Input should be "):
        reason = f"expected {_expected(message)}, got {value}"
        ctx = first.get("ctx") or {}
        options = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        hint = did_you_mean(first["input"], options) if isinstance(first["input"], str) else ""
        return reason + hint if hint.startswith(" (did you mean") else reason
    return message if value in message else f"{message}, got {value}"


def _expected(message: str) -> str:
    rest = message.removeprefix("Input should be ")
    for phrase, wording in _WORDING.items():
        if rest.startswith(phrase):
            return wording + rest[len(phrase) :]
    return rest


def _keys_at(model: type[Any], path: KeyPath) -> list[str]:
    """Return the keys the schema allows at `path` (for did-you-mean), or none if unknown."""
    from pytest_harness.spec.validation import field_types

    tp: Any = model
    for part in path:
        tp = _strip_optional(tp)
        fields = field_types(tp)
        if fields is not None:
            if not isinstance(part, str) or part not in fields:
                return []
            tp = fields[part]
        elif get_origin(tp) in (dict, tuple, list):
            args = get_args(tp)
            tp = args[-1] if get_origin(tp) is dict else args[0]
        else:
            return []
    fields = field_types(_strip_optional(tp))
    return [] if fields is None else list(fields)


def _strip_optional(tp: Any) -> Any:
    if get_origin(tp) in (Union, UnionType):
        args = [a for a in get_args(tp) if a is not NoneType]
        if len(args) == 1:
            return args[0]
    return tp


def _show(value: Any) -> str:
    """Render a value briefly for a message, in YAML's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping" if value else "an empty mapping"
    text = repr(value)
    if isinstance(value, list) and len(text) > 40:
        return f"a list of {len(value)} items"
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    """Name the kind of a YAML value: `a list`, `a string`, `null`."""
    if value is None:
        return "null (the file is empty)"
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "true or false"}
    return names.get(type(value), f"a {type(value).__name__}")


def _check_references(document: SpecDocument, baseline: _BaselineDocument, where: _Where) -> None:
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
    where: _Where,
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


def _check_unique(kind: str, items: list[tuple[KeyPath, str]], where: _Where) -> None:
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
    return [((*_BASELINE, key, i), item) for i, item in enumerate(from_baseline)] + [
        ((key, i), item) for i, item in enumerate(own)
    ]


def _compile(
    document: SpecDocument, baseline: _BaselineDocument, where: _Where
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


def _check_graders(document: SpecDocument, where: _Where) -> dict[str, CelProgram]:
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
                    f"a callable grader needs `call: module:function`, got {_show(grader.call)}",
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
    source: str, allowed: frozenset[str], owner: str, at: KeyPath, where: _Where
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


def _digest(document: SpecDocument, baseline: _BaselineDocument) -> str:
    """sha256 of the effective document (environments and evals left out) and the baseline's items.

    Values equal to their defaults are left out, so a new optional key (with its default) does
    not change the digest of the specs that do not set it.
    """
    from pytest_harness.spec.validation import dump

    payload = {
        # graders never change what a run does, so editing them does not change the digest
        "document": dump(document, exclude={"environments", "evals"}),
        "baseline": {
            "rules": [dump(r) for r in baseline.rules],
            "guards": [dump(g) for g in baseline.guards],
        },
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
