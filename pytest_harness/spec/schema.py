"""The schema of `harness.yaml` (DESIGN §3): frozen dataclasses and enums, no pydantic.

These classes are what the runtime reads. They import nothing but the standard library, so a
process that takes its spec from the spec cache (`spec.cache`) never imports pydantic. The
loader validates a document into them with pydantic (`spec.validation`), which reads the
constraints written here as `Annotated` metadata ([`Min`][], [`Max`][], [`DURATION`][], …) and
each class's `__pydantic_config__`: unknown keys are errors (`extra="forbid"`), and a field
whose name ends in `_` or is `schema_name` is written `schema` in the file. Cross-references (a
task's tools, rules and guards; a model's fallbacks) and CEL are checked by the loader, which
knows the lines to point at.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal

__all__ = [
    "DEFAULT_RETRY_BUDGET",
    "Budget",
    "Duration",
    "Effect",
    "EvalsSpec",
    "GraderSpec",
    "GraderTarget",
    "GuardAction",
    "GuardSpec",
    "GuardTarget",
    "ModelSpec",
    "OnTruncation",
    "OnlineEvalsSpec",
    "PoolSpec",
    "PositiveDuration",
    "Price",
    "ReplayPolicy",
    "RuleSpec",
    "SpecDocument",
    "StateSpec",
    "TaskSpec",
    "ToolSpec",
    "parse_duration",
]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """Seconds from `30s`, `5m`, `2h`, `250ms`, `1d` or a number of seconds."""
    if isinstance(value, bool):
        raise ValueError(
            f"a duration must be like 30s, 5m, 2h or a number of seconds, not {value!r}"
        )
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
    else:
        raise ValueError(
            f"a duration must be like 30s, 5m, 2h or a number of seconds, not {value!r}"
        )
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative, got {value!r}")
    return seconds


def _positive(seconds: float) -> float:
    if seconds <= 0:
        raise ValueError("must be more than zero seconds")
    return seconds


class _Check:
    """`Annotated` metadata: a function pydantic runs on the value before or after its type.

    Pydantic finds `__get_pydantic_core_schema__` on metadata by name, so declaring a check
    imports nothing; `pydantic_core` is imported when a schema is built (validation only).
    """

    __slots__ = ("after", "function")

    def __init__(self, function: Callable[[Any], Any], *, after: bool = False) -> None:
        self.function = function
        self.after = after

    def __get_pydantic_core_schema__(self, source: Any, handler: Callable[[Any], Any]) -> Any:
        from pydantic_core import core_schema

        inner = handler(source)
        if self.after:
            return core_schema.no_info_after_validator_function(self.function, inner)
        return core_schema.no_info_before_validator_function(self.function, inner)


class _Bound:
    """`Annotated` metadata: a numeric bound (`ge`, `gt` or `le`), applied by pydantic."""

    __slots__ = ("op", "value")

    def __init__(self, op: Literal["ge", "gt", "le"], value: float) -> None:
        self.op = op
        self.value = value

    def __get_pydantic_core_schema__(self, source: Any, handler: Callable[[Any], Any]) -> Any:
        import annotated_types

        bound = {"ge": annotated_types.Ge, "gt": annotated_types.Gt, "le": annotated_types.Le}
        return handler(Annotated[source, bound[self.op](self.value)])


def Min(value: float) -> _Bound:
    """At least `value`."""
    return _Bound("ge", value)


def Max(value: float) -> _Bound:
    """At most `value`."""
    return _Bound("le", value)


def Above(value: float) -> _Bound:
    """More than `value`."""
    return _Bound("gt", value)


DURATION = _Check(parse_duration)
"""`Annotated` metadata: the value is read with [`parse_duration`][]."""
POSITIVE = _Check(_positive, after=True)
"""`Annotated` metadata: the seconds must be more than zero."""

Duration = Annotated[float, DURATION]
"""Seconds, written as `30s`, `5m`, `2h` or a number."""

PositiveDuration = Annotated[float, DURATION, POSITIVE]
"""A `Duration` that must be more than zero."""


def alias(name: str) -> str:
    """The key a field is written as in the file: `schema` for `schema_` and `schema_name`."""
    return "schema" if name in ("schema_", "schema_name") else name


STRICT: dict[str, Any] = {"extra": "forbid", "alias_generator": alias}
"""Pydantic's config of every spec class (a plain dict: `ConfigDict` is a `TypedDict`)."""

_spec = dataclass(frozen=True, kw_only=True)

DEFAULT_RETRY_BUDGET = 300.0
"""Seconds of retry waits one run may spend on one model (`models.<name>.retry_budget`)."""


class OnTruncation(str, Enum):
    """What a run does with a model answer cut at its output token limit."""

    FAIL = "fail"
    """End the run `failed` with `ModelTruncated` (the default)."""
    CONTINUE = "continue"
    """Ask the model to continue where it stopped; the pieces of text are joined."""
    ACCEPT = "accept"
    """Use the answer as it is; the model decision and the usage still say it was cut."""


class ReplayPolicy(str, Enum):
    """What recovery may do with a tool call whose outcome is unknown."""

    MANUAL = "manual"
    SAFE = "safe"
    IDEMPOTENT = "idempotent"


class Effect(str, Enum):
    """What a matching rule does with a proposed tool call."""

    ALLOW = "allow"
    APPROVE = "approve"
    DENY = "deny"


class GuardTarget(str, Enum):
    """What a guard checks."""

    INPUT = "input"
    OUTPUT = "output"
    TOOL_RESULT = "tool_result"


class GuardAction(str, Enum):
    """What a guard does when its check fires."""

    BLOCK = "block"
    REDACT = "redact"
    WARN = "warn"


@dataclass(frozen=True, kw_only=True)
class Price:
    """Dollars per million tokens."""

    __pydantic_config__ = STRICT

    input_per_mtok: Annotated[float, Min(0)] = 0.0
    output_per_mtok: Annotated[float, Min(0)] = 0.0


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A model: its provider (`use`) and the provider's settings."""

    __pydantic_config__ = STRICT

    use: str
    model: str | None = None
    api_key_env: str | None = None
    base_url: str | None = None
    price: Price = Price()
    retries: Annotated[int, Min(0), Max(20)] = 2
    retry_budget: PositiveDuration = DEFAULT_RETRY_BUDGET
    """Seconds of retry waits (backoff, `Retry-After`) one run may spend on this model, counted
    across processes: a resumed run continues with what is left."""
    fallback: tuple[str, ...] = ()
    timeout: Duration | None = None
    first_event_timeout: PositiveDuration | None = None
    """Seconds an attempt may wait for its first byte (its first event when streamed); an
    attempt that gets none fails as a `timeout`. None: only `timeout` applies."""
    script: str | list[Any] | dict[str, Any] | None = None
    """`scripted`: a script file (relative to the spec) or the turns inline."""
    call: str | None = None
    """`function`: `module:function` called with each `ModelRequest`."""
    options: dict[str, Any] = field(default_factory=dict)
    """Extra request fields for live providers (`max_tokens`, `temperature`, …); plugin settings."""
    on_truncation: OnTruncation = OnTruncation.FAIL
    """What a run does with an answer cut at its token limit: `fail`, `continue` or `accept`."""


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """A tool: the Python callable behind it and what recovery may do with it."""

    __pydantic_config__ = STRICT

    call: str
    replay: ReplayPolicy = ReplayPolicy.MANUAL
    timeout: Duration | None = None
    description: str | None = None


@dataclass(frozen=True, kw_only=True)
class RuleSpec:
    """A CEL condition on a proposed tool call, with its effect."""

    __pydantic_config__ = STRICT

    id: str
    when: str
    then: Effect
    approvers: tuple[str, ...] = ()
    self_approve: bool = False
    message: str | None = None
    """What the model is told when the rule denies a call."""


@dataclass(frozen=True, kw_only=True)
class GuardSpec:
    """A check on the input, the output or a tool result, with its action."""

    __pydantic_config__ = STRICT

    id: str
    on: GuardTarget
    check: str
    """`regex`, `contains`, `max_length`, `json_schema`, `cel`, or a callable `pkg.mod:fn`."""
    action: GuardAction = GuardAction.BLOCK
    pattern: str | None = None
    """`regex`: the pattern searched for."""
    text: str | tuple[str, ...] | None = None
    """`contains`: the text (or any of the texts) searched for."""
    ignore_case: bool = False
    max: Annotated[int, Min(0)] | None = None
    """`max_length`: the most characters allowed."""
    schema_: dict[str, Any] | str | None = None
    """`json_schema`: the schema inline, or a JSON/YAML file relative to the spec."""
    when: str | None = None
    """`cel`: fires when this expression is true (variables `text`, `on`, `task`, `tool`, …)."""
    tools: tuple[str, ...] | None = None
    """`tool_result`: only the results of these tools (default: every tool)."""
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class Budget:
    """Limits of one run; a run that reaches one ends `limited`."""

    __pydantic_config__ = STRICT

    steps: Annotated[int, Min(1)] | None = None
    tokens: Annotated[int, Min(1)] | None = None
    usd: Annotated[float, Above(0)] | None = None
    tool_calls: Annotated[int, Min(0)] | None = None


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """A named job: prompt, model, tools, rules, guards, budget, deadline."""

    __pydantic_config__ = STRICT

    prompt: str
    model: str = "default"
    tools: tuple[str, ...] = ()
    rules: tuple[str, ...] | None = None
    """Rule ids that apply; omitted: every rule."""
    guards: tuple[str, ...] | None = None
    """Guard ids that apply; omitted: every guard."""
    budget: Budget = Budget()
    deadline: Duration | None = None
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class PoolSpec:
    """The connection pool of a server store (`state.pool`): at least `min`, at most `max`."""

    __pydantic_config__ = STRICT

    min: Annotated[int, Min(0)] = 1
    max: Annotated[int, Min(1)] = 10


@dataclass(frozen=True, kw_only=True)
class StateSpec:
    """Where runs are kept.

    `path`, `synchronous` and `busy_timeout` are sqlite's; `dsn_env`, `schema` and `pool` are
    postgres's (the DSN itself is read from the environment variable `dsn_env`, never from the
    spec). `lease` is every durable store's.
    """

    __pydantic_config__ = STRICT

    use: str = "memory"
    path: str = ".harness/state.db"
    dsn_env: str = "DATABASE_URL"
    schema_name: str = "harness"
    pool: PoolSpec = PoolSpec()
    record: bool = False
    lease: Duration = 30.0
    synchronous: Literal["full", "normal"] = "full"
    busy_timeout: Duration = 5.0


@dataclass(frozen=True, kw_only=True)
class ExecutionSpec:
    """Where runs execute (DESIGN §14): the built-in loop over the store, or Temporal."""

    __pydantic_config__ = STRICT

    use: Literal["local", "temporal"] = "local"
    address: str = "127.0.0.1:7233"
    """`temporal`: the frontend's `host:port`."""
    namespace: str = "default"
    task_queue: str = "pytest-harness"


class GraderTarget(str, Enum):
    """What a grader looks at: the run's output, or its trace rendered as text."""

    OUTPUT = "output"
    TRACE = "trace"


@dataclass(frozen=True, kw_only=True)
class GraderSpec:
    """An online eval grader (DESIGN §15): a check on an ended run, scored 0..1."""

    __pydantic_config__ = STRICT

    id: str
    on: GraderTarget = GraderTarget.OUTPUT
    check: str
    """`regex`, `contains`, `max_length`, `json_schema`, `cel`, `callable`, `model`, or a
    check a plugin adds through `harness_graders`."""
    pattern: str | None = None
    """`regex`: passes when the pattern is found."""
    text: str | tuple[str, ...] | None = None
    """`contains`: passes when the text (or any of the texts) is found."""
    ignore_case: bool = False
    max: Annotated[int, Min(0)] | None = None
    """`max_length`: passes when the text has at most this many characters."""
    schema_: dict[str, Any] | str | None = None
    """`json_schema`: passes when the text is JSON valid against this schema (inline or a file)."""
    when: str | None = None
    """`cel`: passes when this expression is true (the variables of a `cel` guard)."""
    call: str | None = None
    """`callable`: `module:function` called with the `RunResult`; returns a bool or a float."""
    model: str | None = None
    """`model`: the judge, a model of `models:`."""
    prompt: str | None = None
    """`model`: the judge's instructions; it answers with a score."""
    pass_at: Annotated[float, Min(0), Max(1)] = 0.5
    """A score at or above this passes."""
    tasks: tuple[str, ...] | None = None
    """Only the runs of these tasks (default: every task)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Settings of a check a plugin adds (`harness_graders`)."""
    timeout: Duration = 60.0
    """A grade that takes longer is recorded as an error."""


@dataclass(frozen=True, kw_only=True)
class OnlineEvalsSpec:
    """`evals.online`: which ended runs are graded, and by what."""

    __pydantic_config__ = STRICT

    sample: Annotated[float, Min(0), Max(1)] = 1.0
    """The share of ended runs graded, chosen by a hash of the run id."""
    graders: tuple[GraderSpec, ...] = ()


@dataclass(frozen=True, kw_only=True)
class EvalsSpec:
    """`evals:`."""

    __pydantic_config__ = STRICT

    online: OnlineEvalsSpec = OnlineEvalsSpec()


@dataclass(frozen=True, kw_only=True)
class SpecDocument:
    """The whole `harness.yaml` after the environment overlay and the org baseline."""

    __pydantic_config__ = STRICT

    version: Literal[1]
    name: str
    models: dict[str, ModelSpec] = field(default_factory=dict)
    tools: dict[str, ToolSpec] = field(default_factory=dict)
    rules: tuple[RuleSpec, ...] = ()
    guards: tuple[GuardSpec, ...] = ()
    tasks: dict[str, TaskSpec]
    state: StateSpec = StateSpec()
    execution: ExecutionSpec = ExecutionSpec()
    evals: EvalsSpec = EvalsSpec()
    environments: dict[str, dict[str, Any]] = field(default_factory=dict)
    baseline: str | None = None


def resolve_path(base: Path, value: str) -> Path:
    """A path from the spec, resolved against the spec file's folder when relative."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else (base / path)
