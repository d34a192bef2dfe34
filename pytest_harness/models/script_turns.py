"""A scripted model turn (`ScriptTurn`), and the check of a turn written plainly, without pydantic.

`parse_script` (`models/scripted.py`) takes each turn through `plain_turn` first: a turn whose
values already have their exact types (a `str` for `say`, an `int` for a token count, a number
or `30s` for a duration, lists and string-keyed mappings) is built here, as pydantic would
build it. Any other turn, and any turn that breaks a rule of `answer_problem`, is None here
and goes to pydantic (`models/script_checks.py`), which converts it or words its error. So a
fresh process that runs a script, cached or inline, does not import pydantic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

from pytest_harness.models.base import ProposedCall
from pytest_harness.spec.schema import parse_duration

__all__ = ["TURN_KEYS", "ScriptTurn", "answer_problem", "plain_turn"]

TURN_KEYS = ("call", "args", "calls", "say", "usage", "error", "retry_after", "delay", "incomplete")
ModelErrorKind = Literal["rate_limit", "server", "timeout", "refusal"]
Incomplete = Literal["max_tokens", "context_window"]


@dataclass(frozen=True, slots=True)
class _CallItem:
    name: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _UsageItem:
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptTurn:
    """One scripted model turn, as `parse_script` checked it."""

    call: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    calls: tuple[_CallItem, ...] | None = None
    say: str | None = None
    usage: _UsageItem | None = None
    error: ModelErrorKind | None = None
    retry_after: float | None = None
    """With `error`: the wait the simulated server asks for before a retry (`Retry-After`)."""
    delay: float = 0.0
    incomplete: Incomplete | None = None
    """The answer was cut short, as a live provider reports it (see `on_truncation`)."""

    def proposed_calls(self, turn: int) -> tuple[ProposedCall, ...]:
        """The tool calls of this turn, with ids stable for the turn number."""
        if self.call is not None:
            return (ProposedCall(id=f"call_{turn}_0", name=self.call, args=dict(self.args)),)
        return tuple(
            ProposedCall(id=f"call_{turn}_{i}", name=c.name, args=dict(c.args))
            for i, c in enumerate(self.calls or ())
        )


_KEYS = frozenset(TURN_KEYS)
_ERRORS = frozenset(get_args(ModelErrorKind))
_INCOMPLETE = frozenset(get_args(Incomplete))
_USAGE_KEYS = frozenset({"input_tokens", "output_tokens"})
_CALL_KEYS = frozenset({"name", "args"})


def answer_problem(turn: Any) -> str | None:
    """What makes a turn's answer impossible (its fields are checked), or None."""
    if turn.call is not None and turn.calls is not None:
        return "a turn has either `call` (one tool call) or `calls` (several)"
    if turn.args and turn.call is None:
        return "`args` belongs to `call`; this turn has no `call`"
    if turn.error is not None and (turn.call or turn.calls or turn.say is not None):
        return "an `error` turn cannot also answer with `say` or tool calls"
    if turn.retry_after is not None and turn.error is None:
        return "`retry_after` belongs to an `error` turn; this turn has no `error`"
    if turn.error is not None and turn.incomplete is not None:
        return "an `error` turn has no answer to be `incomplete`"
    if turn.error is None and turn.call is None and turn.calls is None and turn.say is None:
        return "a turn needs one of `say`, `call`, `calls` or `error`"
    return None


class _Unplain(Exception):
    """A value `plain_turn` leaves to pydantic."""


def plain_turn(item: Any) -> ScriptTurn | None:
    """The turn `item` is, when every value has its exact type and the turn is sound; else None."""
    if type(item) is not dict or not _KEYS.issuperset(item):
        return None
    try:
        turn = ScriptTurn(
            call=_optional_str(item.get("call")),
            args=_arguments(item.get("args", {})),
            calls=_calls(item.get("calls")),
            say=_optional_str(item.get("say")),
            usage=_usage(item.get("usage")),
            error=cast(ModelErrorKind | None, _choice(item.get("error"), _ERRORS)),
            retry_after=_duration(item.get("retry_after")),
            delay=_delay(item),
            incomplete=cast(Incomplete | None, _choice(item.get("incomplete"), _INCOMPLETE)),
        )
    except _Unplain:
        return None
    return None if answer_problem(turn) is not None else turn


def _optional_str(value: Any) -> str | None:
    if value is None or type(value) is str:
        return value
    raise _Unplain


def _choice(value: Any, choices: frozenset[str]) -> str | None:
    if value is None or (type(value) is str and value in choices):
        return value
    raise _Unplain


def _arguments(value: Any) -> dict[str, Any]:
    if type(value) is not dict or not all(type(key) is str for key in value):
        raise _Unplain
    return dict(value)


def _calls(value: Any) -> tuple[_CallItem, ...] | None:
    if value is None:
        return None
    if type(value) is not list:
        raise _Unplain
    calls = []
    for entry in value:
        if type(entry) is not dict or not _CALL_KEYS.issuperset(entry):
            raise _Unplain
        name = entry.get("name")
        if type(name) is not str:
            raise _Unplain
        calls.append(_CallItem(name, _arguments(entry.get("args", {}))))
    return tuple(calls)


def _usage(value: Any) -> _UsageItem | None:
    if value is None:
        return None
    if type(value) is not dict or not _USAGE_KEYS.issuperset(value):
        raise _Unplain
    tokens = (value.get("input_tokens", 0), value.get("output_tokens", 0))
    if not all(type(n) is int and n >= 0 for n in tokens):
        raise _Unplain
    return _UsageItem(*tokens)


def _delay(item: dict[str, Any]) -> float:
    if "delay" not in item:
        return 0.0
    seconds = _duration(item["delay"])
    if seconds is None:  # `delay: null`: pydantic's error
        raise _Unplain
    return seconds


def _duration(value: Any) -> float | None:
    """The seconds, None for none."""
    if value is None:
        return None
    if type(value) not in (int, float, str):
        raise _Unplain
    try:
        return parse_duration(value)
    except (ValueError, OverflowError):
        raise _Unplain from None
