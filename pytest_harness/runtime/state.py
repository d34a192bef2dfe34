"""A run's checkpoint: what the store keeps so that any process can continue the run.

The state is plain JSON: the run's messages, the model turns taken, what it spent, the active
time used against its deadline, each model's retry waits and first-event times (so a resumed
run continues with what is left of its `retry_budget` and `first_event_timeout`), its trace,
and the tool calls of the current model answer with how far each got: `planned` →
`dispatched` (intent committed, the tool may be running) → `done` (outcome committed). A
`dispatched` call found by a worker that resumes an interrupted run becomes `uncertain` when its
tool's replay policy is `manual`; `Harness.resolve` settles it (`done`) or sends it back to be
invoked again (`retry`). `result_from_state` turns the state into the `RunResult` callers see.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_harness.models.base import Message
from pytest_harness.runtime.results import (
    ApprovalRequest,
    Call,
    PendingTool,
    RunResult,
    RunStatus,
    Usage,
    run_status,
)
from pytest_harness.runtime.trace import Trace
from pytest_harness.store.helpers import PreparedJSON, json_text

__all__ = ["RunState", "StateText", "call_approvals", "initial_state", "result_from_state"]

STATE_VERSION = 1


@dataclass(slots=True, kw_only=True)
class RunState:
    """The mutable checkpoint of one run while a worker drives it."""

    phase: str = "start"
    """`start` (input not yet checked), `model`, `tools`, or `ended`."""
    messages: list[Message] = field(default_factory=list)
    turns: dict[str, int] = field(default_factory=dict)
    """Turns requested from each model so far, failed attempts included (scripts are indexed
    by it, so a fallback model's script starts at its own first turn)."""
    tokens_in: int = 0
    tokens_out: int = 0
    usd: float = 0.0
    steps: int = 0
    tool_calls: int = 0
    usage_incomplete: bool = False
    """A model attempt failed after it may have been charged (a server error, a time-out)."""
    truncated: int = 0
    """Model answers cut at their token limit (`incomplete`), whatever `on_truncation` did."""
    elapsed: float = 0.0
    """Active seconds spent, counted against the deadline; waiting for a person is not."""
    clocks: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per model: `retry_waited` (seconds of retry waits spent of its `retry_budget`),
    `call_failures` (failed attempts of the call under way, so a resumed call keeps its
    `retries` count), and `first_event_last` / `first_event_slowest` (seconds its attempts took
    to start replying)."""
    waiting: dict[str, Any] | None = None
    """The model attempt waiting for its first byte or event, when its model has a
    `first_event_timeout`: `model`, `attempt`, `since` (wall-clock start) and `carried`
    (seconds already waited by attempts of this call that a stopped worker left unanswered)."""
    trace: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    """Tool calls of the current model answer: id, name, args, key, verdict, status, attempt,
    outcome, and `resolution` (`{how, by}`) once `Harness.resolve` settled one. A call that
    needs approval has `approvals`: one entry per matching approve rule (`approval_id`, `rule`,
    `approvers`, `self_approve`, `decision`), and `decision`: None until every entry is
    approved (`approve`) or one is declined (`decline`; the others become `moot`). A call's
    fields change as it goes, but its `args` and `outcome` are replaced whole, never changed in
    place: journal payloads and trace entries hold them (a replay's twin keeps its journal's
    payloads as noted, `replay/twin_store.py`)."""
    output: str | None = None
    error: dict[str, str] | None = None
    limit: str | None = None
    attempt: dict[str, Any] | None = None
    """The model attempt in flight, `{id, model}`, as committed with its `model.started`
    journal entry (recorded runs only): a worker that resumes the run after a crash journals
    it as interrupted."""
    history_runs: list[str] | None = None
    """The runs of its session whose messages come before this run's: those completed when it
    was created with a `session_id` (None: started in a new session, which no run precedes).
    Each drive asks with exactly these, so a run of the session that completes while this one
    waits, or that was created at the same moment, does not change its conversation."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the store keeps."""
        data: dict[str, Any] = {
            "v": STATE_VERSION,
            "phase": self.phase,
            "turns": self.turns,
            "usage": self._usage_dict(),
            "elapsed": self.elapsed,
            "clocks": self.clocks,
            "waiting": self.waiting,
            "calls": self.calls,
            "output": self.output,
            "error": self.error,
            "limit": self.limit,
            "attempt": self.attempt,
        }
        if self.history_runs is not None:
            data["history_runs"] = self.history_runs
        # the two lists that only grow come last: `StateText` encodes the rest in one call
        data["messages"] = self.messages
        data["trace"] = self.trace
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunState:
        """Rebuild the state from the store's JSON form."""
        usage = data.get("usage") or {}
        return cls(
            phase=data.get("phase", "start"),
            messages=list(data.get("messages") or []),
            turns=dict(data.get("turns") or {}),
            tokens_in=int(usage.get("tokens_in", 0)),
            tokens_out=int(usage.get("tokens_out", 0)),
            usd=float(usage.get("usd", 0.0)),
            steps=int(usage.get("steps", 0)),
            tool_calls=int(usage.get("tool_calls", 0)),
            usage_incomplete=bool(usage.get("incomplete", False)),
            truncated=int(usage.get("truncated", 0)),
            elapsed=float(data.get("elapsed", 0.0)),
            clocks={str(k): dict(v) for k, v in (data.get("clocks") or {}).items()},
            waiting=dict(data["waiting"]) if data.get("waiting") else None,
            trace=list(data.get("trace") or []),
            calls=[dict(c) for c in data.get("calls") or []],
            output=data.get("output"),
            error=data.get("error"),
            limit=data.get("limit"),
            attempt=data.get("attempt"),
            history_runs=list(runs) if (runs := data.get("history_runs")) is not None else None,
        )

    def _usage_dict(self) -> dict[str, Any]:
        """`self.usage().to_dict()`, without the `Usage` in between (it is built per commit)."""
        data: dict[str, Any] = {
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "usd": round(self.usd, 10),
            "steps": self.steps,
            "tool_calls": self.tool_calls,
        }
        if self.usage_incomplete:
            data["incomplete"] = True
        if self.truncated:
            data["truncated"] = self.truncated
        return data

    def usage(self) -> Usage:
        """What the run spent so far."""
        return Usage(
            tokens_in=self.tokens_in,
            tokens_out=self.tokens_out,
            usd=round(self.usd, 10),
            steps=self.steps,
            tool_calls=self.tool_calls,
            incomplete=self.usage_incomplete,
            truncated=self.truncated,
        )

    def spent(self) -> dict[str, Any]:
        """The `spent` variable of CEL rules."""
        return {
            "steps": self.steps,
            "tokens": self.tokens_in + self.tokens_out,
            "usd": self.usd,
            "tool_calls": self.tool_calls,
        }


@functools.cache
def _initial_text() -> str:
    """The text of a new run's state (the same for every run)."""
    return json_text(RunState().to_dict())


def initial_state(history_runs: list[str] | None = None) -> Mapping[str, Any]:
    """`RunState(history_runs=...).to_dict()` for a new run.

    A session's first run (no `history_runs`) gets it with its text, encoded once per process.
    """
    if history_runs is not None:
        return RunState(history_runs=history_runs).to_dict()
    return PreparedJSON(RunState().to_dict(), _initial_text)


class _ListText:
    """The JSON text of one list of the state, its items encoded once each."""

    __slots__ = ("items", "texts")

    def __init__(self) -> None:
        self.items: list[Any] = []
        """The items encoded so far (held, so an identity seen here is never reused)."""
        self.texts: list[str] = []

    def text(self, value: list[Any]) -> str:
        items, texts = self.items, self.texts
        same, limit = 0, min(len(items), len(value))
        while same < limit and items[same] is value[same]:
            same += 1
        if same < len(items):  # replaced or cut: encode from there on
            del items[same:], texts[same:]
        for item in value[same:]:
            texts.append(json_text(item))
            items.append(item)
        return "[" + ",".join(texts) + "]"


class StateText:
    """The state's JSON text for each commit of one drive, each entry encoded once.

    Its messages and trace entries are encoded once each instead of at every commit. A drive
    only appends to `messages` and `trace`, and never changes an entry once it is appended (an
    entry is built whole, then appended): the text of the entry at a place is reused while the
    very same object is still there. The rest of the state (the small part that changes from
    one commit to the next) is encoded in one call. The text is exactly what encoding the
    whole state gives, and so are the errors (`store.helpers.PreparedJSON`).
    """

    __slots__ = ("_messages", "_trace")

    def __init__(self) -> None:
        self._messages = _ListText()
        self._trace = _ListText()

    def prepared(self, state: dict[str, Any]) -> PreparedJSON:
        """`state` (from `RunState.to_dict`), taking its text from here when it is stored."""
        return PreparedJSON(state, lambda: self._text(state))

    def list_text(self, key: str, value: Any) -> str:
        """The text of `value`, the state's list under `key` (`messages`, `trace`), as here."""
        cached = self._list(key)
        if cached is None or type(value) is not list:
            return json_text(value)
        return cached.text(value)

    def item_text(self, key: str, index: int, item: Any) -> str:
        """The text of `item`, taken from here when it is the entry at `index` of `key`'s list."""
        cached = self._list(key)
        if cached is not None and index < len(cached.items) and cached.items[index] is item:
            return cached.texts[index]
        return json_text(item)

    def _list(self, key: str) -> _ListText | None:
        return self._messages if key == "messages" else self._trace if key == "trace" else None

    def _text(self, state: dict[str, Any]) -> str:
        """The whole state's text: `RunState.to_dict`'s keys end with `messages`, `trace`."""
        last = reversed(state)
        if len(state) < 3 or next(last) != "trace" or next(last) != "messages":
            return json_text(state)  # not a state as `RunState.to_dict` orders it
        rest = dict(state)
        messages, trace = rest.pop("messages"), rest.pop("trace")
        return (
            json_text(rest)[:-1]
            + ',"messages":'
            + (self._messages.text(messages) if type(messages) is list else json_text(messages))
            + ',"trace":'
            + (self._trace.text(trace) if type(trace) is list else json_text(trace))
            + "}"
        )


def call_approvals(call: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The approval requests of a call in the state (one per matching approve rule).

    A call checkpointed before calls could need several approvals has one, in flat fields.
    """
    entries = call.get("approvals")
    if entries is not None:
        return list(entries)
    if call.get("approval_id") is None:
        return []
    return [
        {
            "approval_id": call["approval_id"],
            "rule": call.get("rule"),
            "approvers": list(call.get("approvers") or ()),
            "self_approve": bool(call.get("self_approve")),
            "decision": call.get("decision"),
        }
    ]


def result_from_state(
    *,
    run_id: str,
    session_id: str,
    task: str,
    status: str,
    state: Mapping[str, Any],
    labels: Mapping[str, str],
    answered: frozenset[str] = frozenset(),
) -> RunResult:
    """The `RunResult` of a stored run.

    `answered` names approvals already decided in the store but not yet taken into the run's
    state (the run resumes once every one is answered); they are no longer pending.
    """
    status_ = run_status(status)
    pending: list[PendingTool] = []
    approval: ApprovalRequest | None = None
    for call in state.get("calls") or []:
        if call.get("verdict") == "approve" and call.get("decision") is None:
            for entry in call_approvals(call):
                if entry.get("decision") is not None or entry["approval_id"] in answered:
                    continue
                request = ApprovalRequest(
                    approval_id=entry["approval_id"],
                    execution_key=call["key"],
                    tool=call["name"],
                    args=call["args"],
                    rule_id=entry["rule"],
                    approvers=tuple(entry.get("approvers") or ()),
                    requested_by=call["requested_by"],
                )
                approval = approval or request
                pending.append(
                    PendingTool(
                        execution_key=call["key"],
                        call=Call(call["name"], call["args"]),
                        status="approval",
                        approval_id=entry["approval_id"],
                    )
                )
        elif call.get("status") == "uncertain":
            pending.append(
                PendingTool(
                    execution_key=call["key"],
                    call=Call(call["name"], call["args"]),
                    status="uncertain",
                )
            )
    return RunResult(
        run_id=run_id,
        session_id=session_id,
        task=task,
        status=status_,
        output=state.get("output"),
        error=state.get("error"),
        usage=Usage.from_dict(state.get("usage") or {}),
        approval=approval if status_ is RunStatus.AWAITING_APPROVAL else None,
        pending=tuple(pending) if not status_.ended else (),
        trace=Trace._of_state(state.get("trace") or ()),
        labels=dict(labels),
        limit=state.get("limit"),
    )
