"""Golden recording files: one run per file, UTF-8 YAML meant for git and code review.

The file starts with `format: pytest-harness/recording@1`, its keys come in a fixed order, and
it holds no timestamps, durations or generated ids, so re-recording an unchanged run writes the
same bytes. Multi-line strings are written as literal blocks so a diff reads like prose.
Credential-shaped keys are redacted before anything is written. Writes are atomic (a temporary
file in the same folder, then a rename), so a crash or two pytest-xdist workers never leave a
half-written file. A file of a newer format is refused, naming both versions; an older one is
migrated on load.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict

from pytest_harness.errors import ArchiveError, SpecError
from pytest_harness.recording.model import ApprovalDecision, ModelTurn, Recording, ToolResult
from pytest_harness.runtime.results import RunStatus
from pytest_harness.runtime.trace import Trace

__all__ = ["FORMAT", "VERSION", "dump_recording", "read_recording", "write_recording"]

FORMAT = "pytest-harness/recording"
VERSION = 1
MAX_BYTES = 32 * 1024 * 1024
"""The largest recording file read."""

MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}
"""`version → function` turning a file of that version into the next one."""

_FORMAT = re.compile(r"^pytest-harness/recording@(\d+)$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Turn(_Strict):
    model: str
    request_digest: str
    answer: dict[str, Any]


class _Tool(_Strict):
    name: str
    args: dict[str, Any]
    outcome: dict[str, Any]


class _Approval(_Strict):
    tool: str
    args: dict[str, Any]
    rule: str | None
    decision: Literal["approve", "decline"]
    approver: dict[str, Any]
    reason: str | None = None


class _Outcome(_Strict):
    status: RunStatus
    output: str | None = None
    error: dict[str, str] | None = None
    limit: str | None = None
    usage: dict[str, Any] = {}


class _Decision(_Strict):
    step: int
    kind: str
    key: str
    detail: dict[str, Any] = {}


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
    principal: dict[str, Any]
    tenant: str | None = None
    labels: dict[str, str] = {}
    spec_digest: str = ""
    history: list[dict[str, Any]] = []
    model_turns: list[_Turn] = []
    tool_results: list[_Tool] = []
    approvals: list[_Approval] = []
    outcome: _Outcome
    trace: list[_Decision] = []
    grades: list[_Grade] = []


def read_recording(path: Path) -> Recording:
    """Load a golden file; `ArchiveError` naming the file (and line) when it is malformed."""
    from pytest_harness.spec.loader import validate_yaml
    from pytest_harness.spec.yamlio import read_yaml

    try:
        doc = read_yaml(path, max_bytes=MAX_BYTES)
        data = doc.data
        if not isinstance(data, dict):
            raise doc.error("a recording file is a mapping starting with `format:`", ())
        _check_format(data, doc.error)
        parsed = validate_yaml(_File, doc)
    except SpecError as exc:
        raise ArchiveError(f"bad recording file {exc}") from None
    outcome = parsed.outcome
    return Recording(
        task=parsed.task,
        input=parsed.input,
        principal=parsed.principal,
        tenant=parsed.tenant,
        labels=parsed.labels,
        spec_digest=parsed.spec_digest,
        history=tuple(parsed.history),
        model_turns=tuple(
            ModelTurn(model=t.model, digest=t.request_digest, answer=t.answer)
            for t in parsed.model_turns
        ),
        tool_results=tuple(
            ToolResult(name=t.name, args=t.args, outcome=t.outcome) for t in parsed.tool_results
        ),
        approvals=tuple(
            ApprovalDecision(
                tool=a.tool,
                args=a.args,
                rule=a.rule,
                decision=a.decision,
                approver=a.approver,
                reason=a.reason,
            )
            for a in parsed.approvals
        ),
        status=outcome.status.value,
        output=outcome.output,
        error=outcome.error,
        limit=outcome.limit,
        usage=outcome.usage,
        trace=Trace.from_list([d.model_dump() for d in parsed.trace]),
        grades=tuple(g.model_dump() for g in parsed.grades),
        source=path,
    )


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


_Dumper.add_representer(str, _str)
