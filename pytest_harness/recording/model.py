"""`Recording`: everything needed to replay one run.

A recording holds the run's input, principal, tenant and labels, the conversation of its session
before it, every model turn (the request's digest, and its content while it is in the store)
with the answer used, every tool result, every approval decision, and the outcome: status,
output, error, limit, usage and trace; and the grades of the spec's online eval graders on that
outcome, when it has any (`grades`, written by `evals.replay`). It is derived from a recorded
run's journal, the one source of truth (`Recording.from_store`, `Recording.from_journal`), or
loaded from a golden file or a `.hx` archive exported with payloads (`Recording.load`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_harness.errors import HarnessError, RecordingError
from pytest_harness.recording.kept import OPTION_DIGESTS, kept_models, kept_trace
from pytest_harness.recording.parts import ApprovalDecision, ModelTurn, ToolResult
from pytest_harness.redaction import redact, redact_schema, stable_ids
from pytest_harness.runtime.declared import DECLARED
from pytest_harness.runtime.trace import Decision, Trace
from pytest_harness.store.base import JournalEntry, RunRecord, Store

__all__ = [
    "DERIVED_FROM",
    "STORED_FROM",
    "ApprovalDecision",
    "ModelTurn",
    "Recording",
    "ToolResult",
]


REQUEST_PARTS = ("system", "tools", "messages")
"""The parts of a model request, each recorded by its own digest."""

DERIVED_FROM: frozenset[str] = frozenset(
    {
        "run.started",
        "model.started",
        "model.response",
        "model.failed",
        "model.interrupted",
        "tool.returned",
        "tool.failed",
        "tool.resolved",
        "checkpoint",
    }
)
"""The journal kinds `Recording.from_journal` reads; a journal of these alone gives the same
recording."""

STORED_FROM: frozenset[str] = DERIVED_FROM - {"checkpoint"}
"""The journal kinds `Recording.from_store` reads: it takes the outcome from the run's state,
never from a `checkpoint` entry (a replay keeps no others of its own run)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Recording:
    """A recorded run, ready to replay against today's spec and code."""

    task: str
    input: str
    principal: Mapping[str, Any]
    tenant: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    given_labels: Mapping[str, str] | None = None
    """The labels its caller gave (`labels` adds its task's); a replay merges them with today's
    task labels. None: recorded before they were kept, and `labels` are replayed as they are."""
    spec_digest: str = ""
    """The digest of the spec that ran it (kept in the store, not in golden files)."""
    history: tuple[Mapping[str, Any], ...] = ()
    system: str | None = None
    """The system prompt of its model requests, kept once (None: not recorded, as in `@1`)."""
    tool_schemas: tuple[Mapping[str, Any], ...] | None = None
    """The tool schemas its model requests offered, kept once (None: not recorded)."""
    models: Mapping[str, Mapping[str, Any]] | None = None
    """The spec's declaration of each model its task may ask (`use`, `model`, `options`; what
    the run's environment set kept as `(environment)`: `runtime.declared`; redacted, with the
    digests of the options redaction changed: `recording.kept`), by name (None: recorded
    before they were kept, and not compared)."""
    model_turns: tuple[ModelTurn, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    approvals: tuple[ApprovalDecision, ...] = ()
    status: str = "completed"
    output: str | None = None
    error: Mapping[str, str] | None = None
    limit: str | None = None
    usage: Mapping[str, Any] = field(default_factory=dict)
    control: Mapping[str, Any] | None = None
    """The `cancel()` or `pause()` that ended the run where it had stopped, as `{action:
    cancel | pause, status, step}` (the status and step it had stopped at); a replay that stops
    at the same status and step applies it too. None: the run ended by itself."""
    trace: Trace = field(default_factory=Trace)
    grades: tuple[Mapping[str, Any], ...] = ()
    """Online eval grades of the outcome: `{grader, score, passed, detail, error}` each."""
    run_id: str | None = None
    """The stored run it came from; never written to a golden file."""
    source: Path | None = None
    """The file it was loaded from, if any."""
    _redacted: bool = field(default=False, init=False, repr=False, compare=False)
    """Set on what `redacted()` returns: redacting it again would give it back unchanged."""

    @classmethod
    async def from_store(cls, store: Store, run_id: str) -> Recording:
        """The recording of a stored run, derived from its journal.

        `RecordingError` when the run was not recorded.
        """
        record = await store.get_run(run_id)
        if not record.record:
            raise RecordingError(
                f"run {run_id} was not recorded: start runs with state.record: true "
                "(or load(..., record=True)) to replay them"
            )
        return cls.from_journal(await store.journal(run_id), record=record)

    @classmethod
    def from_journal(
        cls,
        entries: Iterable[JournalEntry | Mapping[str, Any]],
        *,
        record: RunRecord | None = None,
        outcome: Mapping[str, Any] | None = None,
    ) -> Recording:
        """Derive a recording from a run's journal entries (stored ones, or archive records).

        The run's input comes from `run.started`, the model turns from each attempt that got
        an answer or an error or that the run's deadline cut, the tool results from every
        invoked call and every resolution, the approvals from the decisions the run took in.
        The outcome is the run's state when `record` is given, else `outcome` (its `trace` a
        list of decisions' JSON forms or a `Trace`), else the last `checkpoint` entry.
        `HarnessError` when there is no `run.started` entry.
        """
        started: Mapping[str, Any] | None = None
        run_id: str | None = record.run_id if record is not None else None
        requests: dict[str, tuple[str, Mapping[str, Any]]] = {}
        turns: list[ModelTurn] = []
        tools: list[ToolResult] = []
        approvals: list[ApprovalDecision] = []
        checkpoint: Mapping[str, Any] | None = None
        stopped: Mapping[str, Any] | None = None
        """The last checkpoint a control did not write: where a cancel or pause found it."""
        sent: dict[str, Any] = {"system": None, "tools": [], "messages": []}
        for item in entries:
            if isinstance(item, JournalEntry):  # read as it is, not copied into a record first
                kind, payload, attempt = item.kind, item.payload, item.attempt_id
                entry_run: Any = item.run_id
            else:
                kind, payload = item["kind"], item["payload"]
                attempt, entry_run = item.get("attempt_id"), item.get("run_id")
            if kind == "run.started":
                started, run_id = payload, run_id or entry_run
            elif kind == "model.started":
                requests[str(attempt)] = (payload["model"], _whole(payload, sent))
            elif (
                kind in ("model.response", "model.failed")
                or (kind == "model.interrupted" and payload.get("deadline"))
            ) and str(attempt) in requests:
                model, request = requests.pop(str(attempt))
                if kind == "model.interrupted":  # the run's deadline cut the call
                    answer = {"interrupted": "deadline"}
                elif kind == "model.response":
                    answer = payload["answer"]
                    if not isinstance(answer, Mapping):
                        raise TypeError(f"a model.response answer is a mapping, got {answer!r}")
                elif "error" in payload:
                    answer = {"error": payload["error"], "message": payload["message"]}
                    for kept in ("usage", "wait"):  # what it cost, and what its retry waited
                        if kept in payload:
                            answer[kept] = payload[kept]
                else:  # the model raised something else: the run failed at this turn
                    answer = {"raised": payload["exception"], "message": payload["message"]}
                turns.append(
                    ModelTurn(
                        model=model,
                        digest=request["digest"],
                        answer=answer,
                        request=request.get("request"),
                        parts=_parts(request.get("parts")),
                    )
                )
            elif (kind in ("tool.returned", "tool.failed") and payload.get("invoked")) or (
                kind == "tool.resolved" and payload.get("how") in ("result", "abort")
            ):
                tools.append(
                    ToolResult(
                        name=payload["name"], args=payload["args"], outcome=payload["outcome"]
                    )
                )
            elif kind == "tool.resolved" and payload.get("how") == "approval":
                approvals.append(
                    ApprovalDecision(
                        tool=payload["tool"],
                        args=payload["args"],
                        rule=payload.get("rule"),
                        decision=payload["decision"],
                        approver=payload["approver"],
                        reason=payload.get("reason"),
                    )
                )
            elif kind == "checkpoint":
                checkpoint = payload
                if payload.get("status") not in _CONTROLLED:
                    stopped = payload
        if started is None:
            raise HarnessError(
                f"the journal of run {run_id or '(unknown)'} has no run.started entry: "
                "it cannot be replayed"
            )
        if record is not None:
            state = record.state
            final: Mapping[str, Any] = {
                "status": record.status,
                "output": state.get("output"),
                "error": state.get("error"),
                "limit": state.get("limit"),
                "usage": state.get("usage") or {},
                "trace": state.get("trace") or [],
            }
        else:
            final = outcome or checkpoint or {"status": "running"}
        control = _control(final, stopped)
        return cls(
            task=started["task"],
            input=started["input"],
            principal=dict(started["principal"]),
            tenant=started.get("tenant"),
            labels=dict(started.get("labels") or {}),
            given_labels=(
                None if started.get("given_labels") is None else dict(started["given_labels"])
            ),
            spec_digest=str(started.get("spec_digest") or ""),
            history=tuple(started.get("history") or ()),
            system=started.get("system"),
            tool_schemas=(
                None if started.get("tool_schemas") is None else tuple(started["tool_schemas"])
            ),
            models=None if started.get("models") is None else dict(started["models"]),
            model_turns=tuple(turns),
            tool_results=tuple(tools),
            approvals=tuple(approvals),
            status=str(final["status"]),
            output=final.get("output"),
            error=final.get("error"),
            limit=final.get("limit"),
            usage=dict(final.get("usage") or {}),
            control=control,
            # built when first read (a replay's own recording mostly never is); the entries
            # are the journal's or the state's, read for this recording alone
            trace=(
                final["trace"]
                if isinstance(final.get("trace"), Trace)
                else Trace._of_state(list(final.get("trace") or []))
            ),
            run_id=run_id,
        )

    @classmethod
    def load(cls, path: str | Path, *, source: str | Path | None = None) -> Recording:
        """Load a golden recording file (`.yaml`) or a `.hx` archive exported with payloads.

        `source`: how the recording names its file (`Recording.source`; default `path`).
        `ArchiveError` when it is malformed, or when the archive holds no payloads (it was
        exported metadata-only) and so cannot be replayed.
        """
        path = Path(path)
        if path.suffix == ".hx":
            return cls.from_archive(path, source=source)
        from pytest_harness.recording.golden import recording_fields

        fields = recording_fields(path)
        if source is not None:
            fields["source"] = Path(source)
        return cls(**fields)

    @classmethod
    def from_archive(
        cls, path: str | os.PathLike[str], *, source: str | Path | None = None
    ) -> Recording:
        """The recording of a `.hx` archive exported with payloads (any file name).

        `source`: how the recording names its file (default `path`). `ArchiveError` when the
        archive is malformed, holds no payloads, or its records do not make a recording.
        """
        from pytest_harness.archive.reader import replayable_records
        from pytest_harness.errors import ArchiveError
        from pytest_harness.recording.golden import check_recording

        shown = os.fspath(path)
        records = replayable_records(path)
        try:
            recording = cls.from_journal(records)
            data = recording.to_dict()
        except (HarnessError, AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ArchiveError(f"{shown}: its records do not make a recording: {exc}") from None
        check_recording(data, shown)  # what a golden file is checked for, before any replay
        return replace(recording, source=Path(shown if source is None else source))

    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """Write the recording as a golden file, atomically.

        An existing file is kept (`FileExistsError`) unless `overwrite`.
        """
        from pytest_harness.recording.golden import write_recording

        return write_recording(self, Path(path), overwrite=overwrite)

    def redacted(self) -> Recording:
        """A copy with credentials redacted in every field, consistently (DESIGN §6).

        Credential-shaped keys and secret shapes in free text, in the input, principal,
        labels, history, model turns, tool calls and results, approvals (arguments, approver
        and reason), output, error and trace: everything a golden file or a report shows (a
        refusal message or a model option that redaction changed keeps its digest:
        `recording.kept`).
        Redaction is idempotent, so the copy's own `redacted()` is the copy itself.
        """
        if self._redacted:
            return self
        done = replace(
            self,
            input=redact(self.input),
            principal=redact(self.principal),
            labels=redact(self.labels),
            given_labels=None if self.given_labels is None else redact(self.given_labels),
            history=tuple(redact(list(self.history))),
            system=redact(self.system),
            tool_schemas=(
                None if self.tool_schemas is None else tuple(redact_schema(list(self.tool_schemas)))
            ),
            models=None if self.models is None else kept_models(self.models),
            model_turns=tuple(
                replace(
                    t,
                    answer=redact(t.answer),
                    request=None if t.request is None else redact(t.request),
                )
                for t in self.model_turns
            ),
            tool_results=tuple(
                replace(r, args=redact(r.args), outcome=redact(r.outcome))
                for r in self.tool_results
            ),
            approvals=tuple(
                replace(
                    a,
                    args=redact(a.args),
                    approver=redact(a.approver),
                    reason=None if a.reason is None else redact(a.reason),
                )
                for a in self.approvals
            ),
            output=redact(self.output),
            error=None if self.error is None else redact(self.error),
            trace=Trace.from_list(kept_trace(self.trace.to_list())),
            grades=tuple(redact([dict(g) for g in self.grades])),
        )
        object.__setattr__(done, "_redacted", True)
        return done

    def to_dict(self) -> dict[str, Any]:
        """The golden form (`@2`): fixed key order, request parts by digest, stable ids.

        The system prompt and the tool schemas are kept once; each turn keeps the digests of
        its request's parts (or, migrated from `@1`, the digest of the whole request).
        """
        data: dict[str, Any] = {
            "format": "pytest-harness/recording@2",
            "task": self.task,
            "input": self.input,
            "principal": dict(self.principal),
            "tenant": self.tenant,
            "labels": dict(self.labels),
            **({} if self.given_labels is None else {"given_labels": dict(self.given_labels)}),
            "history": [dict(m) for m in self.history],
            "system": self.system,
            "tool_schemas": None
            if self.tool_schemas is None
            else [dict(t) for t in self.tool_schemas],
            **({} if self.models is None else {"models": _models(self.models)}),
            "model_turns": [
                {
                    "model": t.model,
                    "request": dict(t.parts) if t.parts is not None else {"digest": t.digest},
                    "answer": dict(t.answer),
                }
                for t in self.model_turns
            ],
            "tool_results": [
                {"name": r.name, "args": dict(r.args), "outcome": dict(r.outcome)}
                for r in self.tool_results
            ],
            "approvals": [
                {
                    "tool": a.tool,
                    "args": dict(a.args),
                    "rule": a.rule,
                    "decision": a.decision,
                    "approver": dict(a.approver),
                    "reason": a.reason,
                }
                for a in self.approvals
            ],
            "outcome": {
                "status": self.status,
                "output": self.output,
                "error": None if self.error is None else dict(self.error),
                "limit": self.limit,
                "usage": dict(self.usage),
                **({} if self.control is None else {"control": dict(self.control)}),
            },
            "trace": self.trace.to_list(),
        }
        if self.grades:  # absent without graders, so files without them read as before
            data["grades"] = [
                {k: g.get(k) for k in ("grader", "score", "passed", "detail", "error")}
                for g in self.grades
            ]
        cleaned: dict[str, Any] = stable_ids(data)
        return cleaned


_CONTROLLED = {"cancelled": "cancel", "paused": "pause"}
"""The statuses only a control request ends a run with, and the control that does."""


def _control(final: Mapping[str, Any], stopped: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The control that ended a run `cancelled` or `paused`, and where it found the run.

    Where the run had stopped (`stopped`, its last checkpoint before the control's) when
    nothing happened between the two but the control's own `output` decision (a cancel's);
    else it was `running` at its last step.
    """
    action = _CONTROLLED.get(str(final["status"]))
    if action is None:
        return None
    steps = (final.get("usage") or {}).get("steps", 0)
    trace = list(final.get("trace") or ())
    if trace and _kind(trace[-1]) == "output":
        trace.pop()
    if stopped is not None and len(stopped.get("trace") or ()) == len(trace):
        return {"action": action, "status": str(stopped["status"]), "step": steps}
    return {"action": action, "status": "running", "step": steps}


def _models(models: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The declarations as a golden file writes them, each one's keys in `DECLARED` order.

    Whatever order they were read in (a Temporal run started by a client with Temporal's
    default converter hands its journal back with its keys sorted); a kept declaration's
    `option_digests` (`recording.kept`) come last.
    """
    return {
        name: {key: model[key] for key in (*DECLARED, OPTION_DIGESTS) if key in model}
        for name, model in models.items()
    }


def _kind(decision: Any) -> Any:
    """A trace decision's kind, of a `Decision` or of its JSON form."""
    return decision.kind if isinstance(decision, Decision) else decision.get("kind")


def _parts(parts: Any) -> Mapping[str, Any] | None:
    """A `model.started` request's part digests: a mapping, or None (a request of `@1`)."""
    if parts is not None and not isinstance(parts, Mapping):
        raise TypeError(f"a model.started request's parts are a mapping, got {parts!r}")
    return parts


def _whole(payload: Mapping[str, Any], sent: dict[str, Any]) -> Mapping[str, Any]:
    """A `model.started` payload with its request rebuilt whole from the deltas before it."""
    delta = payload.get("request")
    if not isinstance(delta, Mapping) or "messages_from" not in delta:
        return payload
    messages = [*sent["messages"][: delta["messages_from"]], *delta["messages"]]
    request = {
        "system": delta.get("system", sent["system"]),
        "messages": messages,
        "tools": delta.get("tools", sent["tools"]),
    }
    sent.update(request)
    return {**payload, "request": request}
