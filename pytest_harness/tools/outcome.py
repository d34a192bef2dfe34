"""`ToolOutcome`: what one tool call came to, in the form the store keeps and a replay reads.

`Tool.invoke` (`tools/registry.py`) returns one for every call; the run loop builds the same
form for calls it settles without invoking them (denied, declined, unknown, resolved, aborted).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

from pytest_harness.store.helpers import json_text
from pytest_harness.tools.artifacts import Artifact, collect_artifacts

__all__ = ["OK_KINDS", "OutcomeKind", "ToolOutcome"]

OutcomeKind = Literal[
    "ok",
    "invalid_arguments",
    "error",
    "timeout",
    "deadline",
    "denied",
    "declined",
    "unknown",
    "resolved",
    "aborted",
]
"""How a tool call ended.

`Tool.invoke` gives `ok`, `invalid_arguments` (the model's arguments did not validate), `error`
(the tool raised), `timeout` (its own timeout fired) or `deadline` (the run's deadline fired).
The run loop settles calls it never invokes as `denied` (a rule), `declined` (an approver) or
`unknown` (no such tool), in the same stored form. A call whose outcome a crash made uncertain
is settled by `Harness.resolve` as `resolved` (a result someone supplied; `ok` is true) or
`aborted`.
"""

_KINDS: frozenset[str] = frozenset(get_args(OutcomeKind))
OK_KINDS = frozenset({"ok", "resolved"})
"""The kinds of an outcome whose `ok` is true."""

_MAX_SHOWN = 80
"""Longest repr of a bad value quoted back to the model."""


@dataclass(slots=True, kw_only=True, unsafe_hash=True)  # not frozen: built per run, never changed
class ToolOutcome:
    """What one tool invocation came to: the value, and the text the model reads.

    `ok` calls carry the result's JSON-able form in `value` (strings as they are, anything
    unserialisable as its `repr`); failed ones carry `error = {"type", "message"}`. `to_dict()`
    is the form the store keeps and `from_dict()` rebuilds it on resume.
    """

    ok: bool
    kind: OutcomeKind
    value: Any = None
    text: str
    error: Mapping[str, str] | None = None
    artifacts: tuple[Artifact, ...] = field(default=(), compare=False)
    """Artifacts the call returned or attached (their bytes; never part of `to_dict()`)."""

    @classmethod
    def success(cls, result: Any) -> ToolOutcome:
        """Build the outcome of a call that returned `result`.

        Every `Artifact` in the result is replaced by its reference and kept in `artifacts`.
        """
        if isinstance(result, str):
            return cls(ok=True, kind="ok", value=result, text=result)
        try:  # one pass for a result of JSON's own types (an `Artifact` is not one)
            value = _plain_copy(result)
        except _NotPlain:
            value = _NOT_PLAIN
        if value is not _NOT_PLAIN:
            try:
                return cls(ok=True, kind="ok", value=value, text=json_text(value))
            except ValueError:  # an integer too long for decimal text: converted below
                pass
        found: list[Artifact] = []
        result = collect_artifacts(result, found)
        if found:
            outcome = cls.success(result)
            return replace(outcome, artifacts=tuple(found))
        from pydantic_core import to_json, to_jsonable_python

        try:
            value = _finite(to_jsonable_python(result, fallback=repr))
            text = to_json(value).decode()
        except Exception:  # circular references and other unserialisable shapes
            value = text = repr(result)
        return cls(ok=True, kind="ok", value=value, text=text)

    @classmethod
    def resolved(cls, result: Any) -> ToolOutcome:
        """Build the outcome of an uncertain call settled with `result` by `Harness.resolve`."""
        outcome = cls.success(result)
        return cls(ok=True, kind="resolved", value=outcome.value, text=outcome.text)

    @classmethod
    def failure(cls, kind: OutcomeKind, text: str, *, type: str, message: str) -> ToolOutcome:
        """Build a failed outcome: `text` for the model, `type` and `message` for the trace."""
        error = {"type": type, "message": message}
        return cls(ok=False, kind=kind, value=None, text=text, error=error)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form kept in the store."""
        return {
            "ok": self.ok,
            "kind": self.kind,
            "value": self.value,
            "text": self.text,
            "error": None if self.error is None else dict(self.error),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolOutcome:
        """Rebuild an outcome from `to_dict()`'s form; `ValueError` names what does not fit."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a tool outcome must be a mapping, got {_short(data)}")
        kind = data.get("kind")
        if kind not in _KINDS:
            raise ValueError(
                f"tool outcome has kind {kind!r}; expected one of {', '.join(sorted(_KINDS))}"
            )
        ok = data.get("ok", kind in OK_KINDS)
        if ok is not (kind in OK_KINDS):
            raise ValueError(f"tool outcome of kind {kind!r} cannot have ok={ok!r}")
        text = data.get("text")
        if not isinstance(text, str):
            raise ValueError(f"tool outcome text must be a string, got {_short(text)}")
        error = data.get("error")
        if error is not None and not (
            isinstance(error, Mapping)
            and isinstance(error.get("type"), str)
            and isinstance(error.get("message"), str)
        ):
            raise ValueError(f"tool outcome error must be {{type, message}}, got {_short(error)}")
        return cls(
            ok=ok,
            kind=kind,
            value=data.get("value"),
            text=text,
            error=None if error is None else {"type": error["type"], "message": error["message"]},
        )


class _NotPlain(Exception):
    """A result `_plain_copy` leaves to pydantic_core."""


_NOT_PLAIN: Any = object()
_MAX_DEPTH = 64


def _plain_copy(value: Any, depth: int = 0) -> Any:
    """A copy of a result made of JSON's own types, which `json_text` writes as `to_json` does.

    Strings (UTF-8 encodable), integers, booleans, None, finite floats that `repr` writes
    without an exponent (`1e+16` is `1e16` to pydantic_core), lists, and dicts with string keys:
    for these `to_jsonable_python` changes nothing but makes the copy, and the compact JSON of
    both writers is the same text (checked against pydantic_core in the tests). Anything else
    raises `_NotPlain`: pydantic_core converts it (tuples, dataclasses, models, NaN, ...).
    The items of a container that are ASCII strings, integers, booleans or None are taken as
    they are, without a call each (most of a result's leaves).
    """
    cls = type(value)
    if cls is dict:
        if depth >= _MAX_DEPTH:
            raise _NotPlain
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            kind = type(item)
            out[key if key.isascii() else _plain_str(key)] = (
                item
                if kind is int or kind is bool or item is None or (kind is str and item.isascii())
                else _plain_copy(item, depth + 1)
            )
        return out
    if cls is list:
        if depth >= _MAX_DEPTH:
            raise _NotPlain
        return [
            item
            if (kind := type(item)) is int
            or kind is bool
            or item is None
            or (kind is str and item.isascii())
            else _plain_copy(item, depth + 1)
            for item in value
        ]
    if cls is str:
        return _plain_str(value)
    if cls is int or cls is bool or value is None:
        return value
    if cls is float:
        shown = repr(value)
        if "e" in shown or "n" in shown:  # an exponent, inf or nan
            raise _NotPlain
        return value
    raise _NotPlain


def _plain_str(value: str) -> str:
    """`value` when it is UTF-8 encodable (no lone surrogates), else `_NotPlain`."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _NotPlain from None
    return value


def _finite(value: Any) -> Any:
    """`value` with NaN and infinities as the strings `'nan'`, `'inf'`, `'-inf'`.

    The store keeps strict JSON, which has no such numbers: kept as floats, they would make
    the commit of the tool's result fail after the tool ran. An integer too long for decimal
    text (`sys.get_int_max_str_digits()`) becomes its `hex()` string, for the same reason.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, int) and value.bit_length() > _DECIMAL_BITS:
        try:
            str(value)
        except ValueError:  # longer than `sys.get_int_max_str_digits()`: no JSON reads it back
            return hex(value)
        return value
    if isinstance(value, list):
        return [item if type(item) in _EXACT else _finite(item) for item in value]
    if isinstance(value, dict):
        return {key: item if type(item) in _EXACT else _finite(item) for key, item in value.items()}
    return value


_EXACT: frozenset[type] = frozenset({str, bool, type(None)})
"""Types `_finite` gives back as they are (exact types; a float or an int is checked)."""

_DECIMAL_BITS = 14_000
"""Integers up to this many bits have fewer than 4300 digits, `str()`'s default limit."""


def _short(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= _MAX_SHOWN else shown[: _MAX_SHOWN - 3] + "..."
