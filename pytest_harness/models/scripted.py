"""The `scripted` provider: model turns written in advance, for offline runs and tests.

A script is a list of turns (`call`/`calls`/`say`/`usage`/`error`/`delay`, and `incomplete` for an
answer cut at its token limit), inline in the spec,
in a YAML file, or given from Python; or a mapping `{match: [{task, input, turns}, ...]}` that
picks a list of turns by task and input glob. A run's turn is chosen by the number of model
turns the run has already taken, so a run resumed in another process continues its script.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_harness.errors import ModelError, ScriptExhausted, SpecError
from pytest_harness.hookspecs import ProviderConfig
from pytest_harness.models.base import (
    ModelRequest,
    ModelResponse,
    ProposedCall,
    TokenUsage,
    estimate_request_tokens,
    estimate_tokens,
)
from pytest_harness.models.script_turns import TURN_KEYS, ScriptTurn, plain_turn
from pytest_harness.spec.spec import KeyPath, format_key_path, quote_key

__all__ = ["Script", "ScriptTurn", "ScriptedProvider", "parse_script"]


@dataclass(frozen=True, slots=True)
class _Match:
    task: str | None
    input: str | None
    turns: tuple[ScriptTurn, ...]


@dataclass(frozen=True, slots=True)
class Script:
    """Parsed turns: one list for every run, or lists chosen by task and input."""

    turns: tuple[ScriptTurn, ...] = ()
    matches: tuple[_Match, ...] | None = None

    def turns_for(self, task: str, text: str) -> tuple[ScriptTurn, ...] | None:
        """The turns for a run of `task` on input `text`; None when no match entry fits."""
        if self.matches is None:
            return self.turns
        for entry in self.matches:
            if entry.task is not None and entry.task != task:
                continue
            if entry.input is not None and not fnmatch.fnmatchcase(text, entry.input):
                continue
            return entry.turns
        return None


ErrorAt = Callable[[str, KeyPath], SpecError]
"""Builds the `SpecError` for a reason at a key path of the script."""


def _python_error(reason: str, path: KeyPath) -> SpecError:
    return SpecError(reason, file="<script>", key=format_key_path(path) or None)


def parse_script(data: Any, *, error: ErrorAt = _python_error) -> Script:
    """Validate script data (a list of turns or a `match:` mapping) into a `Script`.

    `error` builds the `SpecError` for a problem at a key path of the script, so that it names
    the script's file and line wherever the script came from.
    """
    fail = error

    def turns(items: Any, path: KeyPath) -> tuple[ScriptTurn, ...]:
        if not isinstance(items, list):
            raise fail(f"a script is a list of turns, got {type(items).__name__}", path)
        parsed = []
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise fail(f"a turn is a mapping like {{say: ...}}, got {_kind(item)}", (*path, i))
            turn = plain_turn(item)
            if turn is not None:
                parsed.append(turn)
                continue
            from pydantic import ValidationError

            from pytest_harness.models.script_checks import checked_turn

            try:
                parsed.append(checked_turn(item))
            except ValidationError as exc:
                err = exc.errors()[0]
                loc = tuple(p for p in err["loc"] if isinstance(p, str | int))
                msg = err["msg"].removeprefix("Value error, ")
                if err["type"] == "extra_forbidden":
                    msg = f"unknown key {quote_key(loc[-1])} (a turn has {', '.join(TURN_KEYS)})"
                elif "input" in err and err["type"] != "value_error":
                    msg = f"{msg} (got {err['input']!r})"
                raise fail(msg, (*path, i, *loc)) from None
        return tuple(parsed)

    if isinstance(data, Mapping):
        extra = set(data) - {"match"}
        if extra:
            raise fail(
                f"unknown key {quote_key(sorted(extra)[0])}; a script mapping has only `match`",
                (),
            )
        entries = data.get("match")
        if not isinstance(entries, list):
            raise fail("`match` is a list of {task, input, turns} entries", ("match",))
        matches = []
        for i, entry in enumerate(entries):
            path: KeyPath = ("match", i)
            if not isinstance(entry, Mapping) or "turns" not in entry:
                raise fail("a match entry is a mapping with `turns` (and `task`, `input`)", path)
            unknown = set(entry) - {"task", "input", "turns"}
            if unknown:
                raise fail(f"unknown key {quote_key(sorted(unknown)[0])} in a match entry", path)
            matches.append(
                _Match(
                    task=None if entry.get("task") is None else str(entry["task"]),
                    input=None if entry.get("input") is None else str(entry["input"]),
                    turns=turns(entry["turns"], (*path, "turns")),
                )
            )
        return Script(matches=tuple(matches))
    return Script(turns=turns(data, ()))


def _read_script(folder: Path, path: Path) -> Script:
    """The script in the YAML file `path`, its data from the spec cache when unchanged."""
    from pytest_harness.spec import cache as spec_cache
    from pytest_harness.spec import yamlcache

    data = yamlcache.read(folder, path)
    if data is not yamlcache.MISSING:
        try:
            return parse_script(data)
        except SpecError:  # read the file itself: its error names the line
            pass
    from pytest_harness.spec.yamlio import read_yaml

    sha = spec_cache.file_digest(path)
    doc = read_yaml(path)
    script = parse_script(doc.data, error=doc.error)
    yamlcache.write(folder, path, sha, doc.data)
    return script


class ScriptedProvider:
    """Answers each model request with the next turn of its script."""

    name = "scripted"
    live = False

    def __init__(self, script: Script, *, model_name: str = "scripted") -> None:
        self.script = script
        self.model_name = model_name
        self._answer_tokens: dict[int, int] = {}
        """The estimated output tokens of each turn without `usage`, by the turn's id."""

    @classmethod
    def from_config(cls, config: ProviderConfig) -> ScriptedProvider:
        """Build from a model's `script:` (a file relative to the spec, or inline turns)."""
        where: KeyPath = ("models", config.name, "script")
        raw = config.model.script
        if raw is None:
            raise config.spec.error(
                "a scripted model needs `script:` (a YAML file or a list of turns)", where[:-1]
            )
        if isinstance(raw, str):
            path = config.spec.resolve(raw)
            if not path.exists():  # named where the spec names it; read errors name the file
                raise config.spec.error(f"script file not found: {raw} (looked at {path})", where)
            return cls(_read_script(config.spec.root, path), model_name=config.name)
        spec = config.spec
        script = parse_script(raw, error=lambda reason, path: spec.error(reason, where + path))
        return cls(script, model_name=config.name)

    @classmethod
    def from_turns(cls, turns: Sequence[Mapping[str, Any]] | Mapping[str, Any]) -> ScriptedProvider:
        """Build from turns given in Python (`[{"say": "hi"}]` or `ph.testing.say("hi")`)."""
        data = list(turns) if not isinstance(turns, Mapping) else turns
        return cls(parse_script(data))

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer with turn number `request.turn` of the run's script."""
        turns = self.script.turns_for(request.task, request.input)
        if turns is None:
            raise ScriptExhausted(
                task=request.task,
                turn=request.turn + 1,
                length=0,
                last_request=f"no `match` entry fits task {request.task!r} and input "
                f"{request.input!r}",
            )
        if request.turn >= len(turns):
            raise ScriptExhausted(
                task=request.task,
                turn=request.turn + 1,
                length=len(turns),
                last_request=request.describe(),
            )
        turn = turns[request.turn]
        if turn.delay:
            await asyncio.sleep(turn.delay)
        if turn.error is not None:
            raise ModelError(
                turn.error,
                f"scripted {turn.error} error at turn {request.turn + 1} of task {request.task!r}",
                model=self.model_name,
                retry_after=turn.retry_after,
            )
        calls = turn.proposed_calls(request.turn)
        usage = self._usage(turn, request, calls)
        return ModelResponse(text=turn.say, calls=calls, usage=usage, incomplete=turn.incomplete)

    def retry_delay(self, attempt: int, error: ModelError | None = None) -> float:
        """The turn's `retry_after`, else none: waiting would only slow the tests down."""
        if error is not None and error.retry_after is not None:
            return error.retry_after
        return 0.0

    def _usage(
        self, turn: ScriptTurn, request: ModelRequest, calls: tuple[ProposedCall, ...]
    ) -> TokenUsage:
        """The turn's `usage`, else an estimate (the answer's part is the same every time)."""
        if turn.usage is not None:
            return TokenUsage(turn.usage.input_tokens, turn.usage.output_tokens)
        output = self._answer_tokens.get(id(turn))
        if output is None:
            answer = turn.say or ""
            if calls:
                answer += json.dumps([{"name": c.name, "args": dict(c.args)} for c in calls])
            output = self._answer_tokens[id(turn)] = estimate_tokens(answer)
        return TokenUsage(estimate_request_tokens(request), output)


def _kind(value: Any) -> str:
    """The kind of a value read from a script file, never its content (it may not be ours)."""
    if value is None:
        return "null"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"
