"""Golden recording files: one run per file, UTF-8 YAML meant for git and code review.

The file starts with `format: pytest-harness/recording@2`, its keys come in a fixed order, and
it holds no timestamps, durations, generated ids or spec digest, so re-recording an unchanged
run writes the same bytes and a spec edit touches only the files whose runs it changes.
Multi-line strings are written as literal blocks so a diff reads like prose; numbers are
written as decimals (`0.0000812`, never `8.12e-05`).

Version 2 keeps the system prompt and the tool schemas once, and each model turn's request as
the digests of its three parts (`system`, `tools`, `messages`; and `deny_messages` when those
tell a deny message redaction changes), so a replay can say which part changed. A `@1` file
(one digest per request, and the spec digest) is migrated on load: its turns keep the whole
request's digest, and it is written as `@2` only when it is rewritten.
Credential-shaped keys are redacted before anything is written. Writes are atomic (a temporary
file in the same folder, then a rename), so a crash or two pytest-xdist workers never leave a
half-written file. A file of a newer format is refused, naming both versions; an older one is
migrated on load.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from pytest_harness.errors import ArchiveError, SpecError
from pytest_harness.recording.decisions import TraceDecision
from pytest_harness.recording.parts import ApprovalDecision, ModelTurn, ToolResult
from pytest_harness.runtime.request_digests import DENY_MESSAGES
from pytest_harness.runtime.results import RunStatus
from pytest_harness.runtime.trace import Decision, Trace
from pytest_harness.tools.outcome import OK_KINDS, OutcomeKind

if TYPE_CHECKING:
    from pytest_harness.recording.model import Recording

__all__ = [
    "FORMAT",
    "VERSION",
    "check_recording",
    "dump_recording",
    "recording_fields",
    "write_recording",
]

FORMAT = "pytest-harness/recording"
VERSION = 2
MAX_BYTES = 32 * 1024 * 1024
"""The largest recording file read."""


def _from_v1(data: dict[str, Any]) -> dict[str, Any]:
    """`@1` → `@2`: the spec digest goes; each turn's `request_digest` becomes `request.digest`."""
    data.pop("spec_digest", None)
    turns = data.get("model_turns")
    if isinstance(turns, list):
        for turn in turns:
            if isinstance(turn, dict) and "request_digest" in turn:
                digest = turn.pop("request_digest")
                answer = turn.pop("answer", None)
                turn["request"] = {"digest": digest}
                if answer is not None:
                    turn["answer"] = answer
    return data


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _from_v1}
"""`version → function` turning a file of that version into the next one."""

_FORMAT = re.compile(r"^pytest-harness/recording@(\d+)$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Who(BaseModel):
    """A principal or an approver as `Principal.to_dict` writes it (other keys are kept)."""

    model_config = ConfigDict(extra="allow")
    id: Annotated[str, StringConstraints(min_length=1)]
    roles: list[str] = []
    tenant: str | None = None


class _Error(_Strict):
    type: str
    message: str


class _ToolOutcome(_Strict):
    """A tool outcome as `ToolOutcome.to_dict` writes it."""

    ok: StrictBool | None = None
    kind: OutcomeKind
    value: Any = None
    text: str
    error: _Error | None = None

    @field_validator("ok", mode="before")
    @classmethod
    def _ok_given_is_a_bool(cls, value: Any) -> Any:
        if value is None:  # left out, it follows the kind; given, it is true or false
            raise ValueError("ok is true or false (or left out), got null")
        return value

    @model_validator(mode="after")
    def _ok_fits_the_kind(self) -> _ToolOutcome:
        if self.ok is not None and self.ok is not (self.kind in OK_KINDS):
            raise ValueError(f"an outcome of kind {self.kind!r} cannot have ok: {self.ok}")
        return self


def _given(model: BaseModel) -> dict[str, Any]:
    """The keys the file gave, as it gave them."""
    return model.model_dump(exclude_unset=True)


class _Request(_Strict):
    system: str | None = None
    tools: str | None = None
    messages: str | None = None
    deny_messages: str | None = None
    """Of the deny messages its messages hold that redaction changes (`runtime.request_digests`)."""
    digest: str | None = None
    """The whole request's digest (a turn migrated from `@1`)."""


class _Call(BaseModel):
    """A call the model proposed, as `runtime.model_calls` records it.

    As lenient as what the runtime records: a `function` model's call may have any id (even
    null) and an empty name; the replay plays them back as they were.
    """

    model_config = ConfigDict(extra="allow")
    id: Any
    name: str
    args: dict[str, Any] | None = None


_Count = StrictInt | StrictFloat
"""A token count as recorded: a number (a `function` model may report a fraction), never text
or a boolean, kept as it is."""


class _TokenUsage(BaseModel):
    model_config = ConfigDict(extra="allow")
    input_tokens: _Count = 0
    output_tokens: _Count = 0


class _Answer(BaseModel):
    """A model answer as a replay plays it back.

    An answer (`text`, `calls`, `usage`, ...), a model error (`error`, `message`) or what
    else the model raised (`raised`, `message`).

    Fields in the order the runtime writes them, so an answer it wrote keeps its keys' order
    when loaded (keys it does not write come after them).
    """

    model_config = ConfigDict(extra="allow")
    text: str | None = None
    calls: list[_Call] | None = None
    usage: _TokenUsage | None = None
    thinking: list[dict[str, Any]] | None = None
    incomplete: str | None = None
    error: str | None = None
    raised: str | None = None
    message: str | None = None
    wait: Annotated[StrictInt | StrictFloat, Field(ge=0, allow_inf_nan=False)] | None = None
    """Seconds its provider asked to wait before a retry (a retryable error)."""
    interrupted: Literal["deadline"] | None = None
    """The run's deadline passed during the call: it got no answer, and the run ended there."""


class _Model(_Strict):
    """A model's declaration as `runtime.declared` keeps it (`options` may be `(environment)`)."""

    use: str | None = None
    model: str | None = None
    options: dict[str, Any] | Literal["(environment)"] | None = None
    """`(environment)`: the run's environment set them whole (`runtime.declared.ENVIRONMENT`)."""
    option_digests: dict[str, str] | None = None
    """By option path, of each option value redaction changed, as the spec has it (`kept`)."""


class _Turn(_Strict):
    model: str
    request: _Request
    answer: _Answer


class _Tool(_Strict):
    name: str
    args: dict[str, Any]
    outcome: _ToolOutcome


class _Approval(_Strict):
    tool: str
    args: dict[str, Any]
    rule: str | None
    decision: Literal["approve", "decline"]
    approver: _Who
    reason: str | None = None


class _Control(_Strict):
    action: Literal["cancel", "pause"]
    status: RunStatus
    """What the run had stopped at when the control took effect (`awaiting_approval`)."""
    step: Annotated[StrictInt, Field(ge=0)]


class _Outcome(_Strict):
    status: RunStatus
    output: str | None = None
    error: dict[str, str] | None = None
    limit: str | None = None
    usage: dict[str, Any] = {}
    control: _Control | None = None
    """A `cancel()` or `pause()` that ended the run where it had stopped (absent: none)."""


class _Grade(_Strict):
    grader: str
    score: float | None = None
    passed: bool
    detail: str | None = None
    error: str | None = None


class _File(_Strict):
    format: str
    task: str
    input: str
    principal: _Who
    tenant: str | None = None
    labels: dict[str, str] = {}
    given_labels: dict[str, str] | None = None
    history: list[dict[str, Any]] = []
    system: str | None = None
    tool_schemas: list[dict[str, Any]] | None = None
    models: dict[str, _Model] | None = None
    model_turns: list[_Turn] = []
    tool_results: list[_Tool] = []
    approvals: list[_Approval] = []
    outcome: _Outcome
    trace: list[TraceDecision] = []
    grades: list[_Grade] = []


def recording_fields(path: Path) -> dict[str, Any]:
    """A golden file's `Recording` fields (`Recording.load` makes the recording).

    `ArchiveError` naming the file (and line) when it is malformed.

    A current-format file that is plain YAML (what `write_recording` writes) is read on the
    fast path, without line tracking; any other file, and any file that fails validation,
    is read again with lines (`_read_strict`), which migrates it or names the problem's line.
    """
    from pytest_harness.spec.yamlio import display_path, read_text

    file = display_path(path)
    try:
        text = read_text(path, file=file, max_bytes=MAX_BYTES)
        parsed = _read_fast(text)
        if parsed is None:
            parsed = _read_strict(text, file)
    except SpecError as exc:
        raise ArchiveError(f"bad recording file {exc}") from None
    outcome = parsed.outcome
    return dict(
        task=parsed.task,
        input=parsed.input,
        principal=_given(parsed.principal),
        tenant=parsed.tenant,
        labels=parsed.labels,
        given_labels=parsed.given_labels,
        history=tuple(parsed.history),
        system=parsed.system,
        tool_schemas=None if parsed.tool_schemas is None else tuple(parsed.tool_schemas),
        models=(
            None
            if parsed.models is None
            else {name: _given(model) for name, model in parsed.models.items()}
        ),
        model_turns=tuple(_turn(t) for t in parsed.model_turns),
        tool_results=tuple(
            ToolResult(name=t.name, args=t.args, outcome=_given(t.outcome))
            for t in parsed.tool_results
        ),
        approvals=tuple(
            ApprovalDecision(
                tool=a.tool,
                args=a.args,
                rule=a.rule,
                decision=a.decision,
                approver=_given(a.approver),
                reason=a.reason,
            )
            for a in parsed.approvals
        ),
        status=outcome.status.value,
        output=outcome.output,
        error=outcome.error,
        limit=outcome.limit,
        usage=outcome.usage,
        control=None
        if outcome.control is None
        else {**outcome.control.model_dump(), "status": outcome.control.status.value},
        trace=Trace(
            [Decision(step=d.step, kind=d.kind, key=d.key, detail=d.detail) for d in parsed.trace]
        ),
        grades=tuple(g.model_dump() for g in parsed.grades),
        source=path,
    )


_CURRENT = f"{FORMAT}@{VERSION}"


def check_recording(data: dict[str, Any], file: str) -> None:
    """Check a recording's golden form (`Recording.to_dict`) as a golden file is checked.

    For recordings made from records that no golden file checked (a `.hx` archive's): an
    `ArchiveError` naming `file` and the first key whose value a replay could not play back
    (`incident.hx: its records do not make a recording: model_turns[1].answer.calls[0]:
    missing required key 'name'`).
    """
    from pytest_harness.spec.where import Where, validate_at
    from pytest_harness.spec.yamlio import YamlDoc

    try:
        validate_at(_File, data, Where(YamlDoc(data=data, lines={}, file=file)))
    except SpecError as exc:
        where = f"{exc.key}: " if exc.key else ""
        raise ArchiveError(
            f"{file}: its records do not make a recording: {where}{exc.reason}"
        ) from None


def _read_fast(text: str) -> _File | None:
    """The file's content when it is plain YAML in the current format and valid; else None.

    Read line by line when it is the block YAML `dump_recording` writes (`block_yaml`), else
    from libyaml's events (`plain_yaml`); the strict reader answers for anything else.
    """
    from pytest_harness.spec.yamlio import NOT_PLAIN, plain_yaml
    from pytest_harness.spec.yamllines import block_yaml

    data = block_yaml(text, max_bytes=MAX_BYTES)
    if data is NOT_PLAIN:
        data = plain_yaml(text, max_bytes=MAX_BYTES)
    if data is NOT_PLAIN or not isinstance(data, dict) or data.get("format") != _CURRENT:
        return None
    try:
        return _File.model_validate(data)
    except ValidationError:
        return None


def _read_strict(text: str, file: str) -> _File:
    """The file's content, read with the line of every key: a `SpecError` names the line."""
    from pytest_harness.spec.where import validate_yaml
    from pytest_harness.spec.yamlio import parse_yaml

    doc = parse_yaml(text, file=file, max_bytes=MAX_BYTES)
    data = doc.data
    if not isinstance(data, dict):
        raise doc.error("a recording file is a mapping starting with `format:`", ())
    _check_format(data, doc.error)
    return validate_yaml(_File, doc)


def _turn(turn: _Turn) -> ModelTurn:
    request = turn.request
    answer = _given(turn.answer)
    parts = {"system": request.system, "tools": request.tools, "messages": request.messages}
    if all(isinstance(v, str) for v in parts.values()):
        full = {k: str(v) for k, v in parts.items()}
        if request.deny_messages is not None:
            full[DENY_MESSAGES] = request.deny_messages
        return ModelTurn(model=turn.model, digest=request.digest or "", answer=answer, parts=full)
    return ModelTurn(model=turn.model, digest=request.digest or "", answer=answer)


def _check_format(data: dict[str, Any], error: Callable[[str, Any], SpecError]) -> None:
    value = data.get("format")
    match = _FORMAT.match(value) if isinstance(value, str) else None
    if match is None:
        raise error(
            f"format must be '{FORMAT}@{VERSION}', got {value!r}", ("format",) if value else ()
        )
    version = int(match.group(1))
    if version > VERSION:
        raise error(
            f"this file is {FORMAT}@{version}, newer than this pytest-harness reads "
            f"({FORMAT}@{VERSION}); upgrade pytest-harness",
            ("format",),
        )
    while version < VERSION:
        migrate = MIGRATIONS.get(version)
        if migrate is None:
            raise error(f"no migration from {FORMAT}@{version} to @{VERSION}", ("format",))
        data.update(migrate(data))
        version += 1
        data["format"] = f"{FORMAT}@{version}"


def dump_recording(recording: Recording) -> str:
    """The golden text of a recording (redacted, fixed key order, stable ids)."""
    data = recording.redacted().to_dict()
    return yaml.dump(
        data,
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )


def write_recording(recording: Recording, path: Path, *, overwrite: bool = False) -> Path:
    """Write a golden file atomically; `FileExistsError` for an existing one unless `overwrite`."""
    text = dump_recording(recording)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True to replace it")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            _publish_new(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _publish_new(tmp: str, path: Path) -> None:
    """Move `tmp` to `path` unless `path` exists, even if another writer races us."""
    try:
        os.link(tmp, path)  # atomic and refuses an existing name
    except FileExistsError:
        raise FileExistsError(f"{path} exists; pass overwrite=True to replace it") from None
    except OSError:  # a filesystem without hard links
        if path.exists():
            raise FileExistsError(f"{path} exists; pass overwrite=True to replace it") from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


class _Dumper(yaml.SafeDumper):
    """Safe YAML with literal blocks for multi-line strings."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _float(dumper: yaml.SafeDumper, value: float) -> yaml.ScalarNode:
    """A float as a plain decimal (`0.0000812`), which YAML reads back as the same float."""
    if not math.isfinite(value):
        return dumper.represent_float(value)
    text = format(Decimal(repr(value)), "f")
    if "." not in text:
        text += ".0"
    return dumper.represent_scalar("tag:yaml.org,2002:float", text)


_Dumper.add_representer(str, _str)
_Dumper.add_representer(float, _float)
