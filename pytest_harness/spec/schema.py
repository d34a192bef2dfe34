"""The schema of `harness.yaml` (DESIGN §3), as pydantic models.

Unknown keys are errors (`extra="forbid"`); every model is frozen. Cross-references (a task's
tools, rules and guards; a model's fallbacks) and CEL are checked by the loader, which knows the
lines to point at.
"""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

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


Duration = Annotated[float, BeforeValidator(parse_duration)]
"""Seconds, written as `30s`, `5m`, `2h` or a number."""


def _positive(seconds: float) -> float:
    if seconds <= 0:
        raise ValueError("must be more than zero seconds")
    return seconds


PositiveDuration = Annotated[float, BeforeValidator(parse_duration), AfterValidator(_positive)]
"""A `Duration` that must be more than zero."""

DEFAULT_RETRY_BUDGET = 300.0
"""Seconds of retry waits one run may spend on one model (`models.<name>.retry_budget`)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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


class Price(_Strict):
    """Dollars per million tokens."""

    input_per_mtok: float = Field(default=0.0, ge=0)
    output_per_mtok: float = Field(default=0.0, ge=0)


class ModelSpec(_Strict):
    """A model: its provider (`use`) and the provider's settings."""

    use: str
    model: str | None = None
    api_key_env: str | None = None
    base_url: str | None = None
    price: Price = Price()
    retries: int = Field(default=2, ge=0, le=20)
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
    options: dict[str, Any] = {}
    """Extra request fields for live providers (`max_tokens`, `temperature`, …); plugin settings."""
    on_truncation: OnTruncation = OnTruncation.FAIL
    """What a run does with an answer cut at its token limit: `fail`, `continue` or `accept`."""


class ToolSpec(_Strict):
    """A tool: the Python callable behind it and what recovery may do with it."""

    call: str
    replay: ReplayPolicy = ReplayPolicy.MANUAL
    timeout: Duration | None = None
    description: str | None = None


class RuleSpec(_Strict):
    """A CEL condition on a proposed tool call, with its effect."""

    id: str
    when: str
    then: Effect
    approvers: tuple[str, ...] = ()
    self_approve: bool = False
    message: str | None = None
    """What the model is told when the rule denies a call."""


class GuardSpec(_Strict):
    """A check on the input, the output or a tool result, with its action."""

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
    max: int | None = Field(default=None, ge=0)
    """`max_length`: the most characters allowed."""
    schema_: dict[str, Any] | str | None = Field(default=None, alias="schema")
    """`json_schema`: the schema inline, or a JSON/YAML file relative to the spec."""
    when: str | None = None
    """`cel`: fires when this expression is true (variables `text`, `on`, `task`, `tool`, …)."""
    tools: tuple[str, ...] | None = None
    """`tool_result`: only the results of these tools (default: every tool)."""
    message: str | None = None


class Budget(_Strict):
    """Limits of one run; a run that reaches one ends `limited`."""

    steps: int | None = Field(default=None, ge=1)
    tokens: int | None = Field(default=None, ge=1)
    usd: float | None = Field(default=None, gt=0)
    tool_calls: int | None = Field(default=None, ge=0)


class TaskSpec(_Strict):
    """A named job: prompt, model, tools, rules, guards, budget, deadline."""

    prompt: str
    model: str = "default"
    tools: tuple[str, ...] = ()
    rules: tuple[str, ...] | None = None
    """Rule ids that apply; omitted: every rule."""
    guards: tuple[str, ...] | None = None
    """Guard ids that apply; omitted: every guard."""
    budget: Budget = Budget()
    deadline: Duration | None = None
    labels: dict[str, str] = {}


class PoolSpec(_Strict):
    """The connection pool of a server store (`state.pool`): at least `min`, at most `max`."""

    min: int = Field(default=1, ge=0)
    max: int = Field(default=10, ge=1)


class StateSpec(_Strict):
    """Where runs are kept.

    `path`, `synchronous` and `busy_timeout` are sqlite's; `dsn_env`, `schema` and `pool` are
    postgres's (the DSN itself is read from the environment variable `dsn_env`, never from the
    spec). `lease` is every durable store's.
    """

    use: str = "memory"
    path: str = ".harness/state.db"
    dsn_env: str = "DATABASE_URL"
    schema_name: str = Field(default="harness", alias="schema")
    pool: PoolSpec = PoolSpec()
    record: bool = False
    lease: Duration = 30.0
    synchronous: Literal["full", "normal"] = "full"
    busy_timeout: Duration = 5.0


class ExecutionSpec(_Strict):
    """Where runs execute (DESIGN §14): the built-in loop over the store, or Temporal."""

    use: Literal["local", "temporal"] = "local"
    address: str = "127.0.0.1:7233"
    """`temporal`: the frontend's `host:port`."""
    namespace: str = "default"
    task_queue: str = "pytest-harness"


class GraderTarget(str, Enum):
    """What a grader looks at: the run's output, or its trace rendered as text."""

    OUTPUT = "output"
    TRACE = "trace"


class GraderSpec(_Strict):
    """An online eval grader (DESIGN §15): a check on an ended run, scored 0..1."""

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
    max: int | None = Field(default=None, ge=0)
    """`max_length`: passes when the text has at most this many characters."""
    schema_: dict[str, Any] | str | None = Field(default=None, alias="schema")
    """`json_schema`: passes when the text is JSON valid against this schema (inline or a file)."""
    when: str | None = None
    """`cel`: passes when this expression is true (the variables of a `cel` guard)."""
    call: str | None = None
    """`callable`: `module:function` called with the `RunResult`; returns a bool or a float."""
    model: str | None = None
    """`model`: the judge, a model of `models:`."""
    prompt: str | None = None
    """`model`: the judge's instructions; it answers with a score."""
    pass_at: float = Field(default=0.5, ge=0, le=1)
    """A score at or above this passes."""
    tasks: tuple[str, ...] | None = None
    """Only the runs of these tasks (default: every task)."""
    options: dict[str, Any] = {}
    """Settings of a check a plugin adds (`harness_graders`)."""
    timeout: Duration = 60.0
    """A grade that takes longer is recorded as an error."""


class OnlineEvalsSpec(_Strict):
    """`evals.online`: which ended runs are graded, and by what."""

    sample: float = Field(default=1.0, ge=0, le=1)
    """The share of ended runs graded, chosen by a hash of the run id."""
    graders: tuple[GraderSpec, ...] = ()


class EvalsSpec(_Strict):
    """`evals:`."""

    online: OnlineEvalsSpec = OnlineEvalsSpec()


class SpecDocument(_Strict):
    """The whole `harness.yaml` after the environment overlay and the org baseline."""

    version: Literal[1]
    name: str
    models: dict[str, ModelSpec] = {}
    tools: dict[str, ToolSpec] = {}
    rules: tuple[RuleSpec, ...] = ()
    guards: tuple[GuardSpec, ...] = ()
    tasks: dict[str, TaskSpec]
    state: StateSpec = StateSpec()
    execution: ExecutionSpec = ExecutionSpec()
    evals: EvalsSpec = EvalsSpec()
    environments: dict[str, dict[str, Any]] = {}
    baseline: str | None = None


def resolve_path(base: Path, value: str) -> Path:
    """A path from the spec, resolved against the spec file's folder when relative."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else (base / path)
