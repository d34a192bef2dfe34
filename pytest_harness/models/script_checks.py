"""Pydantic's check of a script turn `plain_turn` could not take as it is (`models/scripted.py`).

It converts what pydantic converts (`"5"` tokens, a tuple of calls) and words every error;
imported only for such a turn, so a plain script never imports pydantic.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pytest_harness.models.script_turns import (
    Incomplete,
    ModelErrorKind,
    ScriptTurn,
    _CallItem,
    _UsageItem,
    answer_problem,
)
from pytest_harness.spec.schema import Duration

__all__ = ["checked_turn"]


class _CallModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    args: dict[str, Any] = {}


class _UsageModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    input_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)


class _TurnModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    call: str | None = None
    args: dict[str, Any] = {}
    calls: tuple[_CallModel, ...] | None = None
    say: str | None = None
    usage: _UsageModel | None = None
    error: ModelErrorKind | None = None
    retry_after: Duration | None = None
    delay: Duration = 0.0
    incomplete: Incomplete | None = None

    @model_validator(mode="after")
    def _one_answer(self) -> _TurnModel:
        problem = answer_problem(self)
        if problem is not None:
            raise ValueError(problem)
        return self


def checked_turn(item: Any) -> ScriptTurn:
    """`item` validated into a `ScriptTurn`; pydantic's `ValidationError` when it is not one."""
    model = _TurnModel.model_validate(item)
    usage = model.usage
    return ScriptTurn(
        call=model.call,
        args=model.args,
        calls=None
        if model.calls is None
        else tuple(_CallItem(c.name, c.args) for c in model.calls),
        say=model.say,
        usage=None if usage is None else _UsageItem(usage.input_tokens, usage.output_tokens),
        error=model.error,
        retry_after=model.retry_after,
        delay=model.delay,
        incomplete=model.incomplete,
    )
