"""`Where`: the `(file, line)` of every key path of a spec, and `SpecError`s that point there.

Schema validation lives here too (`validate_yaml`, `validate_at`): pydantic's errors become one
`SpecError` for the problem nearest the top of the file, in YAML's words, with a did-you-mean for
a misspelt key.

Locations: `Where.locations` (which becomes `Spec.locations`) maps each key path of the effective
document to `(file, line)`. The baseline file's own keys live under the `BASELINE` prefix:
baseline rule `i` is `("baseline", "rules", i)` and its expression
`("baseline", "rules", i, "when")`, guard `i` is `("baseline", "guards", i)`, a lock is
`("baseline", "locks", "state.record")`. `("baseline",)` itself is the spec's `baseline:` line;
the prefix cannot clash with the document, where `baseline` is a plain string.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from types import NoneType, UnionType
from typing import TYPE_CHECKING, Any, TypeVar, Union, get_args, get_origin

from pytest_harness.errors import SpecError, did_you_mean
from pytest_harness.spec.spec import KeyPath, format_key_path, is_name, quote_key

if TYPE_CHECKING:
    from pydantic import ValidationError
    from pydantic_core import ErrorDetails

    from pytest_harness.spec.yamlio import YamlDoc

__all__ = ["BASELINE", "Where", "has_key", "kind", "show", "validate_at", "validate_yaml"]

_M = TypeVar("_M")
BASELINE: KeyPath = ("baseline",)
"""The prefix of the baseline file's key paths in `Where.locations`."""
_EXTRA = ("extra_forbidden", "unexpected_keyword_argument")
"""Pydantic's error types for an unknown key (of a model; of a dataclass)."""
_INSTANCE = ("a dictionary or an instance of", "a valid dictionary or instance of")
"""Pydantic's wording for a dataclass or a model given something else; it names our class."""
_WORDING = {
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


class Where:
    """The `(file, line)` of every key path read so far, and errors that point at them."""

    def __init__(self, doc: YamlDoc) -> None:
        self.file = doc.file
        self.locations: dict[KeyPath, tuple[str, int]] = {}
        self.add(doc)

    def add(self, doc: YamlDoc, prefix: KeyPath = ()) -> None:
        """Record the lines of `doc`'s key paths, under `prefix`."""
        for path, line in doc.lines.items():
            if path or not prefix:
                self.locations[(*prefix, *path)] = (doc.file, line)

    def locate(self, path: KeyPath) -> tuple[str, int | None]:
        """The `(file, line)` of `path`, or of its nearest located parent."""
        probe = path
        while True:
            if probe in self.locations:
                return self.locations[probe]
            if not probe:
                return (self.file, None)
            probe = probe[:-1]

    def error(self, reason: str, path: KeyPath) -> SpecError:
        """A `SpecError` for `reason` at `path`'s file and line."""
        file, line = self.locate(path)
        shown = path[1:] if path[:1] == BASELINE and len(path) > 1 else path
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


def has_key(node: Any, part: str | int) -> bool:
    """Whether `node[part]` exists: a key of a mapping, an index of a list."""
    if isinstance(node, dict):
        return isinstance(part, str) and part in node
    return isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)


def validate_yaml(model: type[_M], doc: YamlDoc) -> _M:
    """Validate a parsed YAML file into `model`; one `SpecError` at the right line.

    `model` is a pydantic model or a dataclass of `spec.schema`'s kind.
    """
    return validate_at(model, doc.data, Where(doc))


def validate_at(model: type[_M], data: Any, where: Where, prefix: KeyPath = ()) -> _M:
    """Validate `data` (located under `prefix`) into `model`; one `SpecError` at the right line."""
    from pytest_harness.spec.validation import ValidationError, validate

    try:
        return validate(model, data)
    except ValidationError as exc:
        raise _schema_error(exc, model, data, where, prefix) from None


def _schema_error(
    exc: ValidationError, model: type[Any], data: Any, where: Where, prefix: KeyPath
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
        if not has_key(node, part):
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
    value = show(first["input"])
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
    if rest.startswith(_INSTANCE):  # `... or instance of _Model`: the class is ours to know
        return "a mapping"
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


def show(value: Any) -> str:
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


def kind(value: Any) -> str:
    """Name the kind of a YAML value: `a list`, `a string`, `null`."""
    if value is None:
        return "null (the file is empty)"
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "true or false"}
    return names.get(type(value), f"a {type(value).__name__}")
